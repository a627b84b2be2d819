"""The loader's one contact with gdsio.image: decode calls and the names of
the decoders that ran, in one place. EXIF orientation is not applied, as
torchvision's ImageFolder (PIL) does not apply it."""

from __future__ import annotations

from typing import Any


def decode_one(data: Any, device: Any, mode: str) -> tuple[Any, str]:
    """One encoded image (1-D uint8 tensor) -> ((C,H,W) tensor, decoder name); raises on a bad image."""
    from .. import image

    img, info = image.decode(data, device=device, mode=mode, return_info=True)
    return img, info.backend


def image_setup(device: Any, mode: str) -> tuple[Any, Any]:
    """(target device, decode options) for read_image/decode_items, made once
    per pass rather than per image."""
    from ..image import _decode as D

    return D._target(device), D._options(mode, "skip", False, None, "auto", None)


def read_image(path: str, setup: tuple[Any, Any]) -> Any:
    """Reader thread, GPU loader: the header read on the host (a pread of the
    first 64 KiB, checked: a bad file fails before its bulk read), then the
    whole file into the target's memory by gdsio.read. Returns the item for
    decode_items; raises the file's error (OSError, ValueError)."""
    from ..image import _decode as D

    target, opts = setup
    it = D._Item(0, path)
    D._probe_file(it, opts)
    if it.error is None:
        D._read_bodies([it], target, None, 1)
    if it.error is not None:
        raise it.error
    return it


def decode_items(items: list[Any], setup: tuple[Any, Any]) -> tuple[list[Any], dict[int, BaseException], dict[str, int]]:
    """Items from read_image decoded in one call (one launch per format and
    backend; no header goes back to the host, it is there already) ->
    (images, None where failed; {position: error naming the file}; {decoder name: images})."""
    from ..image import _decode as D

    target, opts = setup
    for k, it in enumerate(items):
        it.index = k
    D._run(items, target, opts)
    out = [it.result if it.error is None else None for it in items]
    errors = {k: it.error for k, it in enumerate(items) if it.error is not None}
    backends: dict[str, int] = {}
    for it in items:
        if it.error is None:
            backends[it.backend] = backends.get(it.backend, 0) + 1
    return out, errors, backends
