"""Pillow as gdsio's decoder for PNG, GIF, BMP (and DIB), TIFF and WebP, the
PNM variants gdsio's kernels do not read (plain P1/P2/P3, bitmap P4, PFM),
and JPEG on the CPU.

These are the formats torchvision's ImageFolder opens besides JPEG and PNM
(``torchvision.datasets.folder.IMG_EXTENSIONS``, and GIF). gdsio has no GPU
decoder for them: the file is read into host memory, Pillow decodes it
there, and for a GPU destination the pixels are uploaded (one pinned copy
per batch, queued on the current stream). ``DecodeInfo.backend`` is
``"pillow"`` and ``DecodeInfo.reason`` says why no GPU decoder ran.

Each format is a module of its own (formats/png.py, ...), made by
``pillow_format``; they share ``decode``, so one batch's images of all of them
are decoded over one thread pool and uploaded in one copy.

The format is told from the magic bytes, not from the file name, and Pillow
is held to that format. The pixel rule (``max_pixels=``, else the decompression-bomb rule on the
``max_image_pixels`` setting) is checked on the size Pillow reads from the
header, before any pixel is decoded; Pillow's own check
(``PIL.Image.MAX_IMAGE_PIXELS``, the same default: a warning above it, a
refusal, as ValueError, above twice it) runs first, in Image.open.
Animated GIF and WebP and multi-page TIFF give their first frame, as
Pillow's ``Image.open`` (and so ImageFolder) does.

Channels follow torchvision's ``decode_image``:

* ``UNCHANGED``: gray 1 channel, gray + alpha 2, RGB 3, RGBA 4 (CMYK 4);
  palette images are expanded to RGB, or RGBA when they have transparency;
  1-bit images (PNG, BMP, PBM...) become 0/255 gray. 16-bit gray gives
  uint16 (as read_image keeps 16-bit PNG; Pillow's mode I of a PNG or a
  plain PGM holds 0..65535); float TIFF and PFM (Pillow's mode F) give
  float32; integer TIFF of 32 (or signed 16) bits (Pillow's mode I) gives
  int32.
* ``RGB``: alpha dropped, gray replicated, palette expanded. uint16,
  float32 and int32 gray is replicated too, never narrowed to uint8 (Pillow's
  ``convert("RGB")`` would clip it to 0..255).
* ``GRAY``: gdsio's rule for every format, Pillow's ``convert("L")`` luma
  of the RGB image (alpha dropped); uint16, float32 and int32 gray kept.

Pillow keeps 8 bits of a 16-bit colour PNG or TIFF (torchvision keeps 16
for PNG); ``DecodeInfo.reason`` says so when it happens.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import io
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import torch

from ..errors import BackendUnavailable, DecompressionBombError
from . import transfer
from .codec import Format, Item, Options, check_pixels

__all__ = [
    "DEEP_COLOUR_MODES", "PILLOW", "decode", "decode_one", "load_pillow", "map_threads", "pillow_decoder",
    "pillow_format", "to_chw",
]

PILLOW = "pillow"
# The modes in which Pillow may hold fewer bits than a deep-colour file (a format's reduced_bits looks closer).
DEEP_COLOUR_MODES = ("RGB", "RGBA", "LA")

_SIXTEEN = ("I;16", "I;16L", "I;16B", "I;16N")
# UNCHANGED: the Pillow modes kept as they are, and what the others become.
_KEPT = ("L", "LA", "RGB", "RGBA", "CMYK")
_UNCHANGED_AS = {"1": "L", "La": "LA", "PA": "RGBA", "RGBa": "RGBA", "RGBX": "RGB"}
# Pillow formats whose mode I holds 16-bit samples, 0..65535 (Pillow < 10 opens
# 16-bit gray PNG as mode I; a plain PGM with maxval above 255 is mode I).
_SIXTEEN_IN_I = ("PNG", "PPM")


@dataclasses.dataclass(frozen=True)
class _Spec:
    """What the shared decoder needs of one Pillow format."""

    pillow_name: str  # Pillow's format name: Image.open(formats=[...])
    # (loaded image, its bytes) -> why the pixels hold fewer bits than the file, or "".
    reduced_bits: Callable[[Any, bytes], str]
    # Why this Pillow cannot decode the format (built without it), or None.
    missing: Callable[[], str | None]


_SPECS: dict[str, _Spec] = {}  # Format.name -> its _Spec, filled by pillow_format


def _no_loss(im: Any, data: bytes) -> str:
    return ""


def _always_there() -> str | None:
    return None


def pillow_format(
    name: str,
    title: str,
    magics: Sequence[bytes],
    *,
    pillow_name: str,
    reduced_bits: Callable[[Any, bytes], str] = _no_loss,
    missing: Callable[[], str | None] = _always_there,
    sniff: Callable[[bytes], bool] | None = None,
    extensions: Sequence[str] = (),
) -> Format:
    """The Format record of a format Pillow decodes: told by ``magics`` (or
    ``sniff``), its header read by Pillow when it decodes (the size is capped
    then, before the pixels), its bytes read into host memory."""
    pillow_decoder(name, pillow_name=pillow_name, reduced_bits=reduced_bits, missing=missing)
    magic_tuple = tuple(magics)

    def by_magic(buf: bytes) -> bool:
        return any(buf[: len(m)] == m for m in magic_tuple)

    return Format(
        name=name, title=title, sniff=sniff or by_magic, parse=_no_header, check=_checked_when_decoded,
        decode=decode, host_bytes=True, extensions=tuple(extensions),
    )


def pillow_decoder(
    name: str,
    *,
    pillow_name: str,
    reduced_bits: Callable[[Any, bytes], str] = _no_loss,
    missing: Callable[[], str | None] = _always_there,
) -> None:
    """Lets ``decode`` take items of the Format named `name` (held to
    Pillow's ``pillow_name``): what pillow_format does for its records, and a
    format whose own decode hands Pillow some of its images calls alone
    (formats/pnm.py: the PNM variants gdsio's kernels do not read)."""
    _SPECS[name] = _Spec(pillow_name, reduced_bits, missing)


def _no_header(buf: bytes, total: int, tail: bytes = b"") -> None:
    return None  # Pillow reads the header when it decodes


def _checked_when_decoded(item: Item, opts: Options) -> None:
    return None  # decode_one caps the size Pillow reads from the header, before the pixels


def load_pillow() -> Any:
    """PIL.Image, or BackendUnavailable saying how to install it."""
    try:
        from PIL import Image
    except ImportError:
        raise BackendUnavailable(
            "Pillow is needed to decode PNG, GIF, BMP, TIFF, WebP, plain PNM and PFM (and JPEG on the CPU) "
            "and is not installed "
            "(it is a dependency of gdsio): pip install pillow"
        ) from None
    return Image


def to_chw(im: Any, mode: str) -> Any:
    """A loaded Pillow image -> a CPU (C,H,W) tensor for gdsio's `mode`
    ('UNCHANGED', 'RGB' or 'GRAY'), by the rules of the module docstring."""
    m = im.mode
    if m in _SIXTEEN or (m == "I" and im.format in _SIXTEEN_IN_I):
        arr = np.asarray(im).astype(np.uint16)
    elif m == "F":
        arr = np.array(im, dtype=np.float32)
    elif m == "I":  # 32-bit (or signed 16-bit) integer samples, kept whole
        arr = np.array(im, dtype=np.int32)
    else:
        if m in ("P", "PA"):
            # Palette expanded first: RGBA where there is transparency, so the
            # conversions below drop alpha the way they do for RGBA images.
            im = im.convert("RGBA" if m == "PA" or "transparency" in im.info else "RGB")
            m = im.mode
        if mode == "UNCHANGED":
            if m not in _KEPT:
                im = im.convert(_UNCHANGED_AS.get(m, "RGB"))
        elif mode == "RGB":
            if m != "RGB":
                im = im.convert("RGB")
        elif m not in ("L", "1", "LA", "La"):  # GRAY: the luma of the RGB image, as for JPEG
            im = (im if m == "RGB" else im.convert("RGB")).convert("L")
        elif m != "L":
            im = im.convert("L")
        arr = np.array(im, dtype=np.uint8)
    if arr.ndim == 2:
        arr = arr[:, :, None]
    if mode == "RGB" and arr.shape[2] == 1:  # 16-bit, float and int32 gray: replicated, as gdsio's PNM path does
        arr = np.repeat(arr, 3, axis=2)
    return torch.from_numpy(np.ascontiguousarray(arr.transpose(2, 0, 1)))


def _orientation(im: Any) -> int:
    try:
        v = im.getexif().get(0x0112, 1)
    except Exception:  # a corrupt EXIF block only loses the orientation
        return 1
    return v if isinstance(v, int) and 1 <= v <= 8 else 1


def decode_one(data: bytes, name: str, opts: Options, source: str) -> tuple[Any, int, str]:
    """One image of format `name` (a Format.name made by pillow_format) ->
    (CPU (C,H,W) tensor, EXIF orientation 1..8, note). The size Pillow reads
    from the header is held to the pixel rule (codec.check_pixels; `source`
    names the image in its warning) before the pixels are decoded. ValueError says what is wrong (corrupt, truncated, too large);
    BackendUnavailable when Pillow is missing or was built without this format."""
    Image = load_pillow()
    spec = _SPECS[name]
    why = spec.missing()
    if why:
        raise BackendUnavailable(why)
    fmt = spec.pillow_name
    with _pillow_errors(Image, f"read this {fmt} image's header"):
        f = Image.open(io.BytesIO(data), formats=[fmt])
    with f:
        w, h = f.size
        check_pixels(w, h, opts, source)
        with _pillow_errors(Image, f"decode this {fmt} image"):
            f.load()
        return to_chw(f, opts.mode), _orientation(f), spec.reduced_bits(f, data)


@contextlib.contextmanager
def _pillow_errors(Image: Any, what: str) -> Iterator[None]:
    """Whatever corrupt or truncated data makes Pillow raise (OSError,
    SyntaxError, EOFError, ValueError...) as one ValueError saying so."""
    try:
        yield
    except Image.DecompressionBombError as e:
        raise DecompressionBombError(f"Pillow refused it as a decompression bomb: {e}") from None
    except Image.UnidentifiedImageError:  # its message holds only the BytesIO's repr
        raise ValueError(f"Pillow cannot {what} (corrupt or truncated)") from None
    except Exception as e:
        raise ValueError(f"Pillow cannot {what}: {str(e) or type(e).__name__}") from None


def map_threads(fn: Callable[[Any], Any], work: Sequence[Any], threads: int, prefix: str) -> list[Any]:
    """fn over `work` on up to `threads` threads (Pillow and libjpeg release
    the GIL while they decode); each entry is fn's result or the ValueError it raised."""

    def one(w: Any) -> Any:
        try:
            return fn(w)
        except ValueError as e:
            return e

    if len(work) <= 1 or threads <= 1:
        return [one(w) for w in work]
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(threads, len(work)), thread_name_prefix=prefix) as ex:
        return list(ex.map(one, work))


def decode(items: Sequence[Item], target: Any, opts: Options) -> None:
    """The decoder of every format made by pillow_format: decoded on the
    host, then uploaded in one copy for a GPU target."""
    if not items:
        return
    work = [(it.data.cpu().numpy().tobytes(), it.format.name, it.name) for it in items]
    results = map_threads(lambda w: decode_one(w[0], w[1], opts, w[2]), work, opts.threads, "gdsio-pillow")
    done = []
    for it, r in zip(items, results):
        if isinstance(r, ValueError):
            it.fail(str(r), type(r) if isinstance(r, DecompressionBombError) else ValueError)
            continue
        it.result, it.orientation, note = r
        it.backend = PILLOW
        if target.type == "cuda":
            it.note(f"no GPU decoder for this {it.format.title} image in gdsio: Pillow decodes it on the CPU")
        it.note(note)
        done.append(it)
    for it, r in zip(done, transfer.upload([it.result for it in done], target)):
        it.result = r
