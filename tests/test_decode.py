"""gdsio.image on the CPU: every uncompressed variant round-trips exactly,
JPEG and the mode conversions equal Pillow, EXIF orientation follows
torchvision's rule, every bad input is a ValueError naming the image, and the
header parsers survive fuzzing. (The GPU path is compared with this one in
test_decode_gpu.py.)"""

from __future__ import annotations

import io
import os
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import in_threads
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image, ImageOps

import gdsio
import gdsio.image as gi
from gdsio import _core
from gdsio.image import headers as H

CORPUS = Path(__file__).parent / "corpus" / "decode"


# --------------------------------------------------------------------------- writers


def as_tensor(b: bytes) -> torch.Tensor:
    return torch.from_numpy(np.frombuffer(b, dtype=np.uint8).copy())


def pnm_bytes(arr: np.ndarray, maxval: int | None = None, header: bytes | None = None) -> bytes:
    """A P5 (H,W) or P6 (H,W,3) file written by hand: big-endian above maxval 255."""
    magic = b"P5" if arr.ndim == 2 else b"P6"
    if maxval is None:
        maxval = 255 if arr.dtype == np.uint8 else 65535
    body = arr.astype(">u2" if maxval > 255 else "u1").tobytes()
    if header is None:
        header = magic + b"\n%d %d\n%d\n" % (arr.shape[1], arr.shape[0], maxval)
    return header + body


def npy_bytes(arr: np.ndarray, version: tuple[int, int] | None = None) -> bytes:
    b = io.BytesIO()
    np.lib.format.write_array(b, arr, version=version)
    return b.getvalue()


def pil_bytes(im: Image.Image, fmt: str = "JPEG", **kw) -> bytes:
    b = io.BytesIO()
    im.save(b, format=fmt, **kw)
    return b.getvalue()


def chw(a: np.ndarray) -> np.ndarray:
    return a[None] if a.ndim == 2 else a.transpose(2, 0, 1)


def pil_chw(im: Image.Image) -> np.ndarray:
    return chw(np.array(im))


rng = np.random.default_rng(20240611)


def rand(shape, dtype=np.uint8) -> np.ndarray:
    if np.dtype(dtype).kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    return rng.integers(0, np.iinfo(dtype).max + 1, shape, dtype=dtype)


def photos() -> list[tuple[str, np.ndarray]]:
    """Real photographs from scikit-image when it is installed, else textured stand-ins."""
    try:
        from skimage import data

        return [("astronaut", data.astronaut()), ("coffee", data.coffee()), ("chelsea", data.chelsea())]
    except ImportError:
        y, x = np.mgrid[0:240, 0:320]
        base = (np.sin(x / 7.0) * np.cos(y / 11.0) * 90 + 128 + rand((240, 320)) % 40).clip(0, 255)
        img = np.stack([base, np.roll(base, 9, 1), base[::-1]], -1).astype(np.uint8)
        return [("texture", img)]


# --------------------------------------------------------------------------- PNM


@pytest.mark.parametrize("shape", [(1, 1), (1, 17), (13, 1), (7, 5), (64, 33)])
@pytest.mark.parametrize("channels", [1, 3])
def test_pnm_8bit_round_trip(shape, channels):
    a = rand(shape if channels == 1 else shape + (3,))
    for data in (pnm_bytes(a), pil_bytes(Image.fromarray(a), "PPM")):
        img, info = gi.decode(as_tensor(data), return_info=True)
        assert img.dtype == torch.uint8 and img.shape == (channels,) + shape
        np.testing.assert_array_equal(img.numpy(), chw(a))
        assert (info.format, info.backend, info.reason) == ("pnm", "gdsio-cpu", "")


@pytest.mark.parametrize("channels", [1, 3])
def test_pnm_16bit_is_uint16(channels):
    a = rand((9, 11) if channels == 1 else (9, 11, 3), np.uint16)
    img = gi.decode(pnm_bytes(a))
    assert img.dtype == torch.uint16
    np.testing.assert_array_equal(img.numpy(), chw(a))
    if channels == 1:  # Pillow reads 16-bit P5 as mode I, same values
        np.testing.assert_array_equal(img.numpy()[0], np.array(Image.open(io.BytesIO(pnm_bytes(a)))))


@pytest.mark.parametrize("maxval", [1, 2, 3, 5, 7, 15, 100, 127, 128, 200, 254])
@pytest.mark.parametrize("magic", ["P5", "P6"])
def test_pnm_small_maxval_matches_pillow(maxval, magic):
    # Every sample value, including values above maxval (clamped by both).
    values = np.arange(256, dtype=np.uint8)
    a = np.tile(values, 3).reshape(3, 256) if magic == "P5" else np.stack([values, values[::-1], values], -1)[None]
    data = pnm_bytes(a, maxval=maxval)
    ours = gi.decode(data)
    ref = pil_chw(Image.open(io.BytesIO(data)))
    assert ours.dtype == torch.uint8
    np.testing.assert_array_equal(ours.numpy(), ref)


@pytest.mark.parametrize("maxval", [256, 257, 1000, 1023, 4095, 32767, 65534])
def test_pnm_16bit_maxval_matches_pillow(maxval):
    a = np.concatenate([np.arange(0, min(maxval + 40, 65536)), rand(2000, np.uint16)]).astype(np.uint16)[None]
    data = pnm_bytes(a, maxval=maxval)
    ours = gi.decode(data)
    assert ours.dtype == torch.uint16
    np.testing.assert_array_equal(ours.numpy()[0], np.array(Image.open(io.BytesIO(data))))


def test_pnm_p6_16bit_maxval_rule():
    # Pillow turns 16-bit P6 into 8 bits; gdsio keeps uint16: check the rule itself.
    maxval = 1000
    a = rng.integers(0, 1100, (4, 50, 3)).astype(np.uint16)
    ours = gi.decode(pnm_bytes(a, maxval=maxval)).numpy()
    expect = np.vectorize(lambda v: 65535 if v >= maxval else round(Fraction(int(v) * 65535, maxval)))(a)
    np.testing.assert_array_equal(ours, chw(expect))


@pytest.mark.parametrize(
    "header",
    [
        b"P5\n4 3\n255\n",
        b"P5 4 3 255 ",
        b"P5\r\n4\r\n3\r\n255\r",
        b"P5\t4\t3\t255\t",
        b"P5\n# a comment\n4 # width\n# more\n3\n255\n",
        b"P5#c\n4 3\n255\n",
        b"P5\n4 3\n255# comment ending the header\n",
        b"P5\n4 3\n255#\r",
        b"P5\n\n\n  4    3 \x0b\x0c 255\n",
    ],
)
def test_pnm_header_whitespace_and_comments(header):
    a = rand((3, 4))
    h = H.parse_pnm(header, len(header) + 12)
    assert (h.width, h.height, h.maxval, h.data_offset) == (4, 3, 255, len(header))
    np.testing.assert_array_equal(gi.decode(header + a.tobytes()).numpy(), chw(a))


def test_pnm_trailing_bytes_are_ignored():
    a = rand((5, 6, 3))
    np.testing.assert_array_equal(gi.decode(pnm_bytes(a) + b"P6\nmore").numpy(), chw(a))


def test_pnm_big_image_uses_every_band():
    a = rand((700, 1000, 3))
    with gdsio.settings(threads=4):
        np.testing.assert_array_equal(gi.decode(pnm_bytes(a)).numpy(), chw(a))


# --------------------------------------------------------------------------- NPY

NPY_SHAPES = {"HW": (6, 9), "HWC1": (6, 9, 1), "HWC3": (6, 9, 3), "HWC4": (6, 9, 4), "CHW3": (3, 6, 9), "CHW2": (2, 6, 7)}


def npy_expected(a: np.ndarray, kind: str) -> np.ndarray:
    if kind == "HW":
        return a[None]
    return a if kind.startswith("CHW") else a.transpose(2, 0, 1)


@pytest.mark.parametrize("dtype", ["u1", "<u2", ">u2", "<f4", ">f4"])
@pytest.mark.parametrize("kind", sorted(NPY_SHAPES))
@pytest.mark.parametrize("order", ["C", "F"])
def test_npy_round_trip(dtype, kind, order):
    a = rand(NPY_SHAPES[kind], np.dtype(dtype).newbyteorder("=")).astype(dtype)
    a = np.asfortranarray(a) if order == "F" else a
    img = gi.decode(npy_bytes(a))
    expect = npy_expected(a, kind)
    assert img.dtype == {"u": {1: torch.uint8, 2: torch.uint16}, "f": {4: torch.float32}}[a.dtype.kind][a.dtype.itemsize]
    assert img.shape == expect.shape
    # Compare bit patterns, so float NaN / -0.0 would count too.
    got = img.numpy()
    np.testing.assert_array_equal(got.view(f"u{got.itemsize}"), expect.astype(got.dtype).view(f"u{got.itemsize}"))


@pytest.mark.parametrize("version", [(1, 0), (2, 0), (3, 0)])
def test_npy_versions(version):
    a = rand((5, 4, 3))
    np.testing.assert_array_equal(gi.decode(npy_bytes(a, version)).numpy(), a.transpose(2, 0, 1))


def test_npy_float_specials_pass_through():
    a = np.array([[np.nan, -0.0, np.inf], [-np.inf, 1e-40, -3.5]], dtype=np.float32)
    got = gi.decode(npy_bytes(a)).numpy()[0]
    np.testing.assert_array_equal(got.view(np.uint32), a.view(np.uint32))


def test_npy_layout_choice():
    a = rand((3, 5, 4))
    np.testing.assert_array_equal(gi.decode(npy_bytes(a)).numpy(), a.transpose(2, 0, 1))  # auto: HWC (last dim 4)
    np.testing.assert_array_equal(gi.decode(npy_bytes(a), npy_layout="CHW").numpy(), a)
    b = rand((3, 8, 9))
    np.testing.assert_array_equal(gi.decode(npy_bytes(b)).numpy(), b)  # auto: CHW (first dim 3)
    with pytest.raises(ValueError, match="does not fit the 2-D array"):
        gi.decode(npy_bytes(rand((4, 4))), npy_layout="CHW")
    with pytest.raises(ValueError, match="does not fit the 3-D array"):
        gi.decode(npy_bytes(a), npy_layout="HW")


# --------------------------------------------------------------------------- raw


@pytest.mark.parametrize("layout", ["HWC", "CHW", "HW"])
@pytest.mark.parametrize("dtype", ["uint8", "uint16", "float32"])
@pytest.mark.parametrize("byteorder", ["little", "big"])
@pytest.mark.parametrize("offset", [0, 7])
def test_raw_round_trip(layout, dtype, byteorder, offset):
    c = 1 if layout == "HW" else 3
    native = rand((c, 5, 8), np.dtype(dtype))
    stored = native if layout == "CHW" else native.transpose(1, 2, 0)
    stored = np.ascontiguousarray(stored).astype(np.dtype(dtype).newbyteorder("<" if byteorder == "little" else ">"))
    fmt = gi.RawFormat(height=5, width=8, channels=c, layout=layout, dtype=dtype, byteorder=byteorder, offset=offset)
    data = b"\xaa" * offset + stored.tobytes()
    assert fmt.nbytes == len(data)
    img, info = gi.decode(data, raw=fmt, return_info=True)
    assert info.format == "raw"
    got = img.numpy()
    np.testing.assert_array_equal(got.view(f"u{got.itemsize}"), native.view(f"u{got.itemsize}"))


def test_raw_accepts_numpy_and_torch_dtypes():
    assert gi.RawFormat(2, 2, dtype=np.uint16).dtype == "uint16"
    assert gi.RawFormat(2, 2, dtype=torch.float32).dtype == "float32"


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(height=0, width=2), "RawFormat.height must be a positive int"),
        (dict(height=2, width=2.5), "RawFormat.width must be a positive int"),
        (dict(height=2, width=2, layout="WHC"), "RawFormat.layout"),
        (dict(height=2, width=2, layout="HW", channels=3), "one channel"),
        (dict(height=2, width=2, dtype="int8"), "dtype must be uint8, uint16 or float32"),
        (dict(height=2, width=2, byteorder="native"), "RawFormat.byteorder"),
        (dict(height=2, width=2, offset=-1), "RawFormat.offset"),
    ],
)
def test_raw_format_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        gi.RawFormat(**kwargs)


def test_raw_size_must_match():
    fmt = gi.RawFormat(height=4, width=4, channels=3)
    with pytest.raises(ValueError, match=r"data: a raw record of 4x4x3 uint8 .* holds 48 bytes, but the data holds 47"):
        gi.decode(bytes(47), raw=fmt)
    with pytest.raises(ValueError, match="holds 48 bytes, but the data holds 49"):
        gi.decode(bytes(49), raw=fmt)


# --------------------------------------------------------------------------- modes


def test_gray_to_rgb_replicates():
    a = rand((6, 7))
    for data in (pnm_bytes(a), npy_bytes(a)):
        img = gi.decode(data, mode="RGB")
        assert img.shape == (3, 6, 7)
        for c in range(3):
            np.testing.assert_array_equal(img[c].numpy(), a)


def test_rgb_to_gray_is_pillow_convert_L():
    a = rand((256, 256, 3))
    ref = np.array(Image.fromarray(a).convert("L"))
    for data in (pnm_bytes(a), npy_bytes(a), npy_bytes(np.ascontiguousarray(a.transpose(2, 0, 1)))):
        img = gi.decode(data, mode="GRAY")
        assert img.shape == (1, 256, 256)
        np.testing.assert_array_equal(img[0].numpy(), ref)
    for name, photo in photos():
        np.testing.assert_array_equal(
            gi.decode(pnm_bytes(photo), mode="GRAY")[0].numpy(), np.array(Image.fromarray(photo).convert("L")), err_msg=name
        )


def test_rgba_and_la_follow_pillow():
    rgba = rand((9, 10, 4))
    im = Image.fromarray(rgba, "RGBA")
    np.testing.assert_array_equal(gi.decode(npy_bytes(rgba), mode="RGB").numpy(), pil_chw(im.convert("RGB")))
    np.testing.assert_array_equal(gi.decode(npy_bytes(rgba), mode="GRAY").numpy(), pil_chw(im.convert("L")))
    np.testing.assert_array_equal(gi.decode(npy_bytes(rgba)).numpy(), chw(rgba))
    la = rand((9, 10, 2))
    im = Image.fromarray(la, "LA")
    np.testing.assert_array_equal(gi.decode(npy_bytes(la), mode="GRAY").numpy(), pil_chw(im.convert("L")))
    np.testing.assert_array_equal(gi.decode(npy_bytes(la), mode="RGB").numpy(), pil_chw(im.convert("RGB")))


def test_uint16_and_float_luma():
    a = rand((20, 30, 3), np.uint16)
    r, g, b = (a[..., k].astype(np.uint64) for k in range(3))
    expect = ((r * 19595 + g * 38470 + b * 7471 + 0x8000) >> 16).astype(np.uint16)
    got = gi.decode(pnm_bytes(a), mode="GRAY")
    assert got.dtype == torch.uint16
    np.testing.assert_array_equal(got[0].numpy(), expect)
    f = rand((20, 30, 3), np.float32)
    expect = (f[..., 0] * np.float32(0.299) + f[..., 1] * np.float32(0.587)) + f[..., 2] * np.float32(0.114)
    np.testing.assert_allclose(gi.decode(npy_bytes(f), mode="GRAY")[0].numpy(), expect, rtol=1e-6, atol=0)


def test_modes_accept_enums_and_case():
    a = rand((4, 5, 3))
    ref = gi.decode(pnm_bytes(a), mode="GRAY")
    for m in ("gray", gi.ImageReadMode.GRAY, type("TorchvisionMode", (), {"name": "GRAY"})()):
        assert torch.equal(gi.decode(pnm_bytes(a), mode=m), ref)


def test_mode_needs_1_to_4_channels():
    with pytest.raises(ValueError, match="data: mode RGB needs an image of 1 to 4 channels; this one has 5"):
        gi.decode(npy_bytes(rand((5, 4, 4))), mode="RGB", npy_layout="CHW")
    assert gi.decode(npy_bytes(rand((5, 4, 4))), npy_layout="CHW").shape == (5, 4, 4)


# --------------------------------------------------------------------------- JPEG (CPU: Pillow)


@pytest.mark.parametrize("subsampling", [0, 1, 2])  # 4:4:4, 4:2:2, 4:2:0
def test_jpeg_cpu_equals_pillow(subsampling):
    for name, photo in photos():
        data = pil_bytes(Image.fromarray(photo), quality=90, subsampling=subsampling)
        h = H.parse_jpeg(data, len(data), data[-32:])
        assert h.subsampling == ["444", "422", "420"][subsampling] and h.color == "ycbcr"
        img, info = gi.decode(as_tensor(data), return_info=True)
        assert (info.backend, info.format) == ("pillow", "jpeg")
        np.testing.assert_array_equal(img.numpy(), pil_chw(Image.open(io.BytesIO(data))), err_msg=name)
        for mode, pil_mode in (("GRAY", "L"), ("RGB", "RGB")):
            np.testing.assert_array_equal(
                gi.decode(data, mode=mode).numpy(), pil_chw(Image.open(io.BytesIO(data)).convert(pil_mode))
            )


def test_jpeg_gray_progressive_and_cmyk_on_cpu():
    photo = photos()[0][1]
    gray = pil_bytes(Image.fromarray(photo).convert("L"), quality=90)
    img = gi.decode(gray)
    assert img.shape == (1,) + photo.shape[:2]
    np.testing.assert_array_equal(gi.decode(gray, mode="RGB").numpy(), pil_chw(Image.open(io.BytesIO(gray)).convert("RGB")))
    prog = pil_bytes(Image.fromarray(photo), quality=90, progressive=True)
    assert H.parse_jpeg(prog, len(prog)).coding == "progressive"
    np.testing.assert_array_equal(gi.decode(prog).numpy(), pil_chw(Image.open(io.BytesIO(prog))))
    cmyk = pil_bytes(Image.fromarray(photo).convert("CMYK"), quality=90)
    h = H.parse_jpeg(cmyk, len(cmyk))
    assert h.components == 4 and h.color in ("cmyk", "ycck")
    np.testing.assert_array_equal(gi.decode(cmyk).numpy(), pil_chw(Image.open(io.BytesIO(cmyk))))  # 4 channels
    np.testing.assert_array_equal(gi.decode(cmyk, mode="RGB").numpy(), pil_chw(Image.open(io.BytesIO(cmyk)).convert("RGB")))


def test_jpeg_header_fields():
    photo = photos()[0][1]
    data = pil_bytes(Image.fromarray(photo), quality=90, subsampling=2)
    h = H.parse_jpeg(data, len(data), data[-32:])
    assert (h.width, h.height, h.components, h.precision, h.coding) == (photo.shape[1], photo.shape[0], 3, 8, "baseline")
    assert h.interleaved and h.has_eoi and h.restart_interval == 0 and h.orientation == 1
    assert h.sampling == ((2, 2), (1, 1), (1, 1))
    assert not H.parse_jpeg(data[:-2], len(data) - 2, data[-34:-2]).has_eoi
    # Restart intervals, when this Pillow can write them.
    try:
        rst = pil_bytes(Image.fromarray(photo), quality=90, restart_marker_blocks=4)
    except TypeError:
        return
    assert H.parse_jpeg(rst, len(rst)).restart_interval == 4


def test_jpeg_routing_rules():
    from gdsio.image import jpeg as J

    photo = photos()[0][1]
    usable = {"backends": {b: {"usable": True, "reason": ""} for b in (J.HARDWARE, J.HYBRID, J.HOST)}}
    base = pil_bytes(Image.fromarray(photo), quality=90)
    assert J.route(H.parse_jpeg(base, len(base), base[-32:]), usable) == (J.HARDWARE, "")
    prog = pil_bytes(Image.fromarray(photo), quality=90, progressive=True)
    assert J.route(H.parse_jpeg(prog, len(prog), prog[-32:]), usable) == (J.PILLOW, "progressive JPEG")
    cmyk = pil_bytes(Image.fromarray(photo).convert("CMYK"))
    assert J.route(H.parse_jpeg(cmyk, len(cmyk), cmyk[-32:]), usable)[1].endswith("-coded JPEG")
    cut = base[:-10]
    assert "no EOI marker" in J.route(H.parse_jpeg(cut, len(cut), cut[-32:]), usable)[1]
    no_hw = {"backends": dict(usable["backends"], **{J.HARDWARE: {"usable": False, "reason": "no engines"}})}
    assert J.route(H.parse_jpeg(base, len(base), base[-32:]), no_hw) == (J.HYBRID, f"{J.HARDWARE}: no engines")
    none = {"backends": {b: {"usable": False, "reason": "not loaded"} for b in (J.HARDWARE, J.HYBRID, J.HOST)}}
    assert J.route(H.parse_jpeg(base, len(base), base[-32:]), none)[0] == J.PILLOW


# --------------------------------------------------------------------------- EXIF orientation


def exif_jpeg(a: np.ndarray, orientation: int) -> bytes:
    exif = Image.Exif()
    exif[0x0112] = orientation
    return pil_bytes(Image.fromarray(a), quality=95, subsampling=0, exif=exif.tobytes())


@pytest.mark.parametrize("orientation", range(1, 9))
def test_exif_orientation_matches_pillow(orientation):
    a = rand((5, 8, 3))
    data = exif_jpeg(a, orientation)
    assert H.parse_jpeg(data, len(data)).orientation == orientation
    img, info = gi.decode(data, apply_exif_orientation=True, return_info=True)
    assert info.orientation == orientation
    ref = pil_chw(ImageOps.exif_transpose(Image.open(io.BytesIO(data))))
    np.testing.assert_array_equal(img.numpy(), ref)
    assert gi.decode(data).shape == (3, 5, 8)  # not applied unless asked


def test_apply_orientation_definitions():
    # torchvision's _exif_orientation rules, checked against numpy.
    a = np.arange(2 * 3 * 4).reshape(2, 3, 4)
    t = torch.from_numpy(a)
    expect = {
        1: a, 2: a[:, :, ::-1], 3: a[:, ::-1, ::-1], 4: a[:, ::-1, :], 5: a.transpose(0, 2, 1),
        6: np.rot90(a, -1, (1, 2)), 7: a.transpose(0, 2, 1)[:, ::-1, ::-1], 8: np.rot90(a, 1, (1, 2)),
    }
    for o, e in expect.items():
        out = gi.apply_orientation(t, o)
        assert out.is_contiguous()
        np.testing.assert_array_equal(out.numpy(), e, err_msg=str(o))


def test_exif_parser_both_byte_orders_and_garbage():
    mm = b"MM\x00\x2a\x00\x00\x00\x08\x00\x01\x01\x12\x00\x03\x00\x00\x00\x01\x00\x06\x00\x00"
    ii = b"II\x2a\x00\x08\x00\x00\x00\x01\x00\x12\x01\x03\x00\x01\x00\x00\x00\x03\x00\x00\x00"
    assert H.exif_orientation(mm) == 6 and H.exif_orientation(ii) == 3
    assert H.exif_orientation(mm[:12]) == 1
    assert H.exif_orientation(mm.replace(b"\x00\x06", b"\x00\x09")) == 1  # out of range
    assert H.exif_orientation(b"XX" + mm[2:]) == 1


# --------------------------------------------------------------------------- bad input


def corpus() -> list:
    # A list, not a generator: pytest 9.1 deprecates other iterables in parametrize.
    rows = (line.split("\t") for line in (CORPUS / "MANIFEST.tsv").read_text().splitlines())
    return [pytest.param(name, expect, id=name) for name, expect in rows]


@pytest.mark.parametrize("name, expect", corpus())
def test_corpus_of_bad_files(name, expect, tmp_path):
    data = (CORPUS / name).read_bytes()
    with pytest.raises(ValueError) as e:
        gi.decode(data, device="cpu")
    assert expect in str(e.value) and str(e.value).startswith("data: ")
    with pytest.raises(ValueError) as e:
        gi.read(CORPUS / name, device="cpu")
    assert expect in str(e.value) and str(CORPUS / name) in str(e.value)


def test_batch_error_names_the_index():
    good = pnm_bytes(rand((3, 3)))
    with pytest.raises(ValueError, match=r"^data\[1\]: PNM header: maxval 0"):
        gi.decode([good, (CORPUS / "pnm_maxval_zero.pgm").read_bytes(), good])


def test_pixel_cap():
    data = pnm_bytes(rand((10, 10)))
    assert gi.decode(data, max_pixels=100).shape == (1, 10, 10)
    with pytest.raises(ValueError, match="10x10 = 100 pixels is more than the cap of 99"):
        gi.decode(data, max_pixels=99)


def test_pixel_cap_module_default(monkeypatch):
    monkeypatch.setattr(gi, "MAX_IMAGE_PIXELS", 50)
    with pytest.raises(ValueError, match="cap of 50"):
        gi.decode(pnm_bytes(rand((10, 10))))


def test_absurd_jpeg_dimensions_allocate_nothing():
    # A 65000 x 65000 header over 100 bytes: refused from the header alone.
    with pytest.raises(ValueError, match="4225000000 pixels is more than the cap"):
        gi.decode((CORPUS / "jpeg_huge.jpg").read_bytes(), device="cpu")


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        (dict(mode="BGR"), ValueError, "mode must be 'UNCHANGED', 'RGB' or 'GRAY'"),
        (dict(on_error="ignore"), ValueError, "on_error must be 'raise' or 'skip'"),
        (dict(npy_layout="WHC"), ValueError, "npy_layout must be"),
        (dict(max_pixels=0), ValueError, "max_pixels must be a positive int"),
        (dict(raw={"height": 2}), TypeError, "raw must be a gdsio.image.RawFormat"),
        (dict(device="mps"), ValueError, "device must be cpu or cuda"),
        (dict(device="gpu7"), ValueError, "device must be 'cpu', 'cuda'"),
        (dict(on_error="skip"), ValueError, "applies to a list"),
    ],
)
def test_argument_errors(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        gi.decode(pnm_bytes(rand((2, 2))), **kwargs)


def test_data_errors():
    with pytest.raises(ValueError, match="data must be a uint8 tensor, got torch.int32"):
        gi.decode(torch.zeros(4, dtype=torch.int32))
    with pytest.raises(ValueError, match=r"data must be a 1-D tensor of bytes, got shape \(2, 2\)"):
        gi.decode(torch.zeros(2, 2, dtype=torch.uint8))
    with pytest.raises(TypeError, match="data\\[1\\] must be a 1-D uint8 torch tensor"):
        gi.decode([b"P5", 42])
    with pytest.raises(ValueError, match="data must be a 1-D uint8 array"):
        gi.decode(np.zeros((2, 2), np.uint8))
    with pytest.raises(ValueError, match="data: empty data"):
        gi.decode(b"")


def test_gpu_requests_fail_clearly_without_a_gpu():
    from gdsio import _libs

    if _libs.cuda_unusable_reason() is None:
        return  # a GPU is here: test_decode_gpu.py covers it
    with pytest.raises(gdsio.BackendUnavailable, match="cannot decode on cuda"):
        gi.decode(pnm_bytes(rand((2, 2))), device="cuda")
    with pytest.raises(gdsio.BackendUnavailable):
        gi.read(CORPUS / "empty.bin", device="cuda")
    job = (1 << 20, 4, 1 << 21, 2, 2, 0, 2, 1, 1, 1, 0, 0, 0, 0)
    with pytest.raises(gdsio.BackendUnavailable):
        _core.img_decode_pixels_cuda([job], device=0, stream=0)
    with pytest.raises(gdsio.BackendUnavailable):
        _core.nvjpeg_decode_batch(0, "nvjpeg-host", "rgb", [(1 << 20, 10, 1 << 21, 2, 2)], 0)


def test_core_validates_pixel_jobs():
    src = np.zeros(16, np.uint8)
    dst = np.zeros(64, np.uint8)
    ok = [src.ctypes.data, 16, dst.ctypes.data, 4, 4, 0, 4, 1, 1, 1, 0, 0, 0, 0]
    _core.img_decode_pixels_cpu([tuple(ok)], threads=1)

    def bad(**changes):
        j = list(ok)
        names = ["src", "src_bytes", "dst", "h", "w", "sc", "sy", "sx", "cin", "cout", "sample", "out", "convert", "maxval"]
        for k, v in changes.items():
            j[names.index(k)] = v
        return [tuple(j)]

    cases = [
        (dict(src_bytes=15), "the samples reach byte 16 but the source holds 15"),
        (dict(sy=5), "the samples reach byte 19"),
        (dict(src=0), "source pointer is null"),
        (dict(dst=0), "destination pointer is null"),
        (dict(sample=9), "unknown sample type 9"),
        (dict(convert=2), "luma conversion needs >= 3 source channels"),
        (dict(cout=2), "copy conversion needs dst_channels <= src_channels"),
        (dict(sample=1), "cannot be written as output type"),
        (dict(maxval=300), "maxval 300 exceeds the output range 255"),
        (dict(h=0), "bad size 0x4"),
        (dict(sx=-1), "bad strides"),
    ]
    for changes, match in cases:
        with pytest.raises(ValueError, match=match):
            _core.img_decode_pixels_cpu(bad(**changes), threads=1)


# --------------------------------------------------------------------------- skip, info, read


def test_on_error_skip_returns_good_images_and_failed_indices():
    a, b = rand((3, 4)), rand((5, 6, 3))
    bad = (CORPUS / "npy_object.npy").read_bytes()
    imgs, failed = gi.decode([pnm_bytes(a), bad, npy_bytes(b), b""], on_error="skip")
    assert failed == [1, 3]
    np.testing.assert_array_equal(imgs[0].numpy(), chw(a))
    np.testing.assert_array_equal(imgs[1].numpy(), chw(b))
    imgs, failed, infos = gi.decode([pnm_bytes(a), bad, npy_bytes(b)], on_error="skip", return_info=True)
    assert [i.index for i in infos] == [0, 2] and [i.format for i in infos] == ["pnm", "npy"]
    assert gi.decode([], on_error="skip") == ([], [])
    assert gi.decode([]) == []


def test_lists_of_different_sizes_and_formats():
    arrays = [rand((1 + k, 2 + 3 * k) + ((3,) if k % 2 else ())) for k in range(300)]
    data = [pnm_bytes(x) if k % 3 else npy_bytes(x) for k, x in enumerate(arrays)]
    imgs, infos = gi.decode([as_tensor(d) for d in data], return_info=True)
    for x, img in zip(arrays, imgs):
        np.testing.assert_array_equal(img.numpy(), chw(x))
    assert {i.backend for i in infos} == {"gdsio-cpu"}


def test_decode_is_thread_safe():
    arrays = [rand((40, 50, 3)) for _ in range(8)]
    data = [pnm_bytes(x) for x in arrays] + [pil_bytes(Image.fromarray(x)) for x in arrays]
    expect = [img.numpy() for img in gi.decode(data)]

    def work():
        for _ in range(5):
            for got, e in zip(gi.decode(data, mode="UNCHANGED"), expect):
                np.testing.assert_array_equal(got.numpy(), e)

    in_threads(work)


def test_read_files_on_the_cpu(tmp_path):
    a, b, c = rand((6, 7, 3)), rand((5, 4), np.uint16), rand((8, 9, 3))
    files = {
        "a.ppm": (pnm_bytes(a), chw(a)),
        "b.npy": (npy_bytes(b), chw(b)),
        "c.jpg": (pil_bytes(Image.fromarray(c), quality=90), None),
    }
    paths = []
    for name, (data, _) in files.items():
        (tmp_path / name).write_bytes(data)
        paths.append(tmp_path / name)
    imgs, infos = gi.read(paths, device="cpu", return_info=True)
    for (data, expect), img, info, p in zip(files.values(), imgs, infos, paths):
        if expect is None:
            expect = pil_chw(Image.open(io.BytesIO(data)))
        np.testing.assert_array_equal(img.numpy(), expect)
        assert info.source == str(p) and info.io is not None and info.io.backend == "posix"
        assert info.io.nbytes == len(data)
    one = gi.read(str(paths[0]), device="cpu")
    np.testing.assert_array_equal(one.numpy(), chw(a))


def test_read_errors_and_skip(tmp_path):
    good = tmp_path / "good.pgm"
    good.write_bytes(pnm_bytes(rand((3, 3))))
    missing = tmp_path / "missing.pgm"
    bad = tmp_path / "bad.pgm"
    bad.write_bytes(b"P5\n3 3\n255\n\x00")
    with pytest.raises(FileNotFoundError):
        gi.read([good, missing], device="cpu")
    with pytest.raises(ValueError, match=f"^{bad}: PNM header declares 3x3x1"):
        gi.read([good, bad], device="cpu")
    imgs, failed = gi.read([good, missing, bad, good], device="cpu", on_error="skip")
    assert failed == [1, 2] and len(imgs) == 2
    raw = gi.RawFormat(height=3, width=3)
    with pytest.raises(ValueError, match="holds 9 bytes, but the data holds 12"):
        gi.read(bad, device="cpu", raw=raw)
    (tmp_path / "rec.bin").write_bytes(bytes(range(9)))
    np.testing.assert_array_equal(gi.read(tmp_path / "rec.bin", device="cpu", raw=raw).numpy().ravel(), np.arange(9))


def test_long_jpeg_headers_take_several_rounds(tmp_path):
    # An ICC profile of 200 kB (four APP2 segments) before the frame header:
    # longer than both first looks (4 KiB of device data, 64 KiB of a file).
    photo = photos()[0][1]
    data = pil_bytes(Image.fromarray(photo), quality=90, icc_profile=bytes(range(256)) * 800)
    h = H.parse_jpeg(data, len(data), data[-32:])
    assert h.header_bytes > 200_000
    ref = pil_chw(Image.open(io.BytesIO(data)))
    np.testing.assert_array_equal(gi.decode(as_tensor(data)).numpy(), ref)
    (tmp_path / "icc.jpg").write_bytes(data)
    np.testing.assert_array_equal(gi.read(tmp_path / "icc.jpg", device="cpu").numpy(), ref)
    with pytest.raises(H.NeedMoreData) as e:
        H.parse_jpeg(data[:4096], len(data))
    assert e.value.nbytes > 4096


def test_nvjpeg_status_says_why():
    st = gi.nvjpeg_status()
    assert set(st) == {"loaded", "library", "version", "cudart_version", "reason"}
    if not st["loaded"]:
        assert st["reason"]
        b = gi.nvjpeg_backends(0)
        assert not any(v["usable"] or v["fancy_upsampling"] or v["fancy_upsampling_flag"] for v in b["backends"].values())


# --------------------------------------------------------------------------- fuzzing

def _seeds() -> list[bytes]:
    photo = rand((16, 24, 3))
    exif = Image.Exif()
    exif[0x0112] = 6
    return [
        pnm_bytes(photo),
        pnm_bytes(rand((4, 5), np.uint16), maxval=1000),
        b"P5\n# c\n3 2\n255\n" + bytes(6),
        npy_bytes(photo),
        npy_bytes(rand((3, 4), np.float32), (2, 0)),
        pil_bytes(Image.fromarray(photo), quality=80, exif=exif.tobytes()),
        pil_bytes(Image.fromarray(photo), quality=80, progressive=True),
    ] + [(CORPUS / n).read_bytes() for n in sorted(os.listdir(CORPUS)) if not n.endswith((".py", ".tsv"))]


SEEDS = _seeds()
PARSERS = [H.parse_pnm, H.parse_npy, H.parse_jpeg]


@st.composite
def mutated(draw) -> bytes:
    data = bytearray(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(0, 6))):
        op = draw(st.sampled_from(["flip", "cut", "insert", "delete"]))
        at = draw(st.integers(0, max(0, len(data) - 1)))
        if op == "flip" and data:
            data[at] = draw(st.integers(0, 255))
        elif op == "cut":
            del data[at:]
        elif op == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif data:
            del data[at : at + draw(st.integers(1, 16))]
    return bytes(data)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.binary(max_size=600), mutated()), st.integers(0, 700))
def test_fuzz_header_parsers(data, cut):
    for parse in PARSERS:
        # The whole data: a header or ValueError, nothing else.
        try:
            parse(data, len(data))
        except ValueError:
            pass
        # A prefix of it: may also ask for more.
        try:
            parse(data[:cut], len(data))
        except (ValueError, H.NeedMoreData) as e:
            if isinstance(e, H.NeedMoreData):
                assert cut < e.nbytes <= len(data)
    try:
        H.exif_orientation(data)
    except Exception as e:  # noqa: BLE001
        pytest.fail(f"exif_orientation raised {e!r}")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_fuzz_decode_raises_only_value_error(data):
    try:
        out = gi.decode([data], device="cpu", max_pixels=1 << 20, mode="RGB")
    except ValueError:
        return
    assert out[0].shape[0] == 3


# --------------------------------------------------------------------------- the GPU orchestration, on a stand-in core
#
# No GPU here: the nvJPEG and kernel entry points are replaced by Pillow and
# the CPU twin writing into the same output pointers, so that routing,
# grouping by backend and output, batch-then-single retries, the Pillow
# fallback, the luma pass and the staging of host bitstreams all run.


@pytest.fixture
def stand_in_gpu(monkeypatch):
    import ctypes

    from gdsio.image import _decode as D
    from gdsio.image import jpeg as J

    state = {"calls": [], "reject": b"\x00no-such-bytes\x00", "hw_ok": 1, "usable": {J.HARDWARE, J.HYBRID, J.HOST}, "syncs": 0,
             "reject_on": {J.HARDWARE, J.HYBRID, J.HOST}, "reject_with": ValueError}

    def decode_batch(device, backend, output, jobs, stream):
        state["calls"].append((backend, output, len(jobs)))
        blobs = [ctypes.string_at(ptr, n) for ptr, n, _, _, _ in jobs]
        if any(state["reject"] in b for b in blobs) and backend in state["reject_on"]:
            if state["reject_with"] is _core.NvjpegError:  # what the shim raises for EXECUTION_FAILED and the like
                raise _core.NvjpegError(f"nvJPEG failed: nvjpegDecodeBatched ({backend}): fake execution failure")
            raise ValueError(f"nvJPEG rejected the batch: nvjpegDecodeBatched ({backend}): fake status")
        for b, (_, _, dst, h, w) in zip(blobs, jobs):
            planar = np.ascontiguousarray(pil_chw(Image.open(io.BytesIO(b)).convert("RGB" if output == "rgb" else "L")))
            assert planar.shape[1:] == (h, w)
            ctypes.memmove(dst, planar.ctypes.data, planar.nbytes)

    def backends(dev):
        return {"backends": {b: {"usable": b in state["usable"], "reason": "" if b in state["usable"] else "off"}
                             for b in (J.HARDWARE, J.HYBRID, J.HOST)}}

    monkeypatch.setattr(_core, "nvjpeg_decode_batch", decode_batch)
    monkeypatch.setattr(_core, "img_decode_pixels_cuda", lambda jobs, device, stream: _core.img_decode_pixels_cpu(jobs, threads=2))
    monkeypatch.setattr(J, "nvjpeg_status", lambda: {"loaded": True, "library": "fake", "version": (13, 0, 0), "reason": ""})
    monkeypatch.setattr(J, "nvjpeg_backends", backends)
    monkeypatch.setattr(J, "hardware_check", lambda dev, prefixes: [state["hw_ok"]] * len(prefixes))
    monkeypatch.setattr(D, "_stream", lambda d: 0)
    monkeypatch.setattr(D, "_sync", lambda d: state.__setitem__("syncs", state["syncs"] + 1))
    monkeypatch.setattr(D, "_stage", lambda tensors, d: [t.clone() for t in tensors])

    def run(datas, mode="UNCHANGED"):
        opts = D._options(mode, "raise", False, None, "auto", None)
        items = [D._Item(i, f"data[{i}]", as_tensor(d), len(d)) for i, d in enumerate(datas)]
        D._read_headers(items, opts)
        for it in items:
            D._check(it, opts)
        D._decode_jpegs_cuda(items, torch.device("cpu"), opts)
        return items

    state["run"] = run
    return state


def _jpegs() -> dict[str, bytes]:
    photo = photos()[0][1][:96, :128]
    im = Image.fromarray(photo)
    return {
        "420": pil_bytes(im, quality=90, subsampling=2),
        "444": pil_bytes(im, quality=90, subsampling=0),
        "gray": pil_bytes(im.convert("L"), quality=90),
        "progressive": pil_bytes(im, quality=90, progressive=True),
        "cmyk": pil_bytes(im.convert("CMYK"), quality=90),
        "rejected": pil_bytes(im, quality=90, comment=b"REJECT-ME"),
    }


@pytest.mark.parametrize("mode", ["UNCHANGED", "RGB", "GRAY"])
def test_gpu_orchestration_on_a_stand_in(stand_in_gpu, mode):
    from gdsio.image import jpeg as J

    jp = _jpegs()
    stand_in_gpu["reject"] = b"REJECT-ME"
    items = stand_in_gpu["run"](list(jp.values()), mode)
    by = dict(zip(jp, items))
    pil_mode = {"UNCHANGED": None, "RGB": "RGB", "GRAY": "L"}[mode]
    for name, it in by.items():
        assert it.error is None, it.error
        ref = Image.open(io.BytesIO(jp[name]))
        ref = ref.convert(pil_mode) if pil_mode else ref
        np.testing.assert_array_equal(it.result.numpy(), pil_chw(ref), err_msg=name)
    assert by["420"].backend == by["444"].backend == by["gray"].backend == J.HARDWARE
    assert "bitstream copied to the GPU" in by["420"].reason
    assert by["progressive"].backend == J.PILLOW and by["progressive"].reason == "progressive JPEG"
    assert by["cmyk"].backend == J.PILLOW and "-coded JPEG" in by["cmyk"].reason
    assert by["rejected"].backend == J.PILLOW and "fake status" in by["rejected"].reason
    # One batch for the colour images (it fails on the rejected one), then one call per image.
    rgb_calls = [c for c in stand_in_gpu["calls"] if c[1] == "rgb"]
    # (In RGB mode the gray JPEG joins the RGB batch; otherwise it is decoded as Y.)
    assert rgb_calls[0] == (J.HARDWARE, "rgb", 4 if mode == "RGB" else 3)
    assert all(c[2] == 1 for c in rgb_calls[1:])
    assert ((J.HARDWARE, "y", 1) in stand_in_gpu["calls"]) == (mode != "RGB")


def test_gpu_orchestration_falls_down_the_backends(stand_in_gpu):
    from gdsio.image import jpeg as J

    jp = _jpegs()
    stand_in_gpu["hw_ok"] = 0  # nvJPEG's own check refuses the hardware decoder
    items = stand_in_gpu["run"]([jp["420"], jp["gray"]])
    assert [it.backend for it in items] == [J.HYBRID, J.HYBRID]
    assert all("nvjpegDecodeBatchedSupported refuses it" in it.reason for it in items)
    stand_in_gpu["usable"] = {J.HOST}
    stand_in_gpu["hw_ok"] = 1
    items = stand_in_gpu["run"]([jp["420"], jp["444"]])
    assert [it.backend for it in items] == [J.HOST, J.HOST]
    assert "nvjpeg-hardware-device: off" in items[0].reason and stand_in_gpu["syncs"] >= 1
    for it, name in zip(items, ["420", "444"]):
        np.testing.assert_array_equal(it.result.numpy(), pil_chw(Image.open(io.BytesIO(jp[name]))))
    stand_in_gpu["usable"] = set()
    items = stand_in_gpu["run"]([jp["420"]])
    assert items[0].backend == J.PILLOW and "nvjpeg-host: off" in items[0].reason


@pytest.mark.parametrize("error", [ValueError, _core.NvjpegError])
def test_an_image_a_backend_fails_goes_down_the_ladder_not_straight_to_pillow(stand_in_gpu, error):
    from gdsio.image import jpeg as J

    jp = _jpegs()
    stand_in_gpu.update(reject=b"REJECT-ME", reject_on={J.HARDWARE}, reject_with=error)
    items = stand_in_gpu["run"]([jp["rejected"], jp["420"]])
    assert [it.backend for it in items] == [J.HYBRID, J.HARDWARE], [it.reason for it in items]
    assert "fake" in items[0].reason and J.HARDWARE in items[0].reason
    np.testing.assert_array_equal(items[0].result.numpy(), pil_chw(Image.open(io.BytesIO(jp["rejected"]))))
    # Hybrid off too: the host backend takes it; everything off: Pillow.
    stand_in_gpu.update(reject_on={J.HARDWARE, J.HYBRID})
    assert stand_in_gpu["run"]([jp["rejected"]])[0].backend == J.HOST
    stand_in_gpu.update(reject_on={J.HARDWARE, J.HYBRID, J.HOST})
    it = stand_in_gpu["run"]([jp["rejected"]])[0]
    assert it.backend == J.PILLOW and it.error is None and it.reason.count("fake") == 3


def test_next_backend_skips_what_cannot_take_the_image():
    from gdsio.image import jpeg as J

    photo = photos()[0][1]
    base = pil_bytes(Image.fromarray(photo), quality=90)
    h = H.parse_jpeg(base, len(base), base[-32:])
    usable = {"backends": {b: {"usable": True, "reason": ""} for b in (J.HARDWARE, J.HYBRID, J.HOST)}}
    assert J.next_backend(J.HARDWARE, h, usable) == (J.HYBRID, "")
    assert J.next_backend(J.HYBRID, h, usable) == (J.HOST, "")
    assert J.next_backend(J.HOST, h, usable) == (J.PILLOW, "")
    no_hybrid = {"backends": dict(usable["backends"], **{J.HYBRID: {"usable": False, "reason": "off"}})}
    assert J.next_backend(J.HARDWARE, h, no_hybrid) == (J.HOST, f"{J.HYBRID}: off")
    try:
        rst = pil_bytes(Image.fromarray(photo), quality=90, restart_marker_blocks=4)
    except TypeError:
        return
    hr = H.parse_jpeg(rst, len(rst), rst[-32:])
    assert J.next_backend(J.HARDWARE, hr, usable) == (J.HOST, f"{J.HYBRID}: restart intervals")


def test_nvjpeg_run_fails_a_whole_chunk_when_the_backend_cannot_start(monkeypatch):
    from gdsio.image import jpeg as J
    from gdsio.io import BackendUnavailable

    calls, failed = [], []

    def batch(device, backend, output, jobs, stream):
        calls.append(len(jobs))
        raise BackendUnavailable("nvjpegCreateEx failed: fake")

    monkeypatch.setattr(_core, "nvjpeg_decode_batch", batch)
    J.nvjpeg_run(0, J.HOST, "rgb", [(k, 1, 0, 1, 1) for k in range(5)], 0, lambda k, why: failed.append((k, why)))
    assert calls == [5] and [k for k, _ in failed] == list(range(5)) and "fake" in failed[0][1]


def test_nvjpeg_run_lets_cuda_errors_through(monkeypatch):
    """A failed stream sync around the decode (a sticky CUDA error) is not about
    the images: no image-by-image retries, the error reaches the caller."""
    from gdsio.image import jpeg as J

    calls = []

    def batch(device, backend, output, jobs, stream):
        calls.append(len(jobs))
        raise RuntimeError("cudaStreamSynchronize (before the nvJPEG hardware decode): cudaErrorIllegalAddress")

    monkeypatch.setattr(_core, "nvjpeg_decode_batch", batch)
    with pytest.raises(RuntimeError, match="cudaErrorIllegalAddress"):
        J.nvjpeg_run(0, J.HARDWARE, "rgb", [(k, 1, 0, 1, 1) for k in range(5)], 0, lambda k, why: None)
    assert calls == [5]


def test_nvjpeg_run_retries_one_by_one(monkeypatch):
    from gdsio.image import jpeg as J

    calls, failed = [], []

    def batch(device, backend, output, jobs, stream):
        calls.append([j[0] for j in jobs])
        if any(j[0] in (3, 7) for j in jobs):
            raise ValueError("nvJPEG rejected the batch: fake")

    monkeypatch.setattr(_core, "nvjpeg_decode_batch", batch)
    monkeypatch.setattr(J, "BATCH", 4)
    J.nvjpeg_run(0, J.HARDWARE, "rgb", [(k, 1, 0, 1, 1) for k in range(10)], 0, lambda k, why: failed.append(k))
    assert failed == [3, 7]
    assert calls[0] == [0, 1, 2, 3] and calls[5] == [4, 5, 6, 7] and calls[10] == [8, 9]
