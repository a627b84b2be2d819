"""The batch transform classes (gdsio.data.Compose & co.) on the CPU, and the
loader on image folders: torchvision's parameter rules, the fused path equal
to the unfused one, Pillow parity, per-sample randomness keyed by
(seed, epoch, index)."""

from __future__ import annotations

import json
import logging
import math

import numpy as np
import pytest
import torch
from conftest import cpu_jpeg
from PIL import Image

from gdsio import _core
from gdsio.data import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    BatchInfo,
    CenterCrop,
    Compose,
    Loader,
    Normalize,
    RandomHorizontalFlip,
    RandomResizedCrop,
    Resize,
    SampleError,
    ToDtype,
    batch_context,
)
from gdsio.transforms.classes import _salt, uniforms


def images(sizes, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 256, (3, h, w), dtype=torch.uint8, generator=g) for h, w in sizes]


SIZES = [(37, 50), (50, 37), (64, 64), (20, 90), (90, 20), (375, 500)]


def torchvision_rrc(h, w, u, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)):
    """torchvision's RandomResizedCrop.get_params, line by line, its random
    draws replaced by the uniforms u (10 tries x 4)."""
    area = h * w
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    for k in range(10):
        target_area = area * (scale[0] + (scale[1] - scale[0]) * u[k, 0])
        aspect_ratio = math.exp(log_ratio[0] + (log_ratio[1] - log_ratio[0]) * u[k, 1])
        cw = int(round(math.sqrt(target_area * aspect_ratio)))
        ch = int(round(math.sqrt(target_area / aspect_ratio)))
        if 0 < cw <= w and 0 < ch <= h:
            return int(u[k, 2] * (h - ch + 1)), int(u[k, 3] * (w - cw + 1)), ch, cw
    in_ratio = float(w) / float(h)
    if in_ratio < min(ratio):
        cw, ch = w, int(round(w / min(ratio)))
    elif in_ratio > max(ratio):
        ch, cw = h, int(round(h * max(ratio)))
    else:
        cw, ch = w, h
    return (h - ch) // 2, (w - cw) // 2, ch, cw


@pytest.mark.parametrize("scale,ratio", [((0.08, 1.0), (3 / 4, 4 / 3)), ((0.9, 1.0), (1.0, 1.0)), ((0.5, 0.5), (2.0, 3.0))])
def test_random_resized_crop_boxes_follow_torchvision(scale, ratio):
    t = RandomResizedCrop(16, scale=scale, ratio=ratio)
    sizes = SIZES * 50
    u = uniforms(BatchInfo(3, 1, np.arange(len(sizes))), 5, 40)
    got = t.boxes(sizes, u)
    want = [torchvision_rrc(h, w, u[i].reshape(10, 4), scale, ratio) for i, (h, w) in enumerate(sizes)]
    assert got.tolist() == [list(b) for b in want]
    assert any(b[2:] == (h, w) for b, (h, w) in zip(want, sizes)) or scale[0] < 0.9


def test_random_resized_crop_equals_pillow_crop_then_resize():
    imgs = images(SIZES)
    t = RandomResizedCrop((24, 20))
    info = BatchInfo(0, 0, np.arange(len(imgs)))
    with batch_context(info):
        out = t(imgs)
        boxes = t.boxes_for(imgs, _salt(t, -1))
    assert out.shape == (len(imgs), 3, 24, 20) and out.dtype == torch.uint8
    for img, (top, left, h, w), o in zip(imgs, boxes.tolist(), out):
        pil = Image.fromarray(img.permute(1, 2, 0).numpy()).crop((left, top, left + w, top + h))
        ref = torch.from_numpy(np.array(pil.resize((20, 24), Image.BILINEAR))).permute(2, 0, 1)
        assert torch.equal(o, ref)


def test_compose_fuses_the_usual_chains():
    norm = Normalize(IMAGENET_MEAN, IMAGENET_STD)
    assert Compose([RandomResizedCrop(8), RandomHorizontalFlip(), ToDtype(torch.float16, scale=True), norm]).fused
    assert Compose([RandomResizedCrop(8), ToDtype(torch.float32, scale=True), RandomHorizontalFlip(), norm]).fused
    assert Compose([CenterCrop(20), Resize((8, 8)), ToDtype(torch.float32, scale=True)]).fused
    assert Compose([Resize((8, 8)), RandomHorizontalFlip()]).fused  # uint8 out
    assert not Compose([Resize(10), CenterCrop(8), ToDtype(torch.float32, scale=True), norm]).fused  # not exact
    assert not Compose([RandomResizedCrop(8), norm]).fused  # Normalize on uint8
    assert not Compose([RandomResizedCrop(8), ToDtype(torch.float64, scale=True)]).fused
    assert not Compose([RandomHorizontalFlip(), RandomResizedCrop(8)]).fused
    assert not Compose([RandomResizedCrop(8), lambda x: x]).fused


CHAINS = [
    [RandomResizedCrop(12), RandomHorizontalFlip(), ToDtype(torch.float32, scale=True), Normalize(IMAGENET_MEAN, IMAGENET_STD)],
    [RandomResizedCrop((12, 9), scale=(0.5, 1.0)), ToDtype(torch.float32, scale=False), Normalize((100, 110, 120), (50, 60, 70))],
    [CenterCrop(18), Resize((7, 11)), RandomHorizontalFlip(p=0.7), ToDtype(torch.float32)],
    [Resize((9, 9)), RandomHorizontalFlip()],
]


@pytest.mark.parametrize("chain", range(len(CHAINS)))
def test_fused_equals_unfused(chain):
    ts = CHAINS[chain]
    fused, plain = Compose(ts), Compose([*ts, lambda x: x])  # a callable at the end only stops fusion
    assert fused.fused and not plain.fused
    imgs = images(SIZES[:5])
    with batch_context(BatchInfo(7, 3, np.array([4, 8, 15, 16, 23]))):
        a, b = fused(imgs), plain(imgs)
    assert a.shape == b.shape and a.dtype == b.dtype
    # float32: the fused op is the same sequence of float32 operations, so equal bit for bit.
    assert torch.equal(a, b), float((a.float() - b.float()).abs().max())


def test_float16_fused_matches_within_half_precision():
    ts = [RandomResizedCrop(16), RandomHorizontalFlip(), ToDtype(torch.float16, scale=True), Normalize(IMAGENET_MEAN, IMAGENET_STD)]
    imgs = images(SIZES)
    with batch_context(BatchInfo(1, 0, np.arange(len(imgs)))):
        a, b = Compose(ts)(imgs), Compose([*ts, lambda x: x])(imgs)
    assert a.dtype == torch.float16
    torch.testing.assert_close(a.float(), b.float(), atol=4e-3, rtol=2e-3)


def test_resize_center_crop_flip_normalize_rules():
    a, b = images([(40, 60), (60, 40)])
    out = Resize(20)([a, b])  # shorter side 20, aspect kept: torchvision's int rule
    assert [tuple(t.shape) for t in out] == [(3, 20, 30), (3, 30, 20)]
    assert Resize((10, 12))([a, b]).shape == (2, 3, 10, 12)
    c = CenterCrop(50)([a])[0]  # padded where the image is smaller, as torchvision
    assert c.shape == (3, 50, 50) and int(c[:, :5].sum()) == int(c[:, 45:].sum()) == 0
    assert torch.equal(c[:, 5:45], a[:, :, 5:55])
    assert torch.equal(CenterCrop((10, 20))(a.unsqueeze(0))[0], a[:, 15:25, 20:40])
    with batch_context(BatchInfo(0, 0, np.arange(2))):
        assert torch.equal(RandomHorizontalFlip(p=1.0)([a, b])[1], b.flip(-1))
        assert RandomHorizontalFlip(p=0.0)([a, b])[0] is a
        batch = torch.stack([a, a])
        assert torch.equal(RandomHorizontalFlip(p=1.0)(batch), batch.flip(-1))
    x = ToDtype(torch.float32, scale=True)(batch)
    assert x.dtype == torch.float32 and float(x.max()) <= 1.0
    y = Normalize([0.5] * 3, [0.25] * 3)(x)
    torch.testing.assert_close(y, (x - 0.5) / 0.25)
    with pytest.raises(TypeError, match=r"Normalize needs float images.*ToDtype"):
        Normalize(IMAGENET_MEAN, IMAGENET_STD)(batch)
    with pytest.raises(ValueError, match="size must be"):
        RandomResizedCrop((1, 2, 3))


def test_flips_and_crops_are_keyed_by_sample_index():
    flip = RandomHorizontalFlip()
    with batch_context(BatchInfo(5, 2, np.arange(100))):
        full = flip.flags(100, 11)
    with batch_context(BatchInfo(5, 2, np.arange(100)[::-1].copy())):
        rev = flip.flags(100, 11)
    assert np.array_equal(full, rev[::-1]) and 30 < full.sum() < 70
    with batch_context(BatchInfo(5, 3, np.arange(100))):
        assert not np.array_equal(full, flip.flags(100, 11))


def test_standalone_random_transforms_follow_torch_manual_seed():
    tf = Compose([RandomResizedCrop(8), RandomHorizontalFlip()])
    imgs = images(SIZES[:4])
    torch.manual_seed(3)
    a = tf(imgs)
    torch.manual_seed(3)
    assert torch.equal(a, tf(imgs))
    assert not torch.equal(a, tf(imgs))


# ---- the loader on image folders --------------------------------------------------------


def write_folder(root, sizes_by_class, fmt="JPEG"):
    ext = {"JPEG": "jpg", "PPM": "ppm"}[fmt]
    rng = np.random.default_rng(0)
    for c, sizes in enumerate(sizes_by_class):
        d = root / f"c{c}"
        d.mkdir(parents=True)
        for i, (h, w) in enumerate(sizes):
            arr = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
            Image.fromarray(arr).save(d / f"{i:03d}.{ext}", fmt, **({"quality": 95} if fmt == "JPEG" else {}))
    return root


def test_image_folder_decodes_like_pillow(tmp_path):
    write_folder(tmp_path, [[(12, 16)] * 3, [(12, 16)] * 2], fmt="PPM")
    loader = Loader(tmp_path, 8, device="cpu")
    assert loader.kind == "image" and loader.classes == ["c0", "c1"]
    (x, y), = list(loader)
    assert x.shape == (5, 3, 12, 16) and x.dtype == torch.uint8 and y.tolist() == [0, 0, 0, 1, 1]
    ref = np.array(Image.open(tmp_path / "c1" / "001.ppm").convert("RGB"))
    assert torch.equal(x[4], torch.from_numpy(ref).permute(2, 0, 1))
    assert loader.stats().decode_backends == {"gdsio-cpu": 5}


def test_image_sizes_differ_without_a_transform(tmp_path):
    write_folder(tmp_path, [[(12, 16), (16, 12)]])
    with pytest.raises(ValueError, match=r"\(3, 12, 16\) \('.*000\.jpg'\) and \(3, 16, 12\) \('.*001\.jpg'\)"):
        list(Loader(tmp_path, 2, device="cpu"))


TRAIN = [RandomResizedCrop(16), RandomHorizontalFlip(), ToDtype(torch.float32, scale=True), Normalize(IMAGENET_MEAN, IMAGENET_STD)]


def test_image_loader_repeats_and_resumes_exactly(tmp_path):
    write_folder(tmp_path, [[(30 + i, 40 - i) for i in range(7)], [(25, 35)] * 6])
    kw = dict(device="cpu", shuffle=True, seed=4, transform=Compose(TRAIN))
    a = Loader(tmp_path, 3, **kw)
    e0, e1 = [x for x, _ in a], [x for x, _ in a]
    b = Loader(tmp_path, 3, **kw)
    assert all(torch.equal(p, q) for p, q in zip(e0, [x for x, _ in b]))
    it = iter(b)
    next(it), next(it)
    state = json.loads(json.dumps(b.state_dict()))
    del it
    c = Loader(tmp_path, 3, **kw)
    c.load_state_dict(state)
    rest = [x for x, _ in c]
    assert len(rest) == len(e1) - 2 and all(torch.equal(p, q) for p, q in zip(rest, e1[2:]))
    # RandomResizedCrop first: a box of each JPEG is decoded (a whole one where the box is the image)
    got = a.stats().decode_backends
    assert sum(got.values()) == 26 and set(got) <= {"libjpeg-turbo-box", cpu_jpeg()}
    assert ("libjpeg-turbo-box" in got) == _core.jpeg_cpu_available()


def test_corrupt_jpeg_raise_and_skip(tmp_path, caplog):
    write_folder(tmp_path, [[(20, 20)] * 4])
    (tmp_path / "c0" / "002.jpg").write_bytes(b"\xff\xd8\xff\xe0 this is not a JPEG")
    with pytest.raises(SampleError, match=r"sample 2 \('.*002\.jpg'\)"):
        list(Loader(tmp_path, 4, device="cpu", transform=Compose(TRAIN)))
    with caplog.at_level(logging.WARNING, logger="gdsio"):
        (x, y), = list(Loader(tmp_path, 4, device="cpu", transform=Compose(TRAIN), on_error="skip"))
    assert x.shape == (3, 3, 16, 16) and "002.jpg" in caplog.text


def test_demo_runs_on_the_cpu(tmp_path):
    import io

    from gdsio.tools import demo

    assert demo.write_jpeg_folder(str(tmp_path), classes=2, per_class=6, size=(80, 60)) == 12
    out = io.StringIO()
    r = demo.run_demo(str(tmp_path), device="cpu", epochs=2, batch_size=4, out=out)
    text = out.getvalue()
    assert r["images"] == 24 and r["batches"] == 6 and r["device"] == "cpu" and r["fused"]
    assert r["images_per_s"] > 0 and 0 <= r["data_wait_share"] <= 1 and r["clock"] == "host"
    assert r["io_backends"] == {"posix": 24}
    # RandomResizedCrop first: boxes of the JPEGs where the build links libjpeg-turbo
    assert r["decode_backends"] == {"libjpeg-turbo-box" if _core.jpeg_cpu_available() else cpu_jpeg(): 24}
    assert "epoch 1: 3/3 batches" in text and "images/s" in text and "I/O: posix (24 reads)" in text
    assert "\r" not in text  # not a terminal: whole lines
