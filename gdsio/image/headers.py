"""Image headers, parsed on the host from the first bytes of a file.

Every parser takes ``buf``, a prefix of the data, and ``total``, the length of
the whole data. When the header runs past ``buf`` but not past ``total`` it
raises ``NeedMoreData(n)``: call again with at least the first ``n`` bytes.
Anything else wrong raises ``ValueError`` with a sentence saying what. No
parser ever raises another exception, whatever the bytes (fuzzed in
tests/test_decode.py), and none unpickles or evaluates code.

>>> h = parse_pnm(b"P5\\n# a comment\\n640 480\\n255\\n", 307220)
>>> (h.width, h.height, h.maxval, h.data_offset)
(640, 480, 255, 27)
"""

from __future__ import annotations

import dataclasses
import struct
from typing import Union

from .. import _literal

__all__ = [
    "JpegHeader",
    "NeedMoreData",
    "NpyHeader",
    "PnmHeader",
    "exif_orientation",
    "parse_jpeg",
    "parse_npy",
    "parse_pnm",
    "sniff",
]

# A header longer than this is refused: no real PNM/NPY/JPEG header before the
# first scan comes close (a JPEG's APPn segments are 64 KiB each at most).
MAX_HEADER_BYTES = 16 << 20
# numpy's own limit (np.lib.format, max_header_size): a longer NPY header
# describes a structured dtype, which no image has.
NPY_MAX_HEADER = _literal.NPY_MAX_HEADER


class NeedMoreData(Exception):
    """The header continues past the bytes given: retry with ``nbytes`` of them."""

    def __init__(self, nbytes: int) -> None:
        super().__init__(f"the header needs the first {nbytes} bytes")
        self.nbytes = nbytes


def _need(buf: bytes, total: int, end: int, what: str) -> None:
    """Ensures buf[:end] is there: NeedMoreData when total has it, else ValueError."""
    if end <= len(buf):
        return
    if end <= total and len(buf) < total:
        raise NeedMoreData(end)
    raise ValueError(f"truncated {what}: it needs {end} bytes but the data holds {total}")


# The formats Pillow decodes for gdsio (gdsio.image.pillow), by their magic bytes.
_PILLOW_MAGIC = (
    (b"\x89PNG\r\n\x1a\n", "png"),
    (b"GIF87a", "gif"),
    (b"GIF89a", "gif"),
    (b"II*\x00", "tiff"),
    (b"MM\x00*", "tiff"),
    (b"II+\x00", "tiff"),  # BigTIFF
    (b"MM\x00+", "tiff"),
    (b"BM", "bmp"),
)


def sniff(buf: bytes) -> str | None:
    """The format from the first bytes (12 are enough), never from a file
    name: 'jpeg', 'pnm', 'npy', or one Pillow decodes ('png', 'gif',
    'tiff', 'bmp', 'webp'); None when unknown."""
    if buf[:2] == b"\xff\xd8":
        return "jpeg"
    if buf[:6] == b"\x93NUMPY":
        return "npy"
    if len(buf) >= 2 and buf[0:1] == b"P" and buf[1:2] in b"1234567fF":
        return "pnm"
    if buf[:4] == b"RIFF" and buf[8:12] == b"WEBP":
        return "webp"
    for magic, kind in _PILLOW_MAGIC:
        if buf[: len(magic)] == magic:
            return kind
    return None


# --------------------------------------------------------------------------- PNM

_PNM_WS = b" \t\n\v\f\r"


@dataclasses.dataclass(frozen=True)
class PnmHeader:
    """A binary PGM (P5) or PPM (P6) header."""

    magic: str  # "P5" or "P6"
    width: int
    height: int
    maxval: int  # 1..65535; samples are 2 bytes big-endian above 255
    data_offset: int  # where the raster starts

    @property
    def channels(self) -> int:
        return 1 if self.magic == "P5" else 3

    @property
    def sample_bytes(self) -> int:
        return 1 if self.maxval < 256 else 2

    @property
    def raster_bytes(self) -> int:
        return self.width * self.height * self.channels * self.sample_bytes

    @property
    def dtype(self) -> str:
        return "uint8" if self.maxval < 256 else "uint16"


def parse_pnm(buf: bytes, total: int) -> PnmHeader:
    """Netpbm's rules: the magic, then width, height and maxval as decimal
    numbers, each after whitespace; a comment runs from '#' to the end of the
    line and counts as whitespace (also right after maxval, as in libnetpbm's
    pm_getc); exactly one whitespace character ends the header."""
    _need(buf, total, 2, "PNM header")
    magic = bytes(buf[:2])
    if magic in (b"P1", b"P2", b"P3", b"P4"):
        raise ValueError(f"PNM {magic.decode()} (plain text or bitmap) is not supported: only binary P5 (gray) and P6 (RGB)")
    if magic == b"P7":
        raise ValueError("PAM (P7) is not supported: only binary P5 (gray) and P6 (RGB)")
    if magic in (b"Pf", b"PF"):
        raise ValueError("PFM (float PNM) is not supported: only binary P5 (gray) and P6 (RGB)")
    if magic not in (b"P5", b"P6"):
        raise ValueError(f"not a PNM image: magic {magic!r}")
    pos = 2

    def byte(i: int) -> int:
        _need(buf, total, i + 1, "PNM header")
        return buf[i]

    def skip_comment(i: int) -> int:
        # From '#' to the next CR or LF, which is consumed too.
        while True:
            c = byte(i)
            i += 1
            if c in (0x0A, 0x0D):
                return i

    values = []
    for name in ("width", "height", "maxval"):
        separated = False
        while True:
            c = byte(pos)
            if c in _PNM_WS:
                pos += 1
                separated = True
            elif c == 0x23:  # '#'
                pos = skip_comment(pos)
                separated = True
            else:
                break
        if not separated:
            raise ValueError(f"PNM header: expected whitespace before the {name} at byte {pos}")
        start = pos
        while 0x30 <= byte(pos) <= 0x39:
            pos += 1
            if pos - start > 10:
                raise ValueError(f"PNM header: the {name} has more than 10 digits")
        if pos == start:
            raise ValueError(f"PNM header: the {name} is not a decimal number (found {bytes([buf[pos]])!r} at byte {pos})")
        values.append(int(bytes(buf[start:pos])))
    c = byte(pos)
    if c in _PNM_WS:
        pos += 1
    elif c == 0x23:
        pos = skip_comment(pos)
    else:
        raise ValueError(f"PNM header: the maxval must be followed by one whitespace character, found {bytes([c])!r}")
    width, height, maxval = values
    if width < 1 or height < 1:
        raise ValueError(f"PNM header: zero size {width}x{height}")
    if not 1 <= maxval <= 65535:
        raise ValueError(f"PNM header: maxval {maxval} is outside 1..65535")
    return PnmHeader(magic.decode(), width, height, maxval, pos)


# --------------------------------------------------------------------------- NPY

_NPY_DTYPES = {"u1": "uint8", "u2": "uint16", "f4": "float32"}


@dataclasses.dataclass(frozen=True)
class NpyHeader:
    """An NPY header (format versions 1.0, 2.0, 3.0) of a plain numeric array."""

    version: tuple[int, int]
    descr: str  # as written, e.g. '<u2'
    fortran_order: bool
    shape: tuple[int, ...]
    data_offset: int

    @property
    def dtype(self) -> str:
        """'uint8', 'uint16' or 'float32'."""
        return _NPY_DTYPES[self.descr[1:]]

    @property
    def itemsize(self) -> int:
        return int(self.descr[2:])

    @property
    def big_endian(self) -> bool:
        return self.descr[0] == ">"

    @property
    def data_bytes(self) -> int:
        n = self.itemsize
        for d in self.shape:
            n *= d
        return n


def _npy_descr(descr: object) -> str:
    if not isinstance(descr, str):
        raise ValueError("NPY header: a structured dtype is not an image (descr is not a string)")
    d = descr.strip()
    if d[:1] not in ("<", ">", "|", "="):
        d = "=" + d
    if d[1:2] == "O":
        raise ValueError("NPY header: object arrays need pickle, which gdsio never loads")
    kind = d[1:]
    if kind not in _NPY_DTYPES:
        raise ValueError(f"NPY header: dtype {descr!r} is not supported; images are uint8, uint16 or float32")
    order = d[0]
    if order in ("|", "="):
        order = "<" if kind != "u1" else "|"  # '=' is native; every host gdsio runs on is little-endian
    if kind == "u1":
        order = "|"
    return order + kind


def parse_npy(buf: bytes, total: int) -> NpyHeader:
    """The NPY magic, version, header length and header dict, which is read
    as a literal (gdsio._literal: literals only, as numpy's ast.literal_eval, but
    thread-safe), never eval or pickle."""
    _need(buf, total, 8, "NPY header")
    if bytes(buf[:6]) != b"\x93NUMPY":
        raise ValueError("not an NPY file: bad magic")
    major, minor = buf[6], buf[7]
    if major == 1:
        _need(buf, total, 10, "NPY header")
        (hlen,) = struct.unpack_from("<H", buf, 8)
        start = 10
    elif major in (2, 3):
        _need(buf, total, 12, "NPY header")
        (hlen,) = struct.unpack_from("<I", buf, 8)
        start = 12
    else:
        raise ValueError(f"NPY format version {major}.{minor} is not supported (1.0, 2.0 and 3.0 are)")
    if hlen > NPY_MAX_HEADER:
        raise ValueError(f"NPY header of {hlen} bytes is longer than {NPY_MAX_HEADER} (numpy's own limit)")
    _need(buf, total, start + hlen, "NPY header")
    raw = bytes(buf[start : start + hlen])
    try:
        text = raw.decode("utf-8" if major >= 3 else "latin1")
        d = _literal.literal(text)
    except Exception as e:  # UnicodeDecodeError, ValueError, MemoryError...
        raise ValueError(f"NPY header is not a Python literal: {type(e).__name__}") from None
    if not isinstance(d, dict) or set(d) != {"descr", "fortran_order", "shape"}:
        raise ValueError("NPY header must be a dict with exactly the keys 'descr', 'fortran_order' and 'shape'")
    fortran = d["fortran_order"]
    if not isinstance(fortran, bool):
        raise ValueError("NPY header: fortran_order must be True or False")
    shape = d["shape"]
    if not isinstance(shape, tuple) or not all(type(v) is int and v >= 0 for v in shape):
        raise ValueError(f"NPY header: shape must be a tuple of non-negative ints, got {shape!r}"[:200])
    return NpyHeader((major, minor), _npy_descr(d["descr"]), fortran, shape, start + hlen)


# --------------------------------------------------------------------------- JPEG

_SOF_KINDS = {
    0xC0: "baseline", 0xC1: "extended", 0xC2: "progressive", 0xC3: "lossless",
    0xC5: "differential-sequential", 0xC6: "differential-progressive", 0xC7: "differential-lossless",
    0xC9: "arithmetic-extended", 0xCA: "arithmetic-progressive", 0xCB: "arithmetic-lossless",
    0xCD: "arithmetic-differential-sequential", 0xCE: "arithmetic-differential-progressive",
    0xCF: "arithmetic-differential-lossless",
}


@dataclasses.dataclass(frozen=True)
class JpegHeader:
    """What a JPEG's markers up to its first scan say."""

    width: int
    height: int
    components: int
    precision: int  # bits per sample (8 for nearly all)
    coding: str  # "baseline", "extended", "progressive", "lossless", "arithmetic-..."
    sampling: tuple[tuple[int, int], ...]  # (h, v) per component
    subsampling: str  # "gray", "444", "422", "420", "440", "411", "410", "other"
    color: str  # "gray", "ycbcr", "rgb", "cmyk", "ycck", "other" (libjpeg's rules)
    restart_interval: int  # DRI; 0 when none
    interleaved: bool  # the first scan holds every component (a single-scan image)
    orientation: int  # EXIF orientation 1..8, 1 when absent or unreadable
    header_bytes: int  # bytes up to and including the first SOS segment
    has_eoi: bool  # an EOI marker ends the data (else it is truncated or has trailing bytes)


def exif_orientation(tiff: bytes) -> int:
    """The Orientation tag (0x0112) of IFD0 of an EXIF TIFF block; 1 when absent or unreadable."""
    if len(tiff) < 8:
        return 1
    if tiff[:2] == b"II":
        e = "<"
    elif tiff[:2] == b"MM":
        e = ">"
    else:
        return 1
    if struct.unpack_from(e + "H", tiff, 2)[0] != 42:
        return 1
    ifd = struct.unpack_from(e + "I", tiff, 4)[0]
    if ifd + 2 > len(tiff):
        return 1
    (n,) = struct.unpack_from(e + "H", tiff, ifd)
    for k in range(n):
        at = ifd + 2 + 12 * k
        if at + 12 > len(tiff):
            break
        tag, typ, count = struct.unpack_from(e + "HHI", tiff, at)
        if tag == 0x0112:
            if typ != 3 or count < 1:  # SHORT
                return 1
            (v,) = struct.unpack_from(e + "H", tiff, at + 8)
            return v if 1 <= v <= 8 else 1
    return 1


def _subsampling(sampling: tuple[tuple[int, int], ...]) -> str:
    if len(sampling) == 1:
        return "gray"
    if len(sampling) != 3:
        return "other"
    (h0, v0), (h1, v1), (h2, v2) = sampling
    if (h1, v1) != (h2, v2) or h0 % h1 or v0 % v1:
        return "other"
    return {(1, 1): "444", (2, 1): "422", (2, 2): "420", (1, 2): "440", (4, 1): "411", (4, 2): "410"}.get(
        (h0 // h1, v0 // v1), "other"
    )


def parse_jpeg(buf: bytes, total: int, tail: bytes = b"\xff\xd9") -> JpegHeader:
    """Walks the markers from SOI to the first SOS. ``tail`` is the last bytes
    of the data (an EOI marker there means the data is complete)."""
    _need(buf, total, 2, "JPEG header")
    if bytes(buf[:2]) != b"\xff\xd8":
        raise ValueError("not a JPEG: no SOI marker")
    pos = 2
    frame: tuple[str, int, int, int, tuple[int, ...], tuple[tuple[int, int], ...]] | None = None
    jfif = False
    adobe_transform = None
    orientation = 1
    restart = 0
    while True:
        _need(buf, total, pos + 2, "JPEG header")
        if buf[pos] != 0xFF:
            raise ValueError(f"corrupt JPEG: expected a marker at byte {pos}, found 0x{buf[pos]:02x}")
        while True:  # fill bytes
            _need(buf, total, pos + 2, "JPEG header")
            if buf[pos + 1] != 0xFF:
                break
            pos += 1
        m = buf[pos + 1]
        pos += 2
        if m == 0x01 or 0xD0 <= m <= 0xD7:  # TEM, RSTn: no length
            continue
        if m == 0x00:
            raise ValueError(f"corrupt JPEG: a stuffed 0xFF00 outside a scan at byte {pos - 2}")
        if m == 0xD8:
            raise ValueError(f"corrupt JPEG: a second SOI marker at byte {pos - 2}")
        if m == 0xD9:
            raise ValueError("corrupt JPEG: EOI before any scan (no image data)")
        _need(buf, total, pos + 2, "JPEG header")
        (length,) = struct.unpack_from(">H", buf, pos)
        if length < 2:
            raise ValueError(f"corrupt JPEG: segment 0xFF{m:02X} at byte {pos - 2} has length {length}")
        end = pos + length
        if end > MAX_HEADER_BYTES:
            raise ValueError(f"JPEG header longer than {MAX_HEADER_BYTES >> 20} MiB before its first scan")
        seg_start = pos + 2
        if m in _SOF_KINDS:
            if frame is not None:
                raise ValueError("corrupt JPEG: more than one frame header (SOF)")
            _need(buf, total, end, "JPEG header")
            if length < 8:
                raise ValueError(f"corrupt JPEG: SOF segment of length {length}")
            precision, height, width, nf = struct.unpack_from(">BHHB", buf, seg_start)
            if length != 8 + 3 * nf:
                raise ValueError(f"corrupt JPEG: SOF length {length} does not fit {nf} components")
            if nf == 0:
                raise ValueError("corrupt JPEG: a frame of 0 components")
            ids: list[int] = []
            sampling: list[tuple[int, int]] = []
            for k in range(nf):
                cid, hv = buf[seg_start + 6 + 3 * k], buf[seg_start + 7 + 3 * k]
                h, v = hv >> 4, hv & 15
                if not (1 <= h <= 4 and 1 <= v <= 4):
                    raise ValueError(f"corrupt JPEG: component {k} has sampling factors {h}x{v}")
                ids.append(cid)
                sampling.append((h, v))
            if height == 0:
                raise ValueError("JPEG with its height in a DNL marker (height 0 in the frame header) is not supported")
            if width == 0:
                raise ValueError("corrupt JPEG: width 0 in the frame header")
            frame = (_SOF_KINDS[m], precision, height, width, tuple(ids), tuple(sampling))
        elif m == 0xDA:  # SOS
            if frame is None:
                raise ValueError("corrupt JPEG: a scan (SOS) before the frame header (SOF)")
            _need(buf, total, end, "JPEG header")
            ns = buf[seg_start] if length > 2 else 0
            if ns < 1 or length != 6 + 2 * ns:
                raise ValueError(f"corrupt JPEG: SOS of length {length} for {ns} components")
            coding, precision, height, width, frame_ids, frame_sampling = frame
            nf = len(frame_ids)
            if nf == 1:
                color = "gray"
            elif nf == 3:
                if jfif:
                    color = "ycbcr"
                elif adobe_transform is not None:
                    color = "rgb" if adobe_transform == 0 else "ycbcr"
                elif frame_ids == (82, 71, 66):  # 'R', 'G', 'B'
                    color = "rgb"
                else:
                    color = "ycbcr"
            elif nf == 4:
                color = "ycck" if adobe_transform == 2 else "cmyk"
            else:
                color = "other"
            return JpegHeader(
                width=width, height=height, components=nf, precision=precision, coding=coding,
                sampling=frame_sampling, subsampling=_subsampling(frame_sampling), color=color,
                restart_interval=restart, interleaved=ns == nf, orientation=orientation,
                header_bytes=end, has_eoi=b"\xff\xd9" in bytes(tail),
            )
        elif m == 0xDD:  # DRI
            _need(buf, total, end, "JPEG header")
            if length != 4:
                raise ValueError(f"corrupt JPEG: DRI of length {length}")
            (restart,) = struct.unpack_from(">H", buf, seg_start)
        elif m == 0xE0:  # APP0
            _need(buf, total, min(end, seg_start + 5), "JPEG header")
            if bytes(buf[seg_start : seg_start + 5]) == b"JFIF\x00":
                jfif = True
        elif m == 0xE1:  # APP1: EXIF
            _need(buf, total, min(end, seg_start + 6), "JPEG header")
            if bytes(buf[seg_start : seg_start + 6]) == b"Exif\x00\x00" and orientation == 1:
                _need(buf, total, end, "JPEG header")
                orientation = exif_orientation(bytes(buf[seg_start + 6 : end]))
        elif m == 0xEE:  # APP14: Adobe
            _need(buf, total, min(end, seg_start + 12), "JPEG header")
            if length >= 14 and bytes(buf[seg_start : seg_start + 5]) == b"Adobe":
                adobe_transform = buf[seg_start + 11]
        pos = end


Header = Union[PnmHeader, NpyHeader, JpegHeader]
