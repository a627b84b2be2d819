"""PNG, GIF, BMP, TIFF and WebP through gdsio.image (Pillow on the CPU): the
format is sniffed from the bytes, the channels follow torchvision's
decode_image, the pixel cap holds before decoding, bad files are ValueErrors
naming the file, and a GPU destination gets one upload per batch. (Corrupt
and truncated files of each format are in tests/corpus/decode, run by
test_image_errors.py::test_corpus_of_bad_files.)"""

from __future__ import annotations

import io
import struct

import cv2
import numpy as np
import pytest
import torch
from image_helpers import cpu_jpeg, pnm_bytes
from PIL import Image

import gdsio
import gdsio.image as gi
from gdsio.image import batch, formats, pillow, transfer

rng = np.random.default_rng(99)
RGB = rng.integers(0, 256, (11, 13, 3), dtype=np.uint8)
RGBA = np.dstack([RGB, rng.integers(0, 256, (11, 13), dtype=np.uint8)])
GRAY16 = rng.integers(0, 65536, (11, 13), dtype=np.uint16)


def encode(im: Image.Image, fmt: str, **kw) -> bytes:
    b = io.BytesIO()
    im.save(b, format=fmt, **kw)
    return b.getvalue()


def chw(a: np.ndarray) -> np.ndarray:
    return a[None] if a.ndim == 2 else a.transpose(2, 0, 1)


LOSSLESS = [("png", "PNG", {}), ("bmp", "BMP", {}), ("tiff", "TIFF", {}), ("tiff", "TIFF", {"compression": "tiff_lzw"}),
            ("webp", "WEBP", {"lossless": True, "exact": True})]


@pytest.mark.parametrize("kind, fmt, kw", LOSSLESS, ids=lambda v: str(v))
def test_rgb_round_trips_in_every_mode(kind, fmt, kw):
    data = encode(Image.fromarray(RGB), fmt, **kw)
    assert formats.identify(data[:12], batch.options(mode="UNCHANGED", on_error="raise")).name == kind
    for mode in ("UNCHANGED", "RGB"):
        img, info = gi.decode(data, mode=mode, return_info=True)
        assert img.dtype == torch.uint8 and img.is_contiguous()
        np.testing.assert_array_equal(img.numpy(), chw(RGB))
        assert (info.format, info.backend, info.reason, info.shape) == (kind, "pillow", "", (3, 11, 13))
    gray = gi.decode(data, mode="GRAY")
    np.testing.assert_array_equal(gray.numpy(), chw(np.array(Image.fromarray(RGB).convert("L"))))
    # GRAY is gdsio's one rule: the same luma as for a PNM of the same pixels.
    assert torch.equal(gray, gi.decode(pnm_bytes(RGB), mode="GRAY"))


def test_channels_follow_decode_image():
    im = Image.fromarray(RGB)
    cases = [  # (image, UNCHANGED channels, what UNCHANGED holds)
        (Image.fromarray(RGB[..., 0]), 1, RGB[..., 0]),
        (Image.fromarray(RGBA[..., :2].copy(), "LA"), 2, RGBA[..., :2]),
        (Image.fromarray(RGBA, "RGBA"), 4, RGBA),
        (im.quantize(16), 3, np.array(im.quantize(16).convert("RGB"))),
        (Image.fromarray(RGB[..., 0] > 127), 1, np.where(RGB[..., 0] > 127, 255, 0).astype(np.uint8)),
    ]
    for src, channels, unchanged in cases:
        data = encode(src, "PNG")
        np.testing.assert_array_equal(gi.decode(data).numpy(), chw(unchanged), err_msg=src.mode)
        with Image.open(io.BytesIO(data)) as f:
            want_rgb, want_gray = np.array(f.convert("RGB")), np.array(f.convert("RGB").convert("L"))
        assert gi.decode(data).shape[0] == channels, src.mode
        np.testing.assert_array_equal(gi.decode(data, mode="RGB").numpy(), chw(want_rgb), err_msg=src.mode)
        np.testing.assert_array_equal(gi.decode(data, mode="GRAY").numpy(), chw(want_gray), err_msg=src.mode)
    # A palette with transparency: RGBA (alpha from tRNS); RGB drops it.
    pal = encode(im.quantize(16), "PNG", transparency=0)
    want = np.array(Image.open(io.BytesIO(pal)).convert("RGBA"))
    np.testing.assert_array_equal(gi.decode(pal).numpy(), chw(want))
    np.testing.assert_array_equal(gi.decode(pal, mode="RGB").numpy(), chw(want[..., :3]))
    # GIF: a palette format.
    gif = encode(im.quantize(16), "GIF")
    assert gi.decode(gif, return_info=True)[1].format == "gif"
    np.testing.assert_array_equal(gi.decode(gif, mode="RGB").numpy(), chw(np.array(Image.open(io.BytesIO(gif)).convert("RGB"))))


def test_deep_and_float_pixels():
    for fmt in ("PNG", "TIFF"):  # 16-bit gray stays uint16, as read_image keeps 16-bit PNG
        data = encode(Image.fromarray(GRAY16), fmt)
        img = gi.decode(data)
        assert img.dtype == torch.uint16 and img.shape == (1, 11, 13)
        np.testing.assert_array_equal(img.numpy(), GRAY16[None])
        rgb = gi.decode(data, mode="RGB")
        assert rgb.dtype == torch.uint16 and rgb.shape == (3, 11, 13) and torch.equal(rgb[2], img[0])
    f = rng.standard_normal((11, 13)).astype(np.float32)
    img = gi.decode(encode(Image.fromarray(f), "TIFF"))
    assert img.dtype == torch.float32
    np.testing.assert_array_equal(img.numpy(), f[None])
    assert torch.equal(gi.decode(encode(Image.fromarray(f), "TIFF"), mode="RGB"), img.expand(3, -1, -1))
    # 16-bit colour: Pillow keeps 8 bits, and the result says so.
    ok, png = cv2.imencode(".png", rng.integers(0, 65536, (5, 6, 3), dtype=np.uint16))
    img, info = gi.decode(png.tobytes(), return_info=True)
    assert ok and img.dtype == torch.uint8 and "16-bit colour PNG: Pillow keeps 8 bits" in info.reason


@pytest.mark.parametrize("dtype", ["<i4", ">i4", "<i2"])
def test_integer_tiff_pillow_mode_i_gives_int32(dtype):
    """32-bit (and signed 16-bit) integer TIFF, Pillow's mode I: int32 with Pillow's
    values, whole in every mode (RGB replicates the gray, never clips to 0..255)."""
    lim = np.iinfo(dtype)
    a = np.concatenate([[lim.min, -1, 0, 1, lim.max], rng.integers(lim.min, lim.max, 138)]).astype(dtype).reshape(11, 13)
    data = encode(Image.fromarray(a), "TIFF")
    with Image.open(io.BytesIO(data)) as f:
        assert f.mode == "I"
        want = np.array(f)
    img, info = gi.decode(data, return_info=True)
    assert img.dtype == torch.int32 and (info.format, info.backend, info.dtype) == ("tiff", "pillow", "int32")
    np.testing.assert_array_equal(img.numpy(), want[None])
    np.testing.assert_array_equal(img.numpy(), a.astype(np.int32)[None])
    assert torch.equal(gi.decode(data, mode="GRAY"), img)
    assert torch.equal(gi.decode(data, mode="RGB"), img.expand(3, -1, -1))


def test_dib_bmp_without_its_file_header():
    """.dib (Pillow's DibImagePlugin): no 'BM' magic, told by its info header's size."""
    for src in (Image.fromarray(RGB), Image.fromarray(RGB[..., 0]), Image.fromarray(RGB[..., 0] > 127),
                Image.fromarray(RGB).quantize(16)):
        data = encode(src, "DIB")
        assert data[:2] != b"BM" and data[:4] == b"\x28\x00\x00\x00"
        with Image.open(io.BytesIO(data)) as f:
            assert f.format == "DIB"
            want = {m: np.array(f.convert("RGB").convert("L") if m == "GRAY" else f.convert(m)) for m in ("RGB", "GRAY")}
        img, info = gi.decode(data, return_info=True)
        assert (info.format, info.backend) == ("dib", "pillow")
        # The same image as the BMP of the same pixels (a BMP is a DIB after a file header).
        assert torch.equal(img, gi.decode(encode(src, "BMP")))
        np.testing.assert_array_equal(gi.decode(data, mode="RGB").numpy(), chw(want["RGB"]), err_msg=src.mode)
        np.testing.assert_array_equal(gi.decode(data, mode="GRAY").numpy(), chw(want["GRAY"]), err_msg=src.mode)
    # A BITMAPCOREHEADER (12 bytes) one too: 2x2, 24 bits, rows bottom-up, padded to 4 bytes.
    core = struct.pack("<IHHHH", 12, 2, 2, 1, 24) + bytes([1, 2, 3, 4, 5, 6, 0, 0, 7, 8, 9, 10, 11, 12, 0, 0])
    with Image.open(io.BytesIO(core)) as f:
        want = np.array(f.convert("RGB"))
    np.testing.assert_array_equal(gi.decode(core).numpy(), chw(want))
    # Refused where Pillow refuses it, naming the image.
    with pytest.raises(ValueError, match=r"^data: Pillow cannot .* DIB image"):
        gi.decode(encode(Image.fromarray(RGB), "DIB")[:30])


def test_the_format_comes_from_the_bytes_not_the_name(tmp_path):
    png, jpeg = encode(Image.fromarray(RGB), "PNG"), encode(Image.fromarray(RGB), "JPEG")
    (tmp_path / "really_png.jpg").write_bytes(png)
    (tmp_path / "really_jpeg.png").write_bytes(jpeg)
    imgs, infos = gi.read([tmp_path / "really_png.jpg", tmp_path / "really_jpeg.png"], device="cpu", return_info=True)
    assert [i.format for i in infos] == ["png", "jpeg"]
    np.testing.assert_array_equal(imgs[0].numpy(), chw(RGB))
    assert infos[0].io.backend == "posix" and infos[0].io.nbytes == len(png)


def test_first_frame_and_exif_orientation():
    frames = [Image.fromarray(rng.integers(0, 256, (6, 9, 3), dtype=np.uint8)) for _ in range(3)]
    for fmt, kw in (("GIF", {}), ("WEBP", {"lossless": True})):
        data = encode(frames[0], fmt, save_all=True, append_images=frames[1:], **kw)
        with Image.open(io.BytesIO(data)) as f:
            first = np.array(f.convert("RGB"))
        np.testing.assert_array_equal(gi.decode(data, mode="RGB").numpy(), chw(first), err_msg=fmt)
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees clockwise to view
    for fmt, kw in (("PNG", {}), ("WEBP", {"lossless": True})):
        data = encode(Image.fromarray(RGB), fmt, exif=exif.tobytes(), **kw)
        img, info = gi.decode(data, return_info=True)
        assert info.orientation == 6 and img.shape == (3, 11, 13)  # found, not applied unless asked
        turned = gi.decode(data, apply_exif_orientation=True)
        assert turned.shape == (3, 13, 11)
        assert torch.equal(turned, gi.apply_orientation(img, 6))


def test_the_pixel_cap_holds_before_decoding(tmp_path, monkeypatch):
    p = tmp_path / "big.png"
    p.write_bytes(encode(Image.fromarray(RGB), "PNG"))
    loads = []
    real_load = Image.Image.load
    monkeypatch.setattr(Image.Image, "load", lambda self: loads.append(self.format) or real_load(self))
    with pytest.raises(ValueError, match=r"big\.png: 13x11 = 143 pixels is more than the cap of 100"):
        gi.read(p, device="cpu", max_pixels=100)
    assert loads == []  # refused on the header's size: no pixel decoded
    assert gi.read(p, device="cpu", max_pixels=143).shape == (3, 11, 13) and loads
    with gdsio.settings(max_image_pixels=71), pytest.raises(gdsio.DecompressionBombError, match="more than twice max_image_pixels"):
        gi.decode(p.read_bytes())


def test_a_batch_of_mixed_formats_and_a_bad_one():
    good = [encode(Image.fromarray(RGB), f) for f in ("PNG", "BMP", "JPEG", "TIFF")]
    bad = good[0][: len(good[0]) // 2]
    imgs, failed, infos = gi.decode([good[0], bad, good[1], good[2], good[3]], mode="RGB", on_error="skip", return_info=True)
    assert failed == [1] and [i.format for i in infos] == ["png", "bmp", "jpeg", "tiff"]
    # JPEG goes to libjpeg-turbo through simplejpeg on the CPU; the other formats to Pillow.
    assert [i.backend for i in infos] == ["pillow", "pillow", cpu_jpeg(), "pillow"]
    assert all(t.shape == (3, 11, 13) for t in imgs)
    with pytest.raises(ValueError, match=r"^data\[1\]: Pillow cannot decode this PNG image"):
        gi.decode([good[0], bad])


def test_gpu_destination_uploads_once_per_batch(monkeypatch):
    """No GPU here: the orchestration for a cuda target runs with the pinned
    upload (transfer.stage) replaced by a copy, as in test_image_nvjpeg.py's stand-in."""
    staged = []
    monkeypatch.setattr(transfer, "stage", lambda tensors, d: staged.append(len(tensors)) or [t.clone() for t in tensors])
    datas = [encode(Image.fromarray(RGB), "PNG"), encode(Image.fromarray(GRAY16), "TIFF"), encode(Image.fromarray(RGBA, "RGBA"), "WEBP", lossless=True)]
    opts = batch.options(mode="UNCHANGED", on_error="raise")
    items = [batch.Item(i, f"data[{i}]", torch.frombuffer(bytearray(d), dtype=torch.uint8), len(d)) for i, d in enumerate(datas)]
    batch.read_headers(items, opts)
    assert [it.format.name for it in items] == ["png", "tiff", "webp"]
    pillow.decode(items, torch.device("cuda", 0), opts)
    assert staged == [3]  # one pinned copy for the batch
    assert [it.result.dtype for it in items] == [torch.uint8, torch.uint16, torch.uint8]
    np.testing.assert_array_equal(items[1].result.numpy(), GRAY16[None])
    np.testing.assert_array_equal(items[2].result.numpy(), chw(RGBA))
    assert all("no GPU decoder for" in it.reason and "Pillow decodes it on the CPU" in it.reason for it in items)


def test_gpu_requests_read_pillow_formats_to_the_host(tmp_path, monkeypatch):
    """read_bodies sends Pillow's formats to host memory whatever the target."""
    p, q = tmp_path / "a.png", tmp_path / "b.ppm"
    p.write_bytes(encode(Image.fromarray(RGB), "PNG"))
    q.write_bytes(encode(Image.fromarray(RGB), "PPM"))
    opts = batch.options(mode="RGB", on_error="raise")
    items = [batch.Item(0, str(p)), batch.Item(1, str(q))]
    for it in items:
        batch.probe_file(it, opts)
    asked = []
    monkeypatch.setattr(gdsio.io.File, "read", lambda self, device, backend, return_stats, offset=0, size=None:
                        asked.append((self.path, device, backend)) or (torch.zeros(1, dtype=torch.uint8), None))
    monkeypatch.setattr(torch.Tensor, "record_stream", lambda self, s: None)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda d: None)
    batch.read_bodies(items, torch.device("cuda", 0), "pinned", 1)
    assert asked == [(str(p), "cpu", None), (str(q), "cuda:0", "pinned")]


@pytest.mark.gpu
def test_gpu_equals_cpu_for_pillow_formats(tmp_path):
    paths = []
    for k, (kind, fmt, kw) in enumerate(LOSSLESS):
        p = tmp_path / f"{k}.{kind}"
        p.write_bytes(encode(Image.fromarray(RGBA if fmt == "PNG" else RGB, "RGBA" if fmt == "PNG" else "RGB"), fmt, **kw))
        paths.append(p)
    for mode in ("UNCHANGED", "RGB", "GRAY"):
        gpu, infos = gi.read(paths, device="cuda", mode=mode, return_info=True)
        cpu = gi.read(paths, device="cpu", mode=mode)
        for g, c, i in zip(gpu, cpu, infos):
            assert g.is_cuda and i.backend == "pillow" and "no GPU decoder" in i.reason
            assert torch.equal(g.cpu(), c)
