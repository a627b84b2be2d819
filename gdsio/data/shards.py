"""Tar shards in the WebDataset layout, and their index (remote shards:
gdsio.data.remote_shards).

A shard is a POSIX tar (ustar, GNU or pax headers, as Python's ``tarfile``
reads them). A sample is the run of members sharing a key: the member path
up to the first dot of its base name (``train/n01440764_10026.jpg`` has key
``train/n01440764_10026`` and field ``jpg``; ``a/b.seg.png`` has key ``a/b``
and field ``seg.png``, a png: a member's type is its last extension, case
aside). A sample's members are contiguous, as webdataset
requires: a key met again after another key, or the same member twice, is a
duplicate and an error. Per sample gdsio keeps:

- the image: the first member whose field ends in an image extension
  (``IMAGE_EXTENSIONS``: jpg, jpeg, png, webp, ppm, pgm, pbm, bmp, tif,
  tiff, ...), as the shard path, the byte offset of its data in the shard
  and its size: one ranged read gives its encoded bytes;
- the array: the first member whose field ends in ``npy`` (``a.npy``,
  ``a.feat.npy``), the same way; its bytes are a .npy file's, loaded as
  gdsio.load_npy loads one (gdsio.tensors.npy_from_bytes);
- the label, from the first of: a ``cls`` member (an integer in text), a
  ``json`` member holding an object with an integer ``"label"`` or ``"cls"``
  key (in that order), a ``txt`` member that holds an integer (a ``txt``
  that does not, a caption, is no label). Shards whose samples carry no
  label at all are unlabeled (``UNLABELED``); a dataset where some samples
  have a label and others not is an error naming the sample.

Directories in a shard are skipped; any other non-regular member (a link, a
device) is an error, and so is a sample with neither an image nor an npy
member. A dataset's samples are images or arrays (``sample_kind``): kind
"auto" takes the images when every sample has one, else the arrays when no
sample has an image; a dataset mixing samples of an image and samples of
only an array is refused unless kind "npy" asks for the arrays (every sample
then needs one).

The index. Finding the members needs a sequential scan of the tar headers
(never the image bodies; the small label members are read), so the result
is written beside the shard as ``<shard>.idx.json`` (written to a temporary
file in the same folder, then renamed: a reader never sees half of one) and
read by the next scan while it still describes the shard. Its format, a
JSON object::

    {"format": "gdsio-wds-index", "version": 1,
     "shard_size": 1048576, "shard_mtime_ns": 1733230000000000000,
     "members": [[name, data_offset, size], ...],        # every regular member, in tar order
     "samples": [[key, image_member, label], ...]}       # image_member indexes "members"; label -1: none

A sample's npy member is not stored: it is the first member of its key
whose type is ``npy`` in ``members``. An index with a sample of no image
(an array only; its ``image_member`` is -1) is written as version 2, which
gdsio before npy members refuses and rebuilds (its scan then refuses the
shard) rather than taking -1 for the last member; an index of image samples
stays version 1, and both are read.

An index whose ``shard_size`` or ``shard_mtime_ns`` differ from the shard's
``os.stat`` (the shard was rewritten) is stale and rebuilt; one that does not
parse is rebuilt too. Where the folder is read-only the index is kept in this
process's memory (and a log line says so). The index of a remote shard has
the same format plus ``"shard_etag"``, the ETag of the object it describes
(``shard_mtime_ns`` is 0 there); see gdsio.data.remote_shards. Where a
local shard has no current index, one that another tool wrote (DALI's
``wds2idx`` ``.idx`` beside the shard) is read and checked in place of the
scan, and kept as above; see gdsio.data.shard_index_formats.

Sources: a path, a list of paths, a glob (``shards/*.tar``) and brace ranges
(``shard-{000000..000009}.tar``: zero-padded to the width of the first
bound; ``{a,b}`` lists too), expanded here; the same for ``s3://`` and
``http(s)://`` URLs, an s3:// glob (``s3://bucket/shards/*.tar``, ``*``
matching across ``/`` as in S3 keys) listed by one ListObjectsV2 walk of the
prefix before its first wildcard.

>>> paths = expand_shards("shards/shard-{000000..000003}.tar")
>>> index = shard_index(paths[0])
>>> index.samples[0]       # ShardSample(key, offset, size, label)
"""

from __future__ import annotations

import dataclasses
import fnmatch
import glob as _glob
import json
import logging
import os
import re
import tarfile
import tempfile
import threading
from typing import IO, Any, Callable, Sequence

import numpy as np
import torch

from ..image import formats
from ..io import s3
from ..io.many import read_ranges
from ..io.urls import is_url, scheme_of, split_s3

__all__ = ["INDEX_SUFFIX", "SampleRules", "ShardIndex", "ShardSample", "ShardSet", "columns_of", "expand_shards", "is_shard_source",
           "key_and_field", "label_of", "read_members", "sample_kind", "scan_shard", "scan_tar", "shard_index", "shard_samples"]

_MEMBERS_STEP = 4 << 20  # read_members' buffer sizes are multiples of this (batches differ by a few bytes)

log = logging.getLogger("gdsio.data")

INDEX_SUFFIX = ".idx.json"
_FORMAT = "gdsio-wds-index"
_VERSIONS = (1, 2)  # 2: some sample has no image member (image_member -1)
_LABEL_BYTES = 1 << 16  # a label member larger than this is not a label: refused, not read
_IMAGE_FIELDS = tuple(e.lstrip(".").lower() for e in formats.file_extensions())
_BRACE = re.compile(r"\{([^{}]*)\}")

# Indexes of shards whose folder could not be written: (path, size, mtime_ns) -> ShardIndex.
_memory: dict[tuple[str, int, int], "ShardIndex"] = {}
_memory_lock = threading.Lock()


@dataclasses.dataclass(frozen=True)
class ShardSample:
    """One sample of a shard: its key, its image's byte range, its label (-1:
    none) and its npy member (name, data offset, size), if any."""

    key: str
    member: str  # the image member's name; '' when the sample has none (offset and size 0)
    offset: int
    size: int
    label: int
    npy: tuple[str, int, int] | None = None


@dataclasses.dataclass
class ShardIndex:
    """The members and samples of one shard (see the module docstring)."""

    path: str
    size: int
    mtime_ns: int
    members: list[tuple[str, int, int]]
    samples: list[ShardSample]
    etag: str = ""  # a remote shard's ETag (as the server sent it), '' for a local one

    def to_json(self) -> dict[str, Any]:
        where = {name: k for k, (name, _, _) in enumerate(self.members)}
        imageless = any(not s.member for s in self.samples)
        out = {"format": _FORMAT, "version": _VERSIONS[imageless], "shard_size": self.size,
               "shard_mtime_ns": self.mtime_ns, "members": [list(m) for m in self.members],
               "samples": [[s.key, where[s.member] if s.member else -1, s.label] for s in self.samples]}
        if self.etag:
            out["shard_etag"] = self.etag
        return out

    @classmethod
    def from_json(cls, path: str, obj: Any) -> "ShardIndex":
        """Raises ValueError (or KeyError, TypeError, IndexError) on an index not in this format."""
        if not isinstance(obj, dict) or obj.get("format") != _FORMAT or obj.get("version") not in _VERSIONS:
            raise ValueError("not a gdsio shard index of this version")
        members = [(str(n), int(o), int(s)) for n, o, s in obj["members"]]
        arrays: dict[str, tuple[str, int, int]] = {}
        for m in members:
            key, field = key_and_field(m[0])
            if _type_of(field) == "npy":
                arrays.setdefault(key, m)
        samples = []
        for key, m, label in obj["samples"]:
            key, m = str(key), int(m)
            if m == -1 and obj["version"] == 2 and key in arrays:
                samples.append(ShardSample(key, "", 0, 0, int(label), arrays[key]))
                continue
            if m < 0:
                raise IndexError(f"sample '{key}': image member {m}")
            name, off, size = members[m]
            samples.append(ShardSample(key, name, off, size, int(label), arrays.get(key)))
        return cls(path, int(obj["shard_size"]), int(obj["shard_mtime_ns"]), members, samples,
                   str(obj.get("shard_etag", "")))


@dataclasses.dataclass(frozen=True)
class ShardSet:
    """The shards of a source, in order: shard ``j`` (``paths[j]``; ``etags[j]``
    the ETag its index was made from, '' for a local shard) holds samples
    ``starts[j]`` to ``starts[j + 1] - 1``."""

    paths: list[str]
    etags: list[str]
    starts: np.ndarray  # int64, one per shard and one for the end

    @classmethod
    def of(cls, indexes: Sequence[ShardIndex]) -> "ShardSet":
        counts = [len(i.samples) for i in indexes]
        return cls([i.path for i in indexes], [i.etag for i in indexes],
                   np.concatenate([[0], np.cumsum(counts, dtype=np.int64)]).astype(np.int64))

    def shard_of(self, index: int) -> int:
        return int(np.searchsorted(self.starts, index, side="right")) - 1


def key_and_field(name: str) -> tuple[str, str]:
    """A member name -> (key, field), split at the first dot of the base name."""
    slash = name.rfind("/")
    dot = name.find(".", slash + 1)
    if dot < 0:
        return name, ""
    return name[:dot], name[dot + 1:]


def _expand_braces(text: str) -> list[str]:
    m = _BRACE.search(text)
    if m is None:
        return [text]
    body = m.group(1)
    rng = re.fullmatch(r"(\d+)\.\.(\d+)", body)
    if rng:
        lo, hi = int(rng.group(1)), int(rng.group(2))
        if hi < lo:
            raise ValueError(f"source '{text}': the brace range {{{body}}} runs backwards")
        width = len(rng.group(1))
        parts = [str(k).zfill(width) for k in range(lo, hi + 1)]
    elif "," in body:
        parts = body.split(",")
    else:
        raise ValueError(f"source '{text}': cannot expand {{{body}}} (use {{000000..000009}} or {{a,b}})")
    return [out for p in parts for out in _expand_braces(text[: m.start()] + p + text[m.end():])]


def is_shard_source(source: Any) -> bool:
    """Whether `source` names tar shards: a path, URL, glob or brace pattern
    ending in ``.tar`` (an http(s) URL's query string aside), or a non-empty
    list of such paths."""
    if isinstance(source, (str, os.PathLike)) and not isinstance(source, bytes):
        text = os.fspath(source)
        if is_url(text):  # an http(s) URL's query string aside (an s3 key may hold '?')
            return (text if scheme_of(text) == "s3" else text.split("?", 1)[0]).lower().endswith(".tar")
        return "://" not in text and text.lower().endswith(".tar")
    if isinstance(source, (list, tuple)) and source:
        return all(isinstance(p, (str, os.PathLike)) and is_shard_source(p) for p in source)
    return False


def expand_shards(source: Any) -> list[str]:
    """The shard paths of `source` (see the module docstring), in order:
    brace ranges expanded in order, globs sorted, lists as given.

    URLs are not checked here (their index is read next, which raises for a
    missing object); an s3:// glob is listed.

    Raises:
        FileNotFoundError: a named shard does not exist; a glob matches nothing.
        ValueError: a brace pattern that cannot be expanded; a glob of http(s) URLs.
    """
    items = [os.fspath(p) if not is_url(p) else p for p in source] if isinstance(source, (list, tuple)) \
        else [os.fspath(source) if not is_url(source) else source]
    out: list[str] = []
    for item in items:
        for path in _expand_braces(item):
            if is_url(path):
                out.extend(_expand_url(path))
            elif _glob.has_magic(path):
                found = sorted(p for p in _glob.glob(path, recursive=True) if os.path.isfile(p))
                if not found:
                    raise FileNotFoundError(f"source '{path}': no shard matches")
                out.extend(found)
            elif not os.path.isfile(path):
                raise FileNotFoundError(f"shard '{path}' does not exist or is not a file")
            else:
                out.append(path)
    return out


def _expand_url(url: str) -> list[str]:
    if scheme_of(url) != "s3":
        if _glob.has_magic(url.split("?", 1)[0]):
            raise ValueError(f"source '{url}': http(s) servers have no listing, so a glob cannot match; "
                             "use a brace range (shard-{000000..000099}.tar) or a list of URLs")
        return [url]
    bucket, key = split_s3(url)
    if not _glob.has_magic(key):
        return [url]
    fixed = key[: min(key.index(c) for c in "*?[" if c in key)]
    found = [f"s3://{bucket}/{k}" for k, _ in s3.list_objects(bucket, fixed) if fnmatch.fnmatchcase(k, key)]
    if not found:
        raise FileNotFoundError(f"source '{url}': no shard matches")
    return found


def label_of(field: str, data: bytes, where: str) -> int | None:
    """The label a member holds (see the module docstring), or None: it holds
    none. Raises ValueError naming `where` for a ``cls`` or ``json`` label that
    is not an integer."""
    text = data.decode("utf-8", errors="replace").strip()
    if field == "cls":
        try:
            return int(text)
        except ValueError:
            raise ValueError(f"{where}: a cls member must hold an integer label; got {text[:40]!r}") from None
    if field == "txt":
        return int(text) if re.fullmatch(r"[+-]?\d+", text) else None
    if field == "json":
        try:
            obj = json.loads(text)
        except ValueError as e:
            raise ValueError(f"{where}: not valid JSON ({e})") from None
        for name in ("label", "cls"):
            if isinstance(obj, dict) and name in obj:
                value = obj[name]
                if isinstance(value, bool) or not isinstance(value, int):
                    raise ValueError(f"{where}: its JSON {name!r} must be an integer label; got {value!r}")
                return value
    return None


def _type_of(field: str) -> str:
    """What a member is: its field's last extension, lower case ("seg.png": "png")."""
    return field.rsplit(".", 1)[-1].lower()


class SampleRules:
    """The module docstring's rules, in one place: a shard's members, given in
    tar order, into its samples (used by the scan here and by
    gdsio.data.shard_index_formats for a foreign index). `path` names the
    shard in errors."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.samples: list[ShardSample] = []
        self._seen: set[str] = set()
        self._key: str | None = None
        self._names: set[str] = set()
        self._image: tuple[str, int, int] | None = None
        self._npy: tuple[str, int, int] | None = None
        self._labels: dict[str, int | None] = {}

    def member(self, name: str, offset: int, size: int, read: Callable[[], bytes]) -> None:
        """One regular member; `read()` gives its bytes (called for a small label member only).
        Raises ValueError for a duplicate key or member, or a bad label, naming the shard and the member."""
        key, field = key_and_field(name)
        if key != self._key:
            self._finish()
            if key in self._seen:
                raise ValueError(f"shard '{self.path}': duplicate key '{key}' at member '{name}' (a sample's "
                                 "members must be contiguous and its key unique)")
            self._seen.add(key)
            self._key, self._names, self._image, self._npy, self._labels = key, set(), None, None, {}
        if name in self._names:
            raise ValueError(f"shard '{self.path}': duplicate member '{name}'")
        self._names.add(name)
        field = _type_of(field)
        if field in _IMAGE_FIELDS:
            self._image = self._image or (name, offset, size)
        elif field == "npy":
            self._npy = self._npy or (name, offset, size)
        elif field in ("cls", "txt", "json"):
            where = f"shard '{self.path}', member '{name}'"
            if size > _LABEL_BYTES:
                if field != "txt":  # a long txt is a caption
                    raise ValueError(f"{where}: a {field} label of {size} bytes (at most {_LABEL_BYTES})")
                return
            self._labels[field] = label_of(field, read(), where)

    def _finish(self) -> None:
        if self._key is None:
            return
        if self._image is None and self._npy is None:
            raise ValueError(f"shard '{self.path}': sample '{self._key}' has no image member and no npy member "
                             f"(members: {', '.join(sorted(self._names))}; image fields: {', '.join(_IMAGE_FIELDS)})")
        label = next((self._labels[f] for f in ("cls", "json", "txt") if self._labels.get(f) is not None), None)
        name, off, size = self._image if self._image is not None else ("", 0, 0)
        self.samples.append(ShardSample(self._key, name, off, size, -1 if label is None else label, self._npy))
        self._key = None

    def done(self) -> list[ShardSample]:
        """The samples, the last one finished."""
        self._finish()
        return self.samples


def scan_shard(path: str) -> ShardIndex:
    """The index of one local shard by a sequential scan of its headers.

    Raises:
        ValueError: a corrupt header, a truncated shard, duplicate keys, a
            non-regular member, a sample without an image; naming the shard and the member.
        OSError: the shard cannot be read.
    """
    st = os.stat(path)
    with open(path, "rb") as raw:
        return scan_tar(raw, path, st.st_size, st.st_mtime_ns)


def scan_tar(raw: IO[bytes], path: str, size: int, mtime_ns: int = 0, etag: str = "") -> ShardIndex:
    """The index of the shard `path` of `size` bytes, read from `raw` from its
    start: its headers and label members, every seek forward but one of a
    block back at the end (a streamed remote shard does with that). Raises as
    ``scan_shard``."""
    members: list[tuple[str, int, int]] = []
    rules = SampleRules(path)
    try:
        tf = tarfile.open(fileobj=raw, mode="r:")
    except tarfile.ReadError as e:
        raise ValueError(f"shard '{path}': not a tar file, or a corrupt first header ({e})") from None
    last = "(the first member)"
    end = 0
    while True:
        try:
            info = tf.next()
        except tarfile.ReadError as e:
            raise ValueError(f"shard '{path}': corrupt or truncated after member '{last}' ({e})") from None
        if info is None:
            break
        end = info.offset_data + ((info.size + 511) // 512) * 512 if info.isreg() else info.offset_data
        if info.isdir():
            last = info.name
            continue
        if not info.isreg():
            raise ValueError(f"shard '{path}': member '{info.name}' is not a regular file (tar type "
                             f"{info.type!r}); a WebDataset shard holds files")
        if info.offset_data + info.size > size:
            raise ValueError(f"shard '{path}': truncated: member '{info.name}' ends at byte "
                             f"{info.offset_data + info.size}, the shard holds {size}")
        last = info.name
        members.append((info.name, info.offset_data, info.size))

        def read(info: tarfile.TarInfo = info) -> bytes:
            raw.seek(info.offset_data)
            data = raw.read(info.size)
            if len(data) != info.size:
                raise ValueError(f"shard '{path}': truncated in member '{info.name}'")
            return data

        rules.member(info.name, info.offset_data, info.size, read)
    samples = rules.done()
    # tarfile ends its listing quietly at a header it cannot parse: what follows the
    # last member must be the end-of-archive zero blocks, or nothing.
    raw.seek(end)
    tail = raw.read(512)
    if tail.strip(b"\0"):
        raise ValueError(f"shard '{path}': corrupt tar header at byte {end} (after member '{last}')")
    if not samples:
        raise ValueError(f"shard '{path}' holds no sample")
    return ShardIndex(path, size, mtime_ns, members, samples, etag)


def _read_index(path: str, size: int, mtime_ns: int) -> ShardIndex | None:
    try:
        with open(path + INDEX_SUFFIX, encoding="utf-8") as f:
            index = ShardIndex.from_json(path, json.load(f))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError, IndexError) as e:
        log.info("gdsio: rebuilding the index of shard '%s' (%s%s: %s)", path, path, INDEX_SUFFIX, e)
        return None
    if (index.size, index.mtime_ns) != (size, mtime_ns):
        log.info("gdsio: the index of shard '%s' is stale (the shard changed): rebuilding it", path)
        return None
    return index


def _write_index(index: ShardIndex) -> bool:
    folder = os.path.dirname(os.path.abspath(index.path))
    try:
        fd, tmp = tempfile.mkstemp(prefix=".", suffix=".tmp", dir=folder)
    except OSError:
        return False
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(index.to_json(), f, separators=(",", ":"))
        os.replace(tmp, index.path + INDEX_SUFFIX)
        return True
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        return False


def shard_index(path: str, write: bool = True, foreign: Callable[[str], ShardIndex | None] | None = None) -> ShardIndex:
    """The index of the shard at `path`: read from beside it when present and
    current, else taken from `foreign` (another tool's index of the shard,
    such as gdsio.data.shard_index_formats.dali_index_beside; None: it has
    none that describes the shard) or built by a scan, and (with `write`)
    written beside it, or kept in memory where that fails. Raises as
    ``scan_shard``."""
    st = os.stat(path)
    index = _read_index(path, st.st_size, st.st_mtime_ns)
    if index is not None:
        return index
    key = (os.path.abspath(path), st.st_size, st.st_mtime_ns)
    with _memory_lock:
        index = _memory.get(key)
    if index is not None:
        return index
    index = foreign(path) if foreign is not None else None
    if index is None:
        index = scan_shard(path)
    if write and not _write_index(index):
        log.info("gdsio: cannot write the index of shard '%s' beside it (read-only folder?); "
                 "keeping it in memory for this process", path)
        with _memory_lock:
            _memory[key] = index
    return index


_Columns = tuple[list[str], list[int], list[int], list[int], list[str]]


def read_members(paths: Sequence[str], spans: np.ndarray, buffers: Any) -> tuple[Any, tuple[Any, ...]]:
    """Members of local shards read back to back in one call into C++ (gdsio.io.many.read_ranges;
    members adjacent in their shard and in the batch are one request) into a buffer taken from
    `buffers` (the Loader's BatchBuffers; its size rounded up to 4 MiB, so that batches reuse it).

    Args:
        paths: each member's shard, a local file. spans: (byte offset, size) of each member, an
            int64 array (n, 2). buffers: gives the buffer, to be released there after the views.

    Returns:
        (the buffer, the members' views of it in order).

    Raises:
        OSError: a read failed, the buffer released (not saying which member: read them alone to know).
    """
    sizes = spans[:, 1].tolist()
    total = sum(sizes)
    buf = buffers.take((max(1, -(-total // _MEMBERS_STEP)) * _MEMBERS_STEP,))
    try:
        read_ranges(buf, paths, spans[:, 0], spans[:, 1])
    except BaseException:
        buffers.release(buf)
        raise
    return buf, torch.split(buf[:total], sizes)


def shard_samples(paths: Sequence[str], kind: str = "image") -> _Columns:
    """The samples of the local shards, in order, as columns: (shard path,
    member offset, member size, label, member name) per sample, of the image
    members (`kind` "image") or the npy ones ("npy"). Raises as
    ``columns_of``, and as ``scan_shard`` for a malformed shard."""
    return columns_of([shard_index(p) for p in paths], kind)


def sample_kind(indexes: Sequence[ShardIndex], kind: str = "auto") -> str:
    """What the samples of the shards of `indexes` are: "image" or "npy" (see
    the module docstring). `kind` "image" or "npy" is taken as asked
    (``columns_of`` refuses a sample without such a member).

    Raises:
        ValueError: kind "auto" over samples of an image and samples of only
            an npy member, naming one of each.
    """
    if kind != "auto":
        return kind
    image = array = None  # (shard, key) of a sample with an image, of one with only an array
    for index in indexes:
        for s in index.samples:
            if s.member and image is None:
                image = (index.path, s.key)
            elif not s.member and array is None:
                array = (index.path, s.key)
        if image is not None and array is not None:
            raise ValueError(f"shard '{array[0]}': sample '{array[1]}' has an npy member and no image, while others "
                             f"have an image (e.g. '{image[1]}' in '{image[0]}'); pass kind='npy' to load every "
                             "sample's npy member (each sample then needs one), or keep images and arrays in "
                             "shards of their own")
    return "image" if array is None else "npy"


def columns_of(indexes: Sequence[ShardIndex], kind: str = "image") -> _Columns:
    """The samples of the shards of `indexes`, in order, as ``shard_samples`` gives them.

    Raises:
        ValueError: a sample without a member of `kind` ("image" or "npy"),
            naming its shard and key; a dataset where some samples have a
            label and others not, naming the first of the minority.
    """
    cols: tuple[list[Any], ...] = ([], [], [], [], [])
    labeled: tuple[str, str] | None = None
    unlabeled: tuple[str, str] | None = None
    for index in indexes:
        path = index.path
        for s in index.samples:
            if kind == "npy":
                if s.npy is None:
                    raise ValueError(f"shard '{path}': sample '{s.key}' has no npy member (kind='npy' loads each "
                                     f"sample's; this one has the image '{s.member}', which kind='image' loads)")
                member, offset, size = s.npy
            elif s.member:
                member, offset, size = s.member, s.offset, s.size
            else:
                raise ValueError(f"shard '{path}': sample '{s.key}' has no image member; its npy member "
                                 f"'{s.npy[0] if s.npy else ''}' loads with kind='npy'")
            for col, v in zip(cols, (path, offset, size, s.label, member)):
                col.append(v)
            if s.label < 0 and unlabeled is None:
                unlabeled = (path, member)
            elif s.label >= 0 and labeled is None:
                labeled = (path, member)
    if labeled is not None and unlabeled is not None:
        raise ValueError(f"shard '{unlabeled[0]}': sample of member '{unlabeled[1]}' has no label (no cls, json "
                         f"'label'/'cls' or integer txt member), while others have one (e.g. '{labeled[1]}' in "
                         f"'{labeled[0]}')")
    return cols  # type: ignore[return-value]
