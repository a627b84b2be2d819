"""Writing WebDataset-layout tar shards (read by gdsio.data.shards and by
the ``webdataset`` library).

Each sample becomes a key ``%09d`` (its position in the source) with two
members: the image or the ``.npy`` array, its bytes as they are (never
re-encoded), named ``<key>.<extension of the file>`` (lower case), and
``<key>.cls``, the label as a decimal integer (no ``cls`` for an unlabeled
sample). A source's files are all images or all ``.npy`` files, as
gdsio.Loader's kind "auto" reads the shards back. Shards are
``<dst>/shard-000000.tar``, ``shard-000001.tar``, ...: a new one starts
when the next sample would take the current one past ``shard_bytes`` (a
sample larger than that gets a shard of its own). Each shard's index
(``shard-000000.tar.idx.json``) is written beside it.

>>> paths = write_shards("imagenet/train", "shards/", shard_bytes=256 << 20)
>>> loader = gdsio.Loader("shards/shard-{000000..000099}.tar", 256)
>>> write_shards([("x0.npy", 0), ("x1.npy", 1)], "arrays/")   # npy samples
"""

from __future__ import annotations

import io
import os
import tarfile
from typing import Any, Callable

from . import shards
from .sources import IMAGE_EXTENSIONS, NPY_EXTENSIONS, UNLABELED, file_list_of

__all__ = ["SHARD_NAME", "write_shards"]

SHARD_NAME = "shard-{:06d}.tar"
_HEADER = 512  # a ustar header; the data is padded to 512 bytes, and a shard ends with 1024 zero bytes


def _member(name: str, size: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = size, 0o444, 0
    return info


def write_shards(source: Any, dst: str | os.PathLike[str], *, shard_bytes: int = 256 << 20,
                 progress: Callable[[int], None] | None = None) -> list[str]:
    """Writes the images (or .npy arrays) of `source` into tar shards in `dst` (see the module docstring).

    Args:
        source: any source gdsio.Loader takes: an ImageFolder path (labels
            from the sorted class folders), a glob, a list of ``(path, label)``
            pairs or of paths (unlabeled), a FileList, a torchvision ImageFolder;
            of images, or of .npy files.
        dst: the folder for the shards (made if missing; shards already there
            with the same names are replaced).
        shard_bytes: the size a shard grows to before the next one starts.
        progress: called with the number of samples written after each one.

    Returns:
        list[str]: the shard paths, in order.

    Raises:
        ValueError: `shard_bytes` not positive; a source with no image or
            .npy file; a file whose extension is neither an image's nor .npy;
            a source of both. FileNotFoundError, OSError: a file that cannot
            be read, a `dst` that cannot be written.
    """
    if isinstance(shard_bytes, bool) or not isinstance(shard_bytes, int) or shard_bytes <= 0:
        raise ValueError(f"shard_bytes must be a positive int; got {shard_bytes!r}")
    files = file_list_of(source, IMAGE_EXTENSIONS + NPY_EXTENSIONS)
    if not files.paths:
        raise ValueError("source: no image or .npy file to write")
    exts = []
    for p in files.paths:
        ext = os.path.splitext(os.fspath(p))[1].lower()
        if ext not in IMAGE_EXTENSIONS + NPY_EXTENSIONS:
            raise ValueError(f"source: '{p}' does not have an image extension ({', '.join(IMAGE_EXTENSIONS)}) "
                             "nor .npy")
        if exts and (ext in NPY_EXTENSIONS) != (exts[0] in NPY_EXTENSIONS):
            raise ValueError(f"source: '{p}' and '{files.paths[0]}': both images and .npy files; shards of one "
                             "kind are read back as one (write each kind to shards of its own)")
        exts.append(ext)
    dst = os.fspath(dst)
    os.makedirs(dst, exist_ok=True)
    out: list[str] = []
    tar: tarfile.TarFile | None = None
    used = 0
    try:
        for k, (path, label, ext) in enumerate(zip(files.paths, files.labels.tolist(), exts)):
            with open(path, "rb") as f:
                data = f.read()
            key = f"{k:09d}"
            cls = b"" if label == UNLABELED else str(label).encode()
            need = _HEADER + _padded(len(data)) + (_HEADER + _padded(len(cls)) if cls else 0)
            if tar is None or (used and used + need > shard_bytes):
                if tar is not None:
                    tar.close()
                    shards.shard_index(out[-1])
                out.append(os.path.join(dst, SHARD_NAME.format(len(out))))
                if os.path.exists(out[-1] + shards.INDEX_SUFFIX):  # an earlier write's: never trusted for this one
                    os.unlink(out[-1] + shards.INDEX_SUFFIX)
                tar = tarfile.open(out[-1], "w", format=tarfile.USTAR_FORMAT)
                used = 0
            tar.addfile(_member(key + ext, len(data)), io.BytesIO(data))
            if cls:
                tar.addfile(_member(key + ".cls", len(cls)), io.BytesIO(cls))
            used += need
            if progress is not None:
                progress(k + 1)
    finally:
        if tar is not None:
            tar.close()
    shards.shard_index(out[-1])  # the index of each shard, by the same scan a reader would make
    return out


def _padded(n: int) -> int:
    return (n + 511) // 512 * 512
