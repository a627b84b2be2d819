"""The header of a JPEG, parsed on the host (``parse_jpeg``): size, coding,
sampling, colour, restart interval and EXIF orientation, read from the markers
up to the first scan. The JPEG format (formats/jpeg.py) and the host decoders
(jpeg_cpu.py) both read a ``JpegHeader``.
"""

from __future__ import annotations

import dataclasses
import struct

from .codec import MAX_HEADER_BYTES, NeedMoreData
from .exif import exif_orientation

__all__ = ["JpegHeader", "parse_jpeg"]

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


def _subsampling(sampling: tuple[tuple[int, int], ...]) -> str:
    got = _SUBSAMPLING_OF.get(sampling)
    if got is None:
        got = _subsampling_of(sampling)
        if len(sampling) <= 3:  # factors 1..4: at most 16 + 16**3 keys, whatever the files
            _SUBSAMPLING_OF[sampling] = got
    return got


_SUBSAMPLING_OF: dict[tuple[tuple[int, int], ...], str] = {}


def _subsampling_of(sampling: tuple[tuple[int, int], ...]) -> str:
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


def _next_marker(buf: bytes, total: int, pos: int) -> tuple[int, int]:
    """(position after the marker, marker code) of the next marker from `pos`,
    found as libjpeg's next_marker (and Pillow's header walk) find it: bytes
    before it are skipped (libjpeg warns "extraneous bytes before marker"),
    so are stuffed 0xFF00 pairs and 0xFF fill bytes."""
    need = NeedMoreData.require
    while True:
        if pos > MAX_HEADER_BYTES:
            raise ValueError(f"JPEG header longer than {MAX_HEADER_BYTES >> 20} MiB before its first scan")
        ff = buf.find(b"\xff", pos)
        if ff < 0:  # not in what we have: ask for more, or there is none
            if len(buf) < total:
                raise NeedMoreData(len(buf) + 1)
            raise ValueError(f"corrupt JPEG: no marker after byte {pos}: the data ends first (truncated?)")
        pos = ff
        while True:
            need(buf, total, pos + 2, "JPEG header")
            if buf[pos + 1] != 0xFF:
                break
            pos += 1
        m = buf[pos + 1]
        pos += 2
        if m != 0x00:
            return pos, m


def parse_jpeg(buf: bytes, total: int, tail: bytes = b"\xff\xd9") -> JpegHeader:
    """Walks the markers from SOI to the first SOS. ``tail`` is the last bytes
    of the data (an EOI marker there means the data is complete).

    Raises NeedMoreData for a header that runs past ``buf``, ValueError for
    anything else wrong, and nothing else whatever the bytes."""
    need = NeedMoreData.require
    need(buf, total, 2, "JPEG header")
    if bytes(buf[:2]) != b"\xff\xd8":
        raise ValueError("not a JPEG: no SOI marker")
    pos = 2
    frame: tuple[str, int, int, int, tuple[int, ...], tuple[tuple[int, int], ...]] | None = None
    jfif = False
    adobe_transform = None
    orientation = 1
    restart = 0
    data = bytes(buf)
    # `if end > n: need(...)` is need(...) without its call when the bytes are there (nearly always).
    n = len(data)
    while True:
        m = data[pos + 1] if pos + 2 <= n and pos <= MAX_HEADER_BYTES and data[pos] == 0xFF else 0xFF
        if m != 0xFF and m != 0x00:  # the next marker right here, as _next_marker would find it
            pos += 2
        else:
            pos, m = _next_marker(data, total, pos)
        if m == 0x01 or 0xD0 <= m <= 0xD7:  # TEM, RSTn: no length
            continue
        if m == 0xD8:
            raise ValueError(f"corrupt JPEG: a second SOI marker at byte {pos - 2}")
        if m == 0xD9:
            raise ValueError("corrupt JPEG: EOI before any scan (no image data)")
        if pos + 2 > n:
            need(buf, total, pos + 2, "JPEG header")
        length = data[pos] << 8 | data[pos + 1]
        if length < 2:
            raise ValueError(f"corrupt JPEG: segment 0xFF{m:02X} at byte {pos - 2} has length {length}")
        end = pos + length
        if end > MAX_HEADER_BYTES:
            raise ValueError(f"JPEG header longer than {MAX_HEADER_BYTES >> 20} MiB before its first scan")
        if m == 0xDB or m == 0xC4:  # DQT, DHT: nothing here reads them (the most frequent segments)
            pos = end
            continue
        seg_start = pos + 2
        if m in _SOF_KINDS:
            if frame is not None:
                raise ValueError("corrupt JPEG: more than one frame header (SOF)")
            if end > n:
                need(buf, total, end, "JPEG header")
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
            if end > n:
                need(buf, total, end, "JPEG header")
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
            if end > n:
                need(buf, total, end, "JPEG header")
            if length != 4:
                raise ValueError(f"corrupt JPEG: DRI of length {length}")
            (restart,) = struct.unpack_from(">H", buf, seg_start)
        elif m == 0xE0:  # APP0
            if min(end, seg_start + 5) > n:
                need(buf, total, min(end, seg_start + 5), "JPEG header")
            if bytes(buf[seg_start : seg_start + 5]) == b"JFIF\x00":
                jfif = True
        elif m == 0xE1:  # APP1: EXIF
            if min(end, seg_start + 6) > n:
                need(buf, total, min(end, seg_start + 6), "JPEG header")
            if bytes(buf[seg_start : seg_start + 6]) == b"Exif\x00\x00" and orientation == 1:
                if end > n:
                    need(buf, total, end, "JPEG header")
                orientation = exif_orientation(bytes(buf[seg_start + 6 : end]))
        elif m == 0xEE:  # APP14: Adobe
            if min(end, seg_start + 12) > n:
                need(buf, total, min(end, seg_start + 12), "JPEG header")
            if length >= 14 and bytes(buf[seg_start : seg_start + 5]) == b"Adobe":
                adobe_transform = buf[seg_start + 11]
        pos = end
