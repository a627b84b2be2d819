"""Where samples come from: a folder in ImageFolder layout, a glob, a list of
paths (with optional labels), a torchvision ``ImageFolder`` (its ``samples``
and ``class_to_idx``), or one file of fixed-size records. Remote
objects too: ``s3://bucket/prefix/`` is an ImageFolder (classes from the
first path component under the prefix), ``s3://bucket/prefix/*.jpg`` a glob
(``*`` matches across ``/``, as in S3 keys), and lists may hold s3:// and
http(s):// URLs.

A source becomes a ``SampleTable``: the files, a label per file, and for raw
records how many records each file holds. Sample ``i`` is resolved to
(file, byte offset) with a binary search over per-file record counts, so a
single file of 50 million records costs two small arrays, not 50 million
entries. Tar shards in the WebDataset layout (a path, URL, list, glob or
brace range of ``.tar`` files, with kind "auto", "image" or "npy";
gdsio.data.shards, remote ones gdsio.data.remote_shards) give one sample per
tar sample: its image member, or its npy member (kind "npy", or "auto" over
samples without an image), as (shard, byte offset, length, label); so do
the shards a wids dataset description (a ``.json``; gdsio.data.shard_index_formats) lists.

One rule for a source with nothing to load: one that names nothing (a
missing path, no such bucket, an s3:// prefix with no object: S3 has no empty
folders) raises ``FileNotFoundError``; one that exists but holds no sample
with the extensions looked for (an empty folder, a folder of other files, an
empty class folder or prefix, a glob matching nothing) raises ``ValueError``
naming the source and the extensions: the caller pointed at the wrong place
or asked for the wrong kind.

>>> table = scan("imagenet/train", kind="auto")       # ImageFolder layout
>>> table.kind, len(table), table.classes[:3]
('image', 1281167, ['n01440764', 'n01443537', 'n01484850'])
>>> scan("cifar.bin", kind="raw", record_shape=(3, 32, 32))   # one file, N records
"""

from __future__ import annotations

import dataclasses
import fnmatch
import functools
import glob as _glob
import math
import os
from typing import Any, Iterable, Sequence

import numpy as np
import torch

from ..image import formats
from ..io import File, s3
from ..io.urls import is_url, scheme_of, split_s3
from . import remote_shards, shard_index_formats, shards

__all__ = ["IMAGE_EXTENSIONS", "KINDS", "NPY_EXTENSIONS", "UNLABELED", "FileList", "SampleTable", "scan"]

KINDS = ("auto", "image", "npy", "raw")

# What gdsio.image decodes, by the extensions its format registry lists:
# JPEG, binary PNM, and through Pillow on the CPU PNG, GIF, BMP, TIFF and
# WebP (torchvision's ImageFolder extensions, and more). The format itself is
# told from each file's first bytes, not from its name. ``.npy`` files are
# their own kind: a tensor of any shape, loaded with gdsio.load_npy.
IMAGE_EXTENSIONS = formats.file_extensions()
NPY_EXTENSIONS = (".npy",)
UNLABELED = -1  # the label of a sample whose source carries no labels

# torchvision's loaders of an ImageFolder, which decode to RGB as gdsio does by
# default: a dataset using another one would have its loader silently unused.
_TORCHVISION_LOADERS = {("torchvision.datasets.folder", n) for n in ("default_loader", "pil_loader", "accimage_loader")}

# What gdsio.Loader does instead of an ImageFolder's transforms, which it never runs.
_DATASET_TRANSFORMS = {
    "transform": "pass its gdsio equivalent as gdsio.Loader's transform= (gdsio.data.Compose, RandomResizedCrop, "
                 "Normalize, ...; or a torchvision v2 transform, run per sample on uint8 (C,H,W) tensors, not PIL images)",
    "target_transform": "map the labels of each batch yourself, or pass the pairs with mapped labels: "
                        "gdsio.Loader([(path, f(label)) for path, label in ds.samples], ...)",
    "transforms": "split it into gdsio.Loader's transform= for the images and a mapping of each batch's labels",
}


@dataclasses.dataclass
class FileList:
    """Files and their labels (``UNLABELED`` = -1 where there are none).

    >>> FileList.from_folder("train")                        # labels from sub-folders
    >>> FileList.from_paths(["a.jpg", "b.jpg"], labels=[0, 3])
    >>> FileList.from_glob("shards/*.npy")
    >>> FileList.from_dataset(torchvision.datasets.ImageFolder("train"))
    """

    paths: list[str]
    labels: np.ndarray  # int64, one per path
    classes: list[str] = dataclasses.field(default_factory=list)

    def __post_init__(self) -> None:
        self.labels = np.asarray(self.labels, dtype=np.int64).reshape(-1)
        if len(self.labels) != len(self.paths):
            raise ValueError(f"labels: got {len(self.labels)} labels for {len(self.paths)} paths")

    @classmethod
    def from_folder(cls, root: str | os.PathLike[str], extensions: Sequence[str] | None = None) -> "FileList":
        """ImageFolder layout, as torchvision reads it: class indices from the
        sorted sub-folder names, files walked in sorted order (symlinks
        followed), ``extensions`` matched case-insensitively (None: every file
        but hidden ones). A folder with no sub-folders gives unlabeled files."""
        root = os.fspath(root)
        if not os.path.isdir(root):
            raise FileNotFoundError(f"source folder '{root}' does not exist or is not a folder")
        with os.scandir(root) as it:
            entries = sorted(it, key=lambda e: e.name)
        classes = [e.name for e in entries if e.is_dir()]
        if not classes:
            files = [e.path for e in entries if e.is_file() and _wanted(e.name, extensions)]
            return cls(files, np.full(len(files), UNLABELED, np.int64))
        paths: list[str] = []
        labels: list[int] = []
        empty = []
        for index, name in enumerate(classes):
            before = len(paths)
            for dirpath, _, fnames in sorted(os.walk(os.path.join(root, name), followlinks=True)):
                paths.extend(os.path.join(dirpath, f) for f in sorted(fnames) if _wanted(f, extensions))
            labels.extend([index] * (len(paths) - before))
            if len(paths) == before:
                empty.append(name)
        if empty:
            # torchvision's ImageFolder refuses empty classes too: an index with no sample is a layout mistake.
            raise _no_samples(f"'{root}'", extensions, f" in class folder(s) {_names(empty)}")
        return cls(paths, np.asarray(labels, np.int64), classes)

    @classmethod
    def from_glob(cls, pattern: str, extensions: Sequence[str] | None = None) -> "FileList":
        """The regular files a glob matches (``**`` recurses), sorted; unlabeled."""
        found = sorted(p for p in _glob.glob(pattern, recursive=True) if os.path.isfile(p))
        files = [p for p in found if _wanted(os.path.basename(p), extensions)]
        return cls(files, np.full(len(files), UNLABELED, np.int64))

    @classmethod
    def from_url(cls, url: str, extensions: Sequence[str] | None = None) -> "FileList":
        """An s3:// prefix (``s3://bucket/train/``: ImageFolder by the first path
        component under it, unlabeled when there are no sub-prefixes), an s3://
        glob (sorted, unlabeled) or one object. http(s) has no listing: one URL.

        Raises:
            FileNotFoundError: no object under the prefix, no such bucket.
            PermissionError: listing refused. ValueError: a glob of http(s)
            URLs; a class prefix holding no object with `extensions`.
        """
        if scheme_of(url) != "s3":
            if _glob.has_magic(url.split("?")[0]):
                raise ValueError(f"'{url}': http(s) servers have no listing, so a glob cannot match; "
                                 "pass a list of URLs")
            return cls.from_paths([url])
        bucket, key = split_s3(url)
        if _glob.has_magic(key):
            fixed = key[: min(key.index(c) for c in "*?[" if c in key)]
            keys = [k for k, _ in s3.list_objects(bucket, fixed) if fnmatch.fnmatchcase(k, key)]
            files = [f"s3://{bucket}/{k}" for k in keys if _wanted(k.rsplit("/", 1)[-1], extensions)]
            return cls(files, np.full(len(files), UNLABELED, np.int64))
        prefix = key if key.endswith("/") or not key else key + "/"
        listed = [(k, n) for k, n in s3.list_objects(bucket, key) if not k.endswith("/")]
        if key and not key.endswith("/") and any(k == key for k, _ in listed):
            return cls.from_paths([url])  # one object
        rels = [k[len(prefix):] for k, _ in listed if k.startswith(prefix)]
        if not rels:
            raise FileNotFoundError(f"source 's3://{bucket}/{prefix}' holds no object")
        under = {r.split("/", 1)[0] for r in rels if "/" in r}
        base = f"s3://{bucket}/{prefix}"
        if not under:
            files = [base + r for r in rels if _wanted(r, extensions)]
            return cls(files, np.full(len(files), UNLABELED, np.int64))
        classes = sorted(under)
        index = {c: i for i, c in enumerate(classes)}
        # As torchvision's ImageFolder: objects right under the prefix are ignored; keys come sorted from S3.
        picked = sorted((index[r.split("/", 1)[0]], base + r) for r in rels
                        if "/" in r and _wanted(r.rsplit("/", 1)[-1], extensions))
        empty = sorted(set(classes) - {classes[i] for i, _ in picked})
        if empty:
            raise _no_samples(f"'{base}'", extensions, f" under class prefix(es) {_names(empty)}", what="object")
        return cls([p for _, p in picked], np.asarray([i for i, _ in picked], np.int64), classes)

    @classmethod
    def from_paths(cls, paths: Iterable[Any], labels: Iterable[int] | None = None) -> "FileList":
        """Paths in the given order; ``labels`` one int per path, or None.
        A list of ``(path, label)`` pairs works too."""
        items = list(paths)
        if labels is None and items and all(isinstance(p, (tuple, list)) and len(p) == 2 for p in items):
            items, labels = [p for p, _ in items], [int(y) for _, y in items]
        out = [p if is_url(p) else os.fspath(p) for p in items]
        lab = np.full(len(out), UNLABELED, np.int64) if labels is None else np.asarray(list(labels), np.int64)
        return cls(out, lab)

    @classmethod
    def from_dataset(cls, dataset: Any) -> "FileList":
        """The files of a torchvision ``ImageFolder`` or ``DatasetFolder`` (any
        object with ``samples``, a list of ``(path, class_index)``, and
        ``class_to_idx``; torchvision is not imported): its paths and labels in
        its order, ``classes`` ordered by their index in ``class_to_idx``. The
        dataset has already chosen its files (extensions, ``is_valid_file``).

        gdsio reads and decodes the files itself and runs gdsio.Loader's own
        ``transform=``, so a dataset it would not use as given is refused, never
        half-used: one with ``transform``, ``target_transform`` or
        ``transforms`` set, or with a ``loader`` other than torchvision's
        default (PIL, RGB).

        Raises:
            ValueError: one of those is set; ``class_to_idx`` does not map its
                classes to 0..n-1; a sample's label is not one of them.
            TypeError: ``samples`` does not hold ``(path, class_index)`` pairs.

        >>> ds = torchvision.datasets.ImageFolder("train")   # no transform
        >>> loader = gdsio.Loader(ds, 256, transform=gdsio.data.RandomResizedCrop(224))
        """
        name = type(dataset).__name__
        for attr, instead in _DATASET_TRANSFORMS.items():
            if getattr(dataset, attr, None) is not None:
                raise ValueError(f"source: the {name}'s {attr} is set, and gdsio.Loader would not run it (it reads "
                                 f"and decodes the files itself); build the {name} without it and {instead}")
        load = getattr(dataset, "loader", None)
        if load is not None and (getattr(load, "__module__", None), getattr(load, "__name__", None)) not in _TORCHVISION_LOADERS:
            shown = f"{getattr(load, '__module__', '?')}.{getattr(load, '__qualname__', type(load).__name__)}"
            raise ValueError(f"source: the {name}'s loader={shown} is not torchvision's default_loader, and gdsio.Loader "
                             "would not run it (it reads and decodes the files itself: images, .npy, raw records by "
                             "kind=); to load the files gdsio's way anyway, pass gdsio.Loader(ds.samples, ...)")
        c2i = dict(dataset.class_to_idx)
        if any(not isinstance(i, (int, np.integer)) or isinstance(i, bool) for i in c2i.values()):
            raise TypeError(f"source: the {name}'s class_to_idx must map class names to int indices; got {c2i!r}")
        indices = sorted(int(i) for i in c2i.values())
        if indices != list(range(len(c2i))):
            raise ValueError(f"source: the {name}'s class_to_idx must map its {len(c2i)} classes to "
                             f"0..{len(c2i) - 1} (a label indexes classes); got indices {indices[:10]}")
        classes = sorted(c2i, key=lambda c: c2i[c])
        pairs = list(dataset.samples)
        bad = next((s for s in pairs if not (isinstance(s, (tuple, list)) and len(s) == 2)), None)
        if bad is not None:
            raise TypeError(f"source: the {name}'s samples must hold (path, class_index) pairs; got {bad!r}")
        files = cls.from_paths([p for p, _ in pairs], [y for _, y in pairs])
        outside = np.flatnonzero((files.labels < 0) | (files.labels >= len(classes)))
        if outside.size:
            k = int(outside[0])
            raise ValueError(f"source: label {int(files.labels[k])} of the {name}'s sample {k} ('{files.paths[k]}') "
                             f"is not in class_to_idx (0..{len(classes) - 1})")
        files.classes = classes
        return files


def _wanted(name: str, extensions: Sequence[str] | None) -> bool:
    if extensions is None:
        return not name.startswith(".")
    return name.lower().endswith(tuple(e.lower() for e in extensions))


def _ext_text(extensions: Sequence[str] | None) -> str:
    return "any" if extensions is None else "/".join(extensions)


def _names(names: list[str]) -> str:
    return ", ".join(names[:5]) + (f" (and {len(names) - 5} more)" if len(names) > 5 else "")


def _no_samples(where: str, extensions: Sequence[str] | None, detail: str = "", what: str = "file") -> ValueError:
    """The one error of a source that exists but holds no sample (see the
    module docstring): a caller mistake, so ValueError, naming the source and
    the extensions looked for."""
    return ValueError(f"source {where} holds no {what} with extension {_ext_text(extensions)}{detail}")


@dataclasses.dataclass
class SampleTable:
    """Samples of one kind. For ``raw``, file ``f`` holds records
    ``starts[f]`` to ``starts[f+1]-1``; for the other kinds a file is a
    sample, and for tar shards (``ranges`` set) entry ``i`` of the files is
    sample ``i``'s shard, read at its byte range (an image member's, or an
    npy member's for kind ``npy``)."""

    kind: str
    files: FileList
    starts: np.ndarray | None = None  # raw only: int64, len(files) + 1
    record_shape: tuple[int, ...] = ()
    record_dtype: Any = None
    record_bytes: int = 0
    # Tar shards: sample i is bytes ranges[i, 0] to ranges[i, 0] + ranges[i, 1] of
    # files.paths[i] (its shard), the member members[i] (an image, or an array for kind "npy").
    ranges: np.ndarray | None = None
    members: list[str] | None = None
    shards: shards.ShardSet | None = None  # tar shards: the shards, in order (their samples are contiguous)

    def __len__(self) -> int:
        return int(self.starts[-1]) if self.starts is not None else len(self.files.paths)

    @functools.cached_property
    def remote(self) -> bool:
        """Whether any sample is read from an ``s3://`` or ``http(s)://`` URL (its shard's or its file's)."""
        paths = self.shards.paths if self.shards is not None else self.files.paths
        return any("://" in p and is_url(p) for p in paths)  # "in" first: ImageNet's 1.28 M local paths in ~0.1 s

    @property
    def classes(self) -> list[str]:
        return self.files.classes

    def file_of(self, indices: np.ndarray) -> np.ndarray:
        """The file index of each sample index."""
        if self.starts is None:
            return np.asarray(indices, np.int64)
        return np.searchsorted(self.starts, indices, side="right") - 1

    def offset_of(self, indices: np.ndarray) -> np.ndarray:
        """Raw records and shards: the byte offset of each sample in its file."""
        if self.ranges is not None:
            return self.ranges[np.asarray(indices, np.int64), 0]
        assert self.starts is not None
        idx = np.asarray(indices, np.int64)
        return (idx - self.starts[self.file_of(idx)]) * self.record_bytes

    def labels_of(self, indices: np.ndarray) -> np.ndarray:
        return self.files.labels[self.file_of(indices)]

    def describe(self, index: int) -> str:
        """'path', 'path, record k' or 'shard, member name' for messages."""
        f = int(self.file_of(np.asarray([index]))[0])
        path = self.files.paths[f]
        if self.members is not None:
            return f"{path}, member {self.members[index]}"
        if self.starts is None:
            return path
        return f"{path}, record {index - int(self.starts[f])}"


def file_list_of(source: Any, extensions: Sequence[str] | None) -> FileList:
    """The files of any source the Loader takes (package-internal: also gdsio.data.shard_write)."""
    if isinstance(source, FileList):
        return source
    if isinstance(source, str) and is_url(source):
        return FileList.from_url(source, extensions)
    if isinstance(source, (str, os.PathLike)):
        text = os.fspath(source)
        if os.path.isdir(text):
            return FileList.from_folder(text, extensions)
        if os.path.isfile(text):
            return FileList.from_paths([text])
        if _glob.has_magic(text):
            return FileList.from_glob(text, extensions)
        raise FileNotFoundError(f"source '{text}' is neither a file, a folder nor a glob pattern that matches")
    if isinstance(source, (list, tuple)):
        return FileList.from_paths(source)
    if hasattr(source, "samples") and hasattr(source, "class_to_idx"):
        return FileList.from_dataset(source)
    raise TypeError(
        f"source must be a folder, a file, a glob pattern, a list of paths or of (path, label) pairs, "
        f"a gdsio.data.FileList or a dataset with samples and class_to_idx (torchvision's ImageFolder); "
        f"got {type(source).__name__}"
    )


def _size_of(path: str) -> int:
    if is_url(path):
        with File(path) as f:
            return f.size()
    return os.path.getsize(path)


def _infer_kind(files: FileList, where: str) -> str:
    exts = {os.path.splitext(p.split("?")[0] if is_url(p) else p)[1].lower() for p in files.paths}
    if exts <= set(IMAGE_EXTENSIONS):
        return "image"
    if exts <= set(NPY_EXTENSIONS):
        return "npy"
    unknown = exts - set(IMAGE_EXTENSIONS) - set(NPY_EXTENSIONS)
    if unknown:  # from a list or a dataset, which are taken as given (folders and globs filter by extension)
        raise ValueError(
            f"kind='auto' cannot tell the kind of the {', '.join(sorted(e or '(no extension)' for e in unknown))} "
            f"files in {where}; pass kind='image', 'npy' or 'raw' (with record_shape)"
        )
    raise ValueError(
        f"kind='auto' found both images and .npy files in {where} ({', '.join(sorted(exts))}); "
        "pass kind='image' or kind='npy' to take one of them"
    )


def scan(
    source: Any,
    *,
    kind: str = "auto",
    record_shape: Sequence[int] | None = None,
    record_dtype: Any = None,
    extensions: Sequence[str] | None = None,
    cache: Any = None,
) -> SampleTable:
    """Lists the samples of `source` (see the module docstring; tar shards:
    gdsio.data.shards, whose remote indexes a ``Cache(where="disk")`` given as
    `cache` keeps). ``extensions``
    defaults by kind: image files for ``image``, ``.npy`` for ``npy``, both for
    ``auto`` (which then infers the kind from what it found; other files are
    ignored), every non-hidden file for ``raw``."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}; got {kind!r}")
    if kind == "raw" and record_shape is None:
        raise ValueError("kind='raw' needs record_shape, e.g. record_shape=(3, 32, 32)")
    if kind != "raw" and record_shape is not None:
        raise ValueError(f"record_shape applies to kind='raw' only (kind is {kind!r})")
    wids = shard_index_formats.is_wids_source(source)  # a wids dataset description: its shards
    if kind != "raw" and extensions is None and (wids or shards.is_shard_source(source)):
        listed = shard_index_formats.wids_shards(source) if wids else []
        indexes = remote_shards.shard_indexes([s.url for s in listed] if wids else shards.expand_shards(source), cache)
        shard_index_formats.check_wids_counts(source, listed, indexes)  # each holds the nsamples it lists
        kind = shards.sample_kind(indexes, kind)
        paths, offsets, sizes, labels, members = shards.columns_of(indexes, kind)
        return SampleTable(kind, FileList(paths, labels), ranges=np.asarray([offsets, sizes], np.int64).T.copy(),
                           members=members, shards=shards.ShardSet.of(indexes))
    if extensions is None:
        # auto: image and .npy files (other files, a README, are ignored); raw: every non-hidden file.
        extensions = {"image": IMAGE_EXTENSIONS, "npy": NPY_EXTENSIONS,
                      "auto": IMAGE_EXTENSIONS + NPY_EXTENSIONS}.get(kind)
    files = file_list_of(source, extensions)
    if isinstance(source, (str, os.PathLike)):
        where = f"'{os.fspath(source)}'"
    elif isinstance(source, (list, tuple, FileList)):
        where = "the given paths"
    else:  # a dataset
        root = getattr(source, "root", None)
        where = f"the {type(source).__name__}" + (f" of '{os.fspath(root)}'" if root is not None else "")
    if not files.paths:
        if not isinstance(source, (str, os.PathLike)):
            raise ValueError(f"source: no sample in {where}")  # lists and datasets are taken as given
        hint = " (for files of fixed-size records pass kind='raw' and record_shape)" if kind == "auto" else ""
        raise _no_samples(where, extensions, hint)
    if kind == "auto":
        kind = _infer_kind(files, where)
    if kind != "raw":
        return SampleTable(kind, files)

    shape = tuple(int(d) for d in record_shape)  # type: ignore[union-attr]
    if not shape or any(d <= 0 for d in shape):
        raise ValueError(f"record_shape must hold positive sizes; got {tuple(record_shape)}")  # type: ignore[arg-type]
    dtype = torch.uint8 if record_dtype is None else record_dtype
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"record_dtype must be a torch.dtype, got {type(dtype).__name__}")
    rb = math.prod(shape) * dtype.itemsize
    counts = np.empty(len(files.paths), np.int64)
    for i, p in enumerate(files.paths):
        size = _size_of(p)
        if size == 0 or size % rb:
            raise ValueError(
                f"'{p}' holds {size} bytes, not a whole number of {rb}-byte records "
                f"(record_shape {shape}, {str(dtype).replace('torch.', '')})"
            )
        counts[i] = size // rb
    starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    return SampleTable("raw", files, starts, shape, dtype, rb)
