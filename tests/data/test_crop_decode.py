"""The CPU Loader's crop decode: with a RandomResizedCrop first, the loader
draws each sample's box before decoding and decodes only it (libjpeg-turbo
builds). Batches are byte for byte those of a whole decode, every epoch,
fused or not, resumed or not; what cannot take it (a cache, other formats, a
damaged JPEG, other transforms) decodes whole, and stats() says which ran.
Batch outputs come from reused host buffers that a held batch keeps."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from conftest import cpu_jpeg, resumed_after
from PIL import Image

from gdsio import Cache, _core
from gdsio.data import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    BatchInfo,
    ColorJitter,
    Compose,
    Loader,
    Normalize,
    RandomHorizontalFlip,
    RandomResizedCrop,
    Resize,
    ToDtype,
)

needs_box = pytest.mark.skipif(not _core.jpeg_cpu_available(), reason=_core.jpeg_cpu_version())

TRAIN = [RandomResizedCrop(24), RandomHorizontalFlip(), ToDtype(torch.float32, scale=True),
         Normalize(IMAGENET_MEAN, IMAGENET_STD)]


def _photo(h: int, w: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    a = np.stack([(x * 3 + y) % 256, (y * 5 + seed) % 256, ((x * y) // 7) % 256], -1)
    return (a + rng.integers(0, 30, a.shape)).clip(0, 255).astype(np.uint8)


def _folder(root, n: int = 14, fmt: str = "JPEG"):
    for i in range(n):
        d = root / f"c{i % 2}"
        d.mkdir(exist_ok=True)
        h, w = 40 + 7 * i, 90 - 3 * i
        kw = {"quality": 90, "subsampling": i % 3} if fmt == "JPEG" else {}
        Image.fromarray(_photo(h, w, i)).save(d / f"{i:03d}.{fmt.lower()}", fmt, **kw)
    return root


def _epochs(loader: Loader, n: int = 2) -> list[tuple[torch.Tensor, torch.Tensor]]:
    out = []
    for e in range(n):
        loader.set_epoch(e)
        out += [(x.clone(), y.clone()) for x, y in loader]
    return out


def _same(a, b) -> bool:
    return len(a) == len(b) and all(torch.equal(x, p) and torch.equal(y, q) for (x, y), (p, q) in zip(a, b))


@needs_box
@pytest.mark.parametrize("chain", [TRAIN, [RandomResizedCrop(20, scale=(0.2, 0.5))],
                                   [RandomResizedCrop(24), ColorJitter(0.3, 0.3), RandomHorizontalFlip()]])
def test_batches_equal_a_whole_decode(tmp_path, chain):
    _folder(tmp_path)
    kw = dict(device="cpu", shuffle=True, seed=11, transform=Compose(chain))
    box, whole = Loader(tmp_path, 4, **kw), Loader(tmp_path, 4, crop_decode=False, **kw)
    assert _same(_epochs(box), _epochs(whole))
    got = box.stats().decode_backends
    assert got.get("libjpeg-turbo-box", 0) > 0 and sum(got.values()) == 28
    assert whole.stats().decode_backends == {cpu_jpeg(): 28}


@needs_box
def test_a_bare_random_resized_crop_and_resume(tmp_path):
    _folder(tmp_path)
    kw = dict(device="cpu", shuffle=True, seed=5, transform=RandomResizedCrop(16))
    ref = [x for x, _ in Loader(tmp_path, 3, crop_decode=False, **kw)]
    c, rest = resumed_after(lambda: Loader(tmp_path, 3, **kw))
    assert len(rest) == len(ref) - 2 and all(torch.equal(p, q) for p, q in zip(rest, ref[2:]))
    assert "libjpeg-turbo-box" in c.stats().decode_backends


def test_what_decodes_whole(tmp_path):
    # Other formats, a cache of decoded samples, a transform that is not a crop first, crop_decode=False.
    png = tmp_path / "png"
    png.mkdir()
    _folder(png, 6, fmt="PNG")
    a = Loader(png, 3, device="cpu", transform=Compose(TRAIN))
    list(a)
    assert a.stats().decode_backends == {"pillow": 6}
    jpg = tmp_path / "jpg"
    jpg.mkdir()
    _folder(jpg, 6)
    for kw in (dict(cache=Cache("64M")), dict(transform=Compose([Resize((24, 24))])), dict(crop_decode=False)):
        kw.setdefault("transform", Compose(TRAIN))
        ld = Loader(jpg, 3, device="cpu", **kw)
        list(ld)
        assert ld.stats().decode_backends == {cpu_jpeg(): 6}, kw
    with pytest.raises(TypeError, match="crop_decode must be a bool"):
        Loader(jpg, 3, device="cpu", crop_decode=1)


@needs_box
def test_a_damaged_jpeg_decodes_as_without_boxes(tmp_path):
    """A JPEG libjpeg-turbo warns about goes to the whole-image decoders,
    which decide what it gives: the same batches with and without boxes."""
    _folder(tmp_path, 6)
    p = tmp_path / "c0" / "002.jpeg"
    b = bytearray(p.read_bytes())
    sos = b.index(b"\xff\xda")
    at = sos + 2 + int.from_bytes(b[sos + 2 : sos + 4], "big") + 8  # just into the entropy-coded data
    b[at : at + 2] = b"\xff\xd5"  # a restart marker where none belongs: libjpeg-turbo warns and resyncs
    p.write_bytes(bytes(b))
    kw = dict(device="cpu", seed=2, transform=Compose(TRAIN), on_error="skip")
    box = Loader(tmp_path, 3, **kw)
    assert _same(_epochs(box, 1), _epochs(Loader(tmp_path, 3, crop_decode=False, **kw), 1))
    assert box.stats().decode_backends.get("pillow") == 1  # the damaged one: whole, by the decoder that decides
    (tmp_path / "c1" / "003.jpeg").write_bytes(b"\xff\xd8\xff\xe0 not a JPEG")
    with pytest.raises(Exception, match="003.jpeg"):
        list(Loader(tmp_path, 3, device="cpu", transform=Compose(TRAIN)))


def test_box_drawer_equals_the_batch_draw():
    """The reader threads' one-image draw (scalars) equals boxes() (vectorised),
    the torchvision fallback included (sizes no crop of the ratios fits)."""
    rng = np.random.default_rng(0)
    sizes = [(int(h), int(w)) for h, w in rng.integers(1, 2000, (400, 2))] + [(1000, 3), (3, 1000), (1, 1), (2, 700)]
    for t in (RandomResizedCrop(224), RandomResizedCrop(8, scale=(0.5, 0.9), ratio=(0.2, 5.0)),
              RandomResizedCrop(8, scale=(0.9, 1.0), ratio=(2.0, 3.0))):
        info = BatchInfo(7, 3, np.arange(100, 100 + len(sizes)))
        draw = t.decode_boxes(info)
        from gdsio.transforms.classes import uniforms, _salt

        ref = t.boxes(sizes, uniforms(info, _salt(t, -1), 40))
        got = np.asarray([draw(k, h, w) for k, (h, w) in enumerate(sizes)])
        assert np.array_equal(got, ref)


def test_batch_buffers_are_reused_but_never_under_a_held_batch(tmp_path):
    _folder(tmp_path, 12)
    kw = dict(device="cpu", shuffle=True, seed=1, transform=Compose(TRAIN), prefetch=1)
    held = [x for x, _ in Loader(tmp_path, 2, **kw)]  # every batch held: none may be overwritten
    ref = [x for x, _ in Loader(tmp_path, 2, crop_decode=False, **kw)]
    assert all(torch.equal(p, q) for p, q in zip(held, ref))
    assert len({x.data_ptr() for x in held}) == len(held)
    ld = Loader(tmp_path, 2, **kw)
    ptrs = [x.data_ptr() for x, _ in ld for _ in [0]]  # each batch dropped at once
    assert len(set(ptrs)) < len(ptrs)  # buffers came round again


def test_fused_out_argument():
    import gdsio.transforms as T

    imgs = [torch.from_numpy(_photo(30, 40, 0)).permute(2, 0, 1), torch.from_numpy(_photo(50, 20, 1)).permute(2, 0, 1)]
    boxes = [[0, 0, 30, 40], [5, 2, 20, 10]]
    ref = T.resized_crop_flip_normalize(imgs, boxes, [True, False], 16, IMAGENET_MEAN, IMAGENET_STD, dtype=torch.float32)
    out = torch.full((2, 3, 16, 16), math.nan)
    got = T.resized_crop_flip_normalize(imgs, boxes, [True, False], 16, IMAGENET_MEAN, IMAGENET_STD,
                                        dtype=torch.float32, out=out)
    assert got is out and torch.equal(out, ref)
    with pytest.raises(ValueError, match="out must be a contiguous"):
        T.resized_crop_flip_normalize(imgs, boxes, None, 16, None, None, dtype=torch.uint8, out=out)
