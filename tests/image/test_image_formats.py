"""The format registry (image/formats/): every format module is listed once,
each sniffs its own bytes, and the batch machinery runs a format it has
never seen (one Format record, added to the registry) through decode and
read: the machinery names no format."""

from __future__ import annotations

import pkgutil
import struct

import numpy as np
import pytest
from image_helpers import chw, npy_bytes, pil_bytes, pnm_bytes, rand
from PIL import Image

import gdsio.image as gi
from gdsio.data import sources
from gdsio.errors import NeedMoreData
from gdsio.image import batch, formats
from gdsio.image.codec import Format, Size
from gdsio.image.formats import uncompressed
from gdsio.image.layout import interleaved_layout

# The modules under formats/ that are shared decoders, not formats.
SHARED = {"uncompressed"}
OPTS = batch.options(mode="UNCHANGED", on_error="raise")


def test_every_format_module_is_in_the_registry_once():
    modules = {m.name for m in pkgutil.iter_modules(formats.__path__)} - SHARED
    names = [f.name for f in formats.FORMATS]
    assert sorted(names) == sorted(modules) and len(set(names)) == len(names)
    for name in modules:
        module = __import__(f"gdsio.image.formats.{name}", fromlist=["FORMAT"])
        assert module.FORMAT in formats.FORMATS and module.FORMAT.name == name
        assert formats.by_name(name) is module.FORMAT
    with pytest.raises(KeyError, match="no image format 'ico'"):
        formats.by_name("ico")


def samples() -> dict[str, bytes]:
    a = rand((6, 7, 3))
    im = Image.fromarray(a)
    return {
        "jpeg": pil_bytes(im), "pnm": pnm_bytes(a), "npy": npy_bytes(a), "png": pil_bytes(im, "PNG"),
        "gif": pil_bytes(im.quantize(8), "GIF"), "bmp": pil_bytes(im, "BMP"), "tiff": pil_bytes(im, "TIFF"),
        "webp": pil_bytes(im, "WEBP", lossless=True), "dib": pil_bytes(im, "DIB"),
    }


def test_each_format_sniffs_its_own_bytes_and_no_other():
    for name, data in samples().items():
        claims = [f.name for f in formats.FORMATS if f.chosen is None and f.sniff(data[:12])]
        assert claims == [name]
        assert formats.identify(data[:12], OPTS).name == name
    raw = batch.options(mode="UNCHANGED", on_error="raise", raw=gi.RawFormat(2, 2))
    assert formats.identify(samples()["jpeg"], raw).name == "raw"  # raw= wins over any magic
    with pytest.raises(ValueError, match=r"unknown image format \(not JPEG, PNM, NPY, PNG, GIF, BMP, TIFF, WebP or DIB\)"):
        formats.identify(b"\x00\x00\x01\x00", OPTS)


def test_every_netpbm_variant_pillow_reads_is_pnm_and_dib_is_told_by_its_info_header():
    """P1..P6 and Pf are PNM (Pillow's PpmImagePlugin reads the ones gdsio's kernels
    do not); a DIB has no magic, Pillow's _dib_accept tells it by its info header's size."""
    for magic in (b"P1", b"P2", b"P3", b"P4", b"P5", b"P6", b"Pf"):
        assert formats.identify(magic + b"\n1 1\n", OPTS).name == "pnm"
    for size in (12, 40, 52, 56, 64, 108, 124):
        assert formats.identify(struct.pack("<I", size) + bytes(8), OPTS).name == "dib"
    for not_dib in (41, 0, 40 << 8):
        with pytest.raises(ValueError, match="unknown image format"):
            formats.identify(struct.pack("<I", not_dib) + bytes(8), OPTS)
    assert {".dib", ".pfm", ".pbm", ".pgm", ".ppm"} <= set(formats.file_extensions())


# A format the package does not have: "XYZ1", then height and width (u16
# big-endian), then gray uint8 samples. What adding a format takes: these
# functions and one registry entry.


def _sniff(buf: bytes) -> bool:
    return buf[:4] == b"XYZ1"


def _parse(buf: bytes, total: int, tail: bytes) -> tuple[int, int]:
    NeedMoreData.require(buf, total, 8, "XYZ header")
    return struct.unpack_from(">HH", buf, 4)


def _check(item, opts) -> Size:
    h, w = item.header
    return uncompressed.check_fits(item, interleaved_layout(8, h, w, 1, "u8", "uint8"), "XYZ")


XYZ = Format(name="xyz", title="XYZ", sniff=_sniff, parse=_parse, check=_check, decode=uncompressed.decode,
             extensions=(".xyz",))


def xyz_bytes(a: np.ndarray) -> bytes:
    return b"XYZ1" + struct.pack(">HH", *a.shape) + a.tobytes()


def test_a_new_format_is_one_record_in_the_registry(monkeypatch, tmp_path):
    monkeypatch.setattr(formats, "FORMATS", (*formats.FORMATS, XYZ))
    a, b = rand((5, 9)), rand((4, 4, 3))
    imgs, infos = gi.decode([xyz_bytes(a), pnm_bytes(b)], mode="RGB", return_info=True)
    np.testing.assert_array_equal(imgs[0].numpy(), np.repeat(a[None], 3, 0))
    np.testing.assert_array_equal(imgs[1].numpy(), chw(b))
    assert [(i.format, i.backend) for i in infos] == [("xyz", "gdsio-cpu"), ("pnm", "gdsio-cpu")]
    # The machinery's checks hold for it: truncation, the pixel cap; read() too.
    with pytest.raises(ValueError, match="data: XYZ header declares 9x5x1 uint8"):
        gi.decode(xyz_bytes(a)[:-1])
    with pytest.raises(ValueError, match="45 pixels is more than the cap of 44"):
        gi.decode(xyz_bytes(a), max_pixels=44)
    (tmp_path / "a.xyz").write_bytes(xyz_bytes(a))
    np.testing.assert_array_equal(gi.read(tmp_path / "a.xyz", device="cpu").numpy(), a[None])
    assert "XYZ" in str(pytest.raises(ValueError, formats.identify, b"\x00" * 12, OPTS).value)
    assert formats.file_extensions()[-1] == ".xyz"


def test_the_loader_scans_the_extensions_the_registry_lists():
    assert sources.IMAGE_EXTENSIONS == formats.file_extensions()
    assert {".jpg", ".ppm", ".png", ".gif", ".bmp", ".tif", ".webp"} <= set(sources.IMAGE_EXTENSIONS)
    assert ".npy" not in sources.IMAGE_EXTENSIONS  # a kind of its own: tensors
