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


def decode_batch(datas: list[Any], device: Any, mode: str) -> tuple[list[Any], dict[int, BaseException], dict[str, int]]:
    """Many encoded images in one call (one launch per format and backend) ->
    (images, None where failed; {position: error}; {decoder name: images}).
    A failed image's error comes from decoding it alone again, so the
    message is the decoder's own."""
    from .. import image

    imgs, failed, infos = image.decode(datas, device=device, mode=mode, on_error="skip", return_info=True)
    bad = {int(k) for k in failed}
    out: list[Any] = []
    errors: dict[int, BaseException] = {}
    good = iter(imgs)
    for k in range(len(datas)):
        if k not in bad:
            out.append(next(good))
            continue
        out.append(None)
        try:
            image.decode(datas[k], device=device, mode=mode)
            errors[k] = ValueError("the batched decoder rejected this image")
        except Exception as e:
            errors[k] = e
    backends: dict[str, int] = {}
    for info in infos:
        backends[info.backend] = backends.get(info.backend, 0) + 1
    return out, errors, backends
