"""JPEG on the CPU (formats/jpeg.py): the header fields, and decode equal
to Pillow's in every mode, by libjpeg-turbo (linked into the extension, else
through simplejpeg: image/jpeg_cpu.py) or by Pillow for what that path leaves,
each saying why."""

from __future__ import annotations

import io

import numpy as np
import pytest
from image_helpers import as_tensor, cpu_jpeg, cpu_jpeg_refusal, photos, pil_bytes, pil_chw
from PIL import Image

import gdsio.image as gi
from gdsio.image.formats.jpeg import parse_jpeg


@pytest.mark.parametrize("subsampling", [0, 1, 2])  # 4:4:4, 4:2:2, 4:2:0
def test_jpeg_cpu_equals_pillow(subsampling):
    for name, photo in photos():
        data = pil_bytes(Image.fromarray(photo), quality=90, subsampling=subsampling)
        h = parse_jpeg(data, len(data), data[-32:])
        assert h.subsampling == ["444", "422", "420"][subsampling] and h.color == "ycbcr"
        img, info = gi.decode(as_tensor(data), return_info=True)
        assert (info.backend, info.format, info.reason) == (cpu_jpeg(), "jpeg", "")
        # torchvision's layout: a (C,H,W) view of the decoder's interleaved rows, no copy.
        assert img.stride() == (1, 3 * photo.shape[1], 3)
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
    assert parse_jpeg(prog, len(prog)).coding == "progressive"
    np.testing.assert_array_equal(gi.decode(prog).numpy(), pil_chw(Image.open(io.BytesIO(prog))))
    cmyk = pil_bytes(Image.fromarray(photo).convert("CMYK"), quality=90)
    h = parse_jpeg(cmyk, len(cmyk))
    assert h.components == 4 and h.color in ("cmyk", "ycck")
    np.testing.assert_array_equal(gi.decode(cmyk).numpy(), pil_chw(Image.open(io.BytesIO(cmyk))))  # 4 channels
    np.testing.assert_array_equal(gi.decode(cmyk, mode="RGB").numpy(), pil_chw(Image.open(io.BytesIO(cmyk)).convert("RGB")))


def test_jpeg_cpu_backends_and_reasons():
    """What libjpeg-turbo takes and what it leaves to Pillow, each
    with its reason; every output equals Pillow's."""
    photo = photos()[0][1]

    def check(data, backend, reason, mode="UNCHANGED", pil_mode=None):
        img, info = gi.decode(data, mode=mode, return_info=True)
        assert (info.backend, info.reason) == (backend, reason)
        ref = Image.open(io.BytesIO(data))
        np.testing.assert_array_equal(img.numpy(), pil_chw(ref.convert(pil_mode) if pil_mode else ref))

    gray = pil_bytes(Image.fromarray(photo).convert("L"), quality=90)
    check(gray, cpu_jpeg(), "")
    check(gray, cpu_jpeg(), "", "RGB", "RGB")
    check(pil_bytes(Image.fromarray(photo), quality=90, progressive=True), cpu_jpeg(), "")
    check(pil_bytes(Image.fromarray(photo), quality=90), cpu_jpeg(), "", "GRAY", "L")
    cmyk = pil_bytes(Image.fromarray(photo).convert("CMYK"), quality=90)
    check(cmyk, "pillow", cpu_jpeg_refusal(f"{parse_jpeg(cmyk, len(cmyk)).color.upper()}-coded JPEG"))
    # Trailing bytes after EOI: Pillow's rules decide what such data gives.
    base = pil_bytes(Image.fromarray(photo), quality=90)
    check(base + b"\0" * 40, "pillow", cpu_jpeg_refusal("no EOI marker at the end of the data (truncated, or trailing bytes)"))


def test_jpeg_cpu_warning_goes_to_pillow():
    """Data libjpeg-turbo warns about (a corrupt scan) is Pillow's to judge, and the reason says so."""
    photo = photos()[0][1]
    data = bytearray(pil_bytes(Image.fromarray(photo), quality=90))
    h = parse_jpeg(bytes(data), len(data))
    mid = (len(data) + len(data) // 2) // 2
    data[mid : mid + 64] = b"\xff\x00" * 32
    data = bytes(data)
    try:
        ref = pil_chw(Image.open(io.BytesIO(data)))
    except OSError:
        ref = None
    if ref is None:
        with pytest.raises(ValueError, match="Pillow cannot decode it"):
            gi.decode(data)
        return
    img, info = gi.decode(data, return_info=True)
    assert info.backend == "pillow" and info.reason.startswith(f"{cpu_jpeg()}: "), info.reason
    assert h.has_eoi
    np.testing.assert_array_equal(img.numpy(), ref)


def test_jpeg_header_fields():
    photo = photos()[0][1]
    data = pil_bytes(Image.fromarray(photo), quality=90, subsampling=2)
    h = parse_jpeg(data, len(data), data[-32:])
    assert (h.width, h.height, h.components, h.precision, h.coding) == (photo.shape[1], photo.shape[0], 3, 8, "baseline")
    assert h.interleaved and h.has_eoi and h.restart_interval == 0 and h.orientation == 1
    assert h.sampling == ((2, 2), (1, 1), (1, 1))
    assert not parse_jpeg(data[:-2], len(data) - 2, data[-34:-2]).has_eoi
    # Restart intervals, when this Pillow can write them.
    try:
        rst = pil_bytes(Image.fromarray(photo), quality=90, restart_marker_blocks=4)
    except TypeError:
        return
    assert parse_jpeg(rst, len(rst)).restart_interval == 4


def test_large_cpu_outputs_reuse_the_host_pool_and_never_share_memory():
    from gdsio import _core
    from gdsio.image.jpeg_cpu import POOLED_OUTPUT_MIN

    if not _core.jpeg_cpu_available():
        pytest.skip(_core.jpeg_cpu_version())  # a build without libjpeg-turbo: its decoders make their own arrays
    rng = np.random.default_rng(3)
    base = np.kron(rng.integers(0, 255, (70, 100, 3), dtype=np.uint8), np.ones((10, 10, 1), np.uint8))
    data = [pil_bytes(Image.fromarray(np.roll(base, 7 * k, axis=1)), quality=85) for k in range(3)]
    assert 700 * 1000 * 3 >= POOLED_OUTPUT_MIN
    want = [pil_chw(Image.open(io.BytesIO(d))) for d in data]
    before = _core.host_pool_stats().reuses
    first = gi.decode([as_tensor(d) for d in data])  # three outputs alive at once: three blocks
    ptrs = {t.untyped_storage().data_ptr() for t in first}
    assert len(ptrs) == 3
    for got, w in zip(first, want):
        np.testing.assert_array_equal(got.numpy(), w)
    del first, got  # freed: their blocks go back to the pool
    again = gi.decode([as_tensor(d) for d in data[::-1]])
    assert _core.host_pool_stats().reuses >= before + 3  # the next photos of that size take them, faulted in
    assert len({t.untyped_storage().data_ptr() for t in again}) == 3
    for got, w in zip(again, want[::-1]):  # every pixel rewritten: nothing of the earlier images is left
        np.testing.assert_array_equal(got.numpy(), w)


def test_one_cpu_jpeg_tensor_fast_path_gives_what_the_batch_steps_give():
    # gdsio.image.decode of one CPU tensor with default options takes formats/jpeg.py's decode_one;
    # a list takes the batch steps. Pixels, layout and every refusal must be the same.
    import warnings

    import gdsio

    photo = photos()[0][1]
    rgb = pil_bytes(Image.fromarray(photo), quality=90)
    gray = pil_bytes(Image.fromarray(photo).convert("L"), quality=90)
    for data in (rgb, gray):
        t = as_tensor(data)
        for mode in ("UNCHANGED", "RGB", "GRAY", "rgb"):
            one, listed = gi.decode(t, mode=mode), gi.decode([t], mode=mode)[0]
            assert one.shape == listed.shape and one.stride() == listed.stride() and one.dtype == listed.dtype
            assert bool((one == listed).all()), mode
    t = as_tensor(rgb)
    h, w = photo.shape[:2]
    with pytest.raises(ValueError, match="max_pixels"):
        gi.decode(t, max_pixels=h * w - 1)
    assert gi.decode(t, max_pixels=h * w).shape == (3, h, w)
    with gdsio.settings(max_image_pixels=h * w - 1), pytest.warns(gdsio.DecompressionBombWarning):
        gi.decode(t)
    # Data past the EOI (libjpeg-turbo's path refuses it): the batch steps' decoder, as for a list.
    padded = as_tensor(rgb + b"\0" * 64)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert bool((gi.decode(padded) == gi.decode([padded])[0]).all())
    with pytest.raises(ValueError, match="empty"):
        gi.decode(as_tensor(b""))


def _outcome(fn):
    """What a decode gave: the image (shape, strides, bytes), or the error's type and message
    (the input named as for one image)."""
    import warnings

    try:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            img = fn()
        return ("image", tuple(img.shape), img.stride(), img.numpy().tobytes(), [str(w.message) for w in seen])
    except Exception as e:  # noqa: BLE001 - the comparison is the point
        return (type(e), str(e).replace("data[0]", "data"))


def _one_jpeg_cases() -> dict[str, bytes]:
    from image_helpers import CORPUS

    photo = photos()[0][1]
    im = Image.fromarray(photo)
    rgb = pil_bytes(im, quality=90)
    exif = Image.Exif()
    exif[0x010E] = "x" * 6000  # a header past the 4 KiB the Python fast path used to read
    cases = {p.name: p.read_bytes() for p in sorted(CORPUS.glob("jpeg_*.jpg"))}
    cases.update({
        "420": rgb, "444": pil_bytes(im, quality=90, subsampling=0), "422": pil_bytes(im, quality=75, subsampling=1),
        "gray": pil_bytes(im.convert("L"), quality=90), "progressive": pil_bytes(im, quality=80, progressive=True),
        "restart": pil_bytes(im, quality=80, restart_marker_blocks=3),
        "cmyk": pil_bytes(im.convert("CMYK"), quality=90), "long header": pil_bytes(im, quality=90, exif=exif),
        "trailing bytes": rgb + b"\0" * 64, "truncated": rgb[: len(rgb) // 2],
        # libjpeg-turbo skips an APPn segment of length 0 or 1 and reads on; parse_jpeg refuses it.
        "APP1 of length 0": rgb[:2] + b"\xff\xe1\x00\x00" + rgb[2:],
        "COM of length 1": rgb[:2] + b"\xff\xfe\x00\x01" + rgb[2:],
        # Components 'R', 'G', 'B' and no JFIF marker: RGB-coded (both readers say so).
        "RGB ids": _rgb_ids(_without_jfif(rgb)),
        "not a JPEG": b"\x89PNG\r\n\x1a\n" + b"\0" * 32, "empty": b"",
    })
    return cases


def _rgb_ids(data: bytes) -> bytes:
    """The component ids 1, 2, 3 of the frame and scan headers made 'R', 'G', 'B'."""
    ids = bytes.maketrans(b"\x01\x02\x03", b"RGB")
    for marker, at, step in ((b"\xff\xc0", 10, 3), (b"\xff\xda", 5, 2)):
        i = data.index(marker)
        seg = bytearray(data[i:i + at + 3 * step])
        for k in range(3):
            seg[at + k * step] = seg[at + k * step : at + k * step + 1].translate(ids)[0]
        data = data[:i] + bytes(seg) + data[i + len(seg):]
    return data


def _without_jfif(data: bytes) -> bytes:
    assert data[2:4] == b"\xff\xe0"
    n = data[4] << 8 | data[5]
    return data[:2] + data[4 + n:]


def test_one_jpeg_core_path_gives_what_the_batch_steps_give_on_every_header():
    # decode_one's core call (jpeg_cpu_decode_image) reads the header with libjpeg-turbo, not parse_jpeg:
    # on every file, good or hostile, the single decode must give what the list's batch steps give (the
    # same pixels, layout and warnings, or the same error), and take exactly the images the batch's
    # libjpeg-turbo takes (none of the others: those it must leave to the batch steps).
    from gdsio import _core
    from gdsio.image import jpeg_cpu

    if not jpeg_cpu.box_available():
        pytest.skip("this build has no libjpeg-turbo")
    for name, data in _one_jpeg_cases().items():
        t = as_tensor(data)
        assert _outcome(lambda: gi.decode(t)) == _outcome(lambda: gi.decode([t])[0]), name
        core = _core.jpeg_cpu_decode_image(t, False, 1 << 40, 16 << 20, 1 << 20, 0)
        try:
            info = gi.decode([t], return_info=True)[1][0]
            batch_native = (info.backend, info.reason) == ("libjpeg-turbo", "")
        except ValueError:
            batch_native = False
        assert (core is not None) == batch_native, name
        if core is not None:
            assert core.strides == (1, 3 * core.shape[2] if core.shape[0] == 3 else core.shape[2], core.shape[0])
    rgb_coded = as_tensor(_one_jpeg_cases()["RGB ids"])
    assert gi.decode([rgb_coded], return_info=True)[1][0].reason.startswith("libjpeg-turbo: RGB-coded JPEG")


def test_one_jpeg_core_path_reuses_its_decompressor_after_any_failure():
    # jpeg_cpu_decode_image keeps one libjpeg-turbo decompressor a thread and resets it after each image:
    # a header it refuses, a scan cut short (a warning) or a corrupt scan must leave nothing behind, so
    # the next images decode as a fresh decompressor decodes them (Pillow's pixels), a gray one included.
    from gdsio import _core
    from gdsio.image import jpeg_cpu

    if not jpeg_cpu.box_available():
        pytest.skip("this build has no libjpeg-turbo")
    im = Image.fromarray(photos()[0][1])
    rgb, gray = pil_bytes(im, quality=90), pil_bytes(im.convert("L"), quality=85, progressive=True)
    sos = rgb.index(b"\xff\xda")
    cut = rgb[: sos + 400] + b"\xff\xd9"  # a scan cut short: libjpeg-turbo warns
    bad_scan = rgb[: sos + 20] + bytes(64) * 40 + rgb[-2:]  # a corrupt entropy-coded segment
    bad_header = rgb[:sos].replace(b"\xff\xc0", b"\xff\xc0\x00\x00", 1) + rgb[sos:]  # a frame of length 0

    def one(data: bytes):
        return _core.jpeg_cpu_decode_image(as_tensor(data), False, 1 << 40, 16 << 20, 1 << 20, 0)

    want_rgb, want_gray = pil_chw(Image.open(io.BytesIO(rgb))), pil_chw(Image.open(io.BytesIO(gray)))
    for bad in (cut, bad_scan, bad_header):
        assert one(rgb) is not None and np.array_equal(one(rgb), want_rgb)
        assert one(bad) is None
        assert np.array_equal(one(rgb), want_rgb)
        assert np.array_equal(one(gray), want_gray)
