"""Indexes of tar shards written by other tools, read in place of gdsio's
scan (gdsio's own index and the sample rules: gdsio.data.shards).

DALI's webdataset index, as NVIDIA DALI's ``tools/wds2idx.py`` writes it and
``fn.readers.webdataset(index_paths=...)`` reads it: text, a first line
``v1.2 <samples>`` (or ``v1.1``; the two versions DALI reads), then one line
per sample listing its members, each as whitespace-separated fields::

    v1.2 2
    jpg 512 10845 n01440764_10026.jpg cls 11776 1 n01440764_10026.cls
    jpg 12800 9017 n01440764_10027.jpg cls 22528 1 n01440764_10027.cls

that is ``<ext> <offset> <size> <name>`` per member (v1.1: ``<ext> <offset>
<size>``, no name), ``ext`` the member's name after the first dot of its base
name, as gdsio's field. ``offset`` is where the member's *data* starts, not
its tar header (DALI's reader seeks there and reads ``size`` bytes; wds2idx
takes it from tarfile's position after the header, or from GNU tar's block
numbers), so it is gdsio's ``data_offset`` as is, and a multiple of 512: the
member's header is the 512-byte block before it. (From GNU tar's numbers,
which count a member from its ustar header, past any pax or long-name header,
wds2idx puts a member that precedes a long-named one on that extension
header instead of its data: such an index fails the checks below.) wds2idx
names the index after the shard up to its first dot: ``shard-000000.tar`` ->
``shard-000000.idx``.

For a local shard without a current ``<shard>.idx.json``, the Loader looks
beside it for ``<stem>.idx`` (wds2idx's name), then ``<shard>.idx``, before it
scans (gdsio.data.remote_shards.shard_indexes; remote shards are scanned or
read from their own index: checking a DALI index and reading the labels
would take a ranged GET per member). A DALI index is used only once checked
against the shard: every member lies inside it, in order, at a multiple of
512 with room for its header between the previous member's data and its own,
and the 512-byte block before each member is a valid tar header (checksum) of
a regular file of the listed size and, where the header holds the whole name
(an ASCII name of at most 100 bytes, or a header right after the previous
member's data), of the listed name; the block after the last member is the
end of the archive. So a shard rewritten since is noticed, not read at wrong
offsets. The labels (``cls``, ``json`` and ``txt`` members of at most 64 KiB)
are read too, each with its header in one read; the images are not. Samples
and labels then follow gdsio's rules, as a scan makes them, and the result is
kept as the shard's ``<shard>.idx.json``. An index that fails a check is
logged and the shard scanned; ``dali_index`` (an index named by the caller)
raises instead. Members the index leaves out (wds2idx skips names whose base
name starts with a dot) are not seen. A v1.1 index, which names no member,
is read where each header holds its member's whole name.

webdataset's wids: its dataset description (``wids-shard-index-v1``, written
by ``widsindex create``) is JSON: ``{"wids_version": 1, "shardlist":
[{"url": ..., "nsamples": ..., ...}], "datasets": [...]}``, the shards and
their sample counts, no member offsets. A ``.json`` path or URL naming one is
a Loader source: its shards, in order, with URLs relative to the JSON's folder
(or to its ``"base"`` where given, as wids's docs say; wids's resolver itself
takes the folder there), a ``datasets`` entry's relative to its own ``base``
or its ``source_url``'s folder, else as they are (as wids takes them); each
indexed as any shard, and the samples gdsio finds in each must number its
``nsamples`` (wids counts the key runs of a shard's files, as gdsio does),
else ValueError naming the shard. Weights, md5sums and sizes are not used.
wids's per-shard cache (``<shard>.index``) is a Python pickle and is not read:
unpickling a file found beside the data can run code.

>>> index = dali_index("shards/shard-000000.tar", "idx/shard-000000.idx")
>>> shards = wids_shards("dataset.json")   # [WidsShard(url, nsamples), ...]
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from typing import Any, Sequence
from urllib.parse import urlparse, urlunparse

from ..io import File
from ..io.urls import is_url, scheme_of
from .shards import SampleRules, ShardIndex, ShardSample, key_and_field

__all__ = ["DALI_VERSIONS", "TAR_REGULAR", "DaliMember", "WidsShard", "check_wids_counts", "dali_index",
           "dali_index_beside", "dali_index_paths", "is_wids_source", "parse_dali_index", "tar_header", "wids_shards"]

log = logging.getLogger("gdsio.data")

DALI_VERSIONS = ("v1.1", "v1.2")  # what DALI's webdataset reader accepts (kSupportedIndexVersions)
_BLOCK = 512
_LABEL_BYTES = 1 << 16  # as gdsio.data.shards: a larger cls/json member is refused, a larger txt is a caption
TAR_REGULAR = (b"0", b"\0", b"7")  # tar type flags of a regular file (7: contiguous)


@dataclasses.dataclass(frozen=True)
class DaliMember:
    """A member as a DALI index lists it: its extension, the offset of its data
    in the shard, its size, and its name (None in a v1.1 index)."""

    ext: str
    offset: int
    size: int
    name: str | None


def _count(text: str) -> int | None:
    return int(text) if text.isascii() and text.isdigit() else None


def parse_dali_index(text: str, where: str) -> list[list[DaliMember]]:
    """The samples of a DALI index's `text`, each a list of its members in the
    index's order. Raises ValueError naming `where` (and the line) for text
    not in the format (see the module docstring)."""
    lines = text.split("\n")
    head = lines.pop(0).split()
    while lines and not lines[-1].strip():
        lines.pop()
    count = _count(head[1]) if len(head) == 2 and head[0] in DALI_VERSIONS else None
    if not count:
        raise ValueError(f"{where}: not a DALI webdataset index (its first line must be "
                         f"'{DALI_VERSIONS[-1]} <samples>'; got {' '.join(head)[:60]!r})")
    if len(lines) != count:
        raise ValueError(f"{where}: its first line says {count} samples; the index lists {len(lines)}")
    named = head[0] == "v1.2"
    width = 4 if named else 3
    out = []
    for no, line in enumerate(lines, 2):
        fields = line.split()
        if not fields or len(fields) % width:
            raise ValueError(f"{where} line {no}: a sample's members must each be "
                             f"{'<ext> <offset> <size> <name>' if named else '<ext> <offset> <size>'}; "
                             f"got {line[:80]!r}")
        sample = []
        for k in range(0, len(fields), width):
            ext, off, size = fields[k], _count(fields[k + 1]), _count(fields[k + 2])
            if off is None or size is None or off % _BLOCK:
                raise ValueError(f"{where} line {no}: member offset {fields[k + 1]!r} and size {fields[k + 2]!r} "
                                 f"must be integers, the offset a multiple of {_BLOCK}")
            name = fields[k + 3] if named else None
            if name is not None and key_and_field(name)[1] != ext:
                raise ValueError(f"{where} line {no}: member '{name}' listed with extension {ext!r}")
            sample.append(DaliMember(ext, off, size, name))
        out.append(sample)
    return out


def dali_index_paths(shard: str) -> list[str]:
    """Where a DALI index of the local `shard` is looked for: wds2idx's default
    name (the shard's path up to the first dot of its base name, past its
    first character, plus ``.idx``), then ``<shard>.idx``."""
    slash = shard.rfind("/") + 1
    dot = shard.find(".", slash + 1)
    stem = shard[:dot] if dot >= 0 else shard
    return list(dict.fromkeys([stem + ".idx", shard + ".idx"]))


def dali_index_beside(shard: str) -> ShardIndex | None:
    """The index of the local `shard` from a DALI index beside it (see
    ``dali_index_paths``), or None: there is none, or it does not describe the
    shard (a log line says why; the caller then scans the shard)."""
    for path in dali_index_paths(shard):
        if not os.path.isfile(path):
            continue
        try:
            return dali_index(shard, path)
        except (OSError, ValueError) as e:
            log.info("gdsio: not using the DALI index '%s' of shard '%s' (%s); scanning the shard", path, shard, e)
            return None
    return None


def dali_index(shard: str, index_path: str) -> ShardIndex:
    """The index of the local `shard` from the DALI index at `index_path`,
    checked against the shard and with the labels read (see the module
    docstring).

    Raises:
        ValueError: the index is not in DALI's format or does not describe
            the shard, or the shard is malformed as a scan would find it;
            naming the shard and the index.
        OSError: the shard or the index cannot be read.
    """
    with open(index_path, encoding="utf-8", errors="surrogateescape") as f:
        text = f.readline(64)  # the version line first: another kind of file is not read whole
        if text.startswith(DALI_VERSIONS):
            text += f.read()
    listed = parse_dali_index(text, f"DALI index '{index_path}'")
    where = f"shard '{shard}' (DALI index '{index_path}')"
    fd = os.open(shard, os.O_RDONLY)
    try:
        st = os.fstat(fd)
        members, labels = _check(fd, st.st_size, listed, where)
    finally:
        os.close(fd)
    return ShardIndex(shard, st.st_size, st.st_mtime_ns, [(m.name, m.offset, m.size) for s in members for m in s],
                      _samples(shard, where, members, labels))


def tar_header(block: bytes, where: str) -> tuple[str, int, bytes]:
    """A tar header block -> (name, size, type flag), its checksum checked as tarfile checks it."""
    if len(block) < _BLOCK:
        raise ValueError(f"{where}: the shard ends inside a member's header")
    total = sum(block) - sum(block[148:156]) + 8 * 32  # the checksum field counts as spaces
    try:
        stored = int(block[148:156].replace(b"\0", b" ").strip() or b"x", 8)
        if stored != total:  # some writers summed signed bytes
            high = sum(1 for b in block[:148] + block[156:] if b > 127)
            if stored != total - 256 * high:
                raise ValueError
        raw = block[124:136]
        size = int.from_bytes(raw[1:], "big") if raw[0] == 0x80 else int(raw.replace(b"\0", b" ").strip() or b"0", 8)
    except ValueError:
        raise ValueError(f"{where}: no tar header before the member's data (a bad checksum or size field)") from None
    name = block[:100].split(b"\0", 1)[0]
    prefix = block[345:500].split(b"\0", 1)[0]  # a ustar name's leading part, joined as tarfile joins it
    return (prefix + b"/" + name if prefix else name).decode("utf-8", "surrogateescape"), size, block[156:157]


def _check(fd: int, size: int, listed: list[list[DaliMember]],
           where: str) -> tuple[list[list[DaliMember]], dict[str, bytes]]:
    """The listed members, named (v1.1) and checked against the shard, and the
    bytes of its label members by name."""
    end = 0  # where the previous member's data (padded to a block) ends
    out: list[list[DaliMember]] = []
    labels: dict[str, bytes] = {}
    for sample in listed:
        got = []
        for m in sample:
            if m.offset < end + _BLOCK:
                raise ValueError(f"{where}: member at byte {m.offset} leaves no room for its header after the "
                                 f"previous member's data (which ends at byte {end})")
            if m.offset + m.size > size:
                raise ValueError(f"{where}: a member of {m.size} bytes at byte {m.offset} ends past the shard's "
                                 f"{size} bytes")
            field = m.ext.rsplit(".", 1)[-1].lower()
            body = m.size if field in ("cls", "txt", "json") and m.size <= _LABEL_BYTES else 0
            data = os.pread(fd, _BLOCK + body, m.offset - _BLOCK)
            name, hsize, kind = tar_header(data[:_BLOCK], f"{where}, member at byte {m.offset}")
            whole = m.offset == end + _BLOCK  # no pax or GNU header between: this one holds the whole name
            if m.name is None:
                if not whole or not name.endswith("." + m.ext) or key_and_field(name)[1] != m.ext:
                    raise ValueError(f"{where}: the v1.1 index names no member and the header at byte "
                                     f"{m.offset - _BLOCK} may not hold the whole name ({name!r})")
                m = dataclasses.replace(m, name=name)
            what = f"member '{m.name}' at byte {m.offset}"
            if kind not in TAR_REGULAR or hsize != m.size:
                raise ValueError(f"{where}: {what} is not what the shard holds there (a tar header of type "
                                 f"{kind!r}, {hsize} bytes; the index says a file of {m.size} bytes)")
            fits = m.name.isascii() and len(m.name) <= 100  # else a pax or GNU header before may hold it
            if (whole or fits) and name != m.name:
                raise ValueError(f"{where}: {what} is '{name}' in the shard")
            if body:
                if len(data) != _BLOCK + body:
                    raise ValueError(f"{where}: the shard ends inside {what}")
                labels[m.name] = data[_BLOCK:]
            end = m.offset + -(-m.size // _BLOCK) * _BLOCK
            got.append(m)
        out.append(got)
    tail = os.pread(fd, _BLOCK, end)
    if tail.strip(b"\0"):
        raise ValueError(f"{where}: the shard holds more after the last member the index lists (byte {end} is "
                         "not the end of the archive)")
    return out, labels


def _samples(shard: str, where: str, listed: list[list[DaliMember]], labels: dict[str, bytes]) -> list[ShardSample]:
    # The scan's rules (gdsio.data.shards.SampleRules) over the members the index lists, which must group
    # them by key as the rules do.
    rules = SampleRules(shard)
    for sample in listed:
        key = key_and_field(sample[0].name or "")[0]
        for m in sample:
            name = m.name or ""
            if key_and_field(name)[0] != key:
                raise ValueError(f"{where}: member '{name}' listed in the sample of key '{key}'")
            rules.member(name, m.offset, m.size, lambda name=name: labels[name])
    out = rules.done()
    if len(out) != len(listed):  # two listed samples of one key run together in the rules
        raise ValueError(f"{where}: lists {len(listed)} samples where the members make {len(out)}")
    return out


@dataclasses.dataclass(frozen=True)
class WidsShard:
    """A shard of a wids dataset description: its path or URL, resolved, and its sample count."""

    url: str
    nsamples: int


def is_wids_source(source: Any) -> bool:
    """Whether `source` names a wids dataset description: a path or URL ending
    in ``.json`` (an http(s) URL's query string aside)."""
    if not isinstance(source, (str, os.PathLike)) or isinstance(source, bytes):
        return False
    text = os.fspath(source)
    if is_url(text) and scheme_of(text) != "s3":
        text = text.split("?", 1)[0]
    return text.lower().endswith(".json")


def _load(source: str) -> Any:
    try:
        if is_url(source):
            with File(source) as f:
                text = f.read(device="cpu").numpy().tobytes().decode("utf-8")
        else:
            with open(source, encoding="utf-8") as f:
                text = f.read()
        return json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"wids dataset '{source}': not JSON ({e})") from None


def _folder(source: str) -> str:
    if not is_url(source):
        return os.path.dirname(source)
    p = urlparse(source)
    return urlunparse((p.scheme, p.netloc, os.path.dirname(p.path), "", "", ""))


def _join(base: str | None, url: str) -> str:
    """`url` resolved against the folder `base`, as wids's urlmerge does."""
    if url.startswith("file://"):
        url = urlparse(url).path
    if base is None or is_url(url):
        return url
    if not is_url(base):
        return os.path.normpath(os.path.join(base, url)) if base else url
    b, u = urlparse(base), urlparse(url)
    path = u.path if u.path.startswith("/") else os.path.normpath(os.path.join(b.path, u.path))
    return urlunparse((b.scheme, b.netloc, path, u.params, u.query, u.fragment))


def _shardlist(items: Any, base: str | None, where: str) -> list[WidsShard]:
    if not isinstance(items, list):
        raise ValueError(f"{where}: 'shardlist' must be a list of {{\"url\": ..., \"nsamples\": ...}}")
    out = []
    for item in items:
        n = item.get("nsamples") if isinstance(item, dict) else None
        if not isinstance(item, dict) or not isinstance(item.get("url"), str) or isinstance(n, bool) \
                or not isinstance(n, int) or n < 0:
            raise ValueError(f"{where}: each shard must be {{\"url\": str, \"nsamples\": int >= 0, ...}}; "
                             f"got {str(item)[:80]}")
        url = _join(base, item["url"])
        if not is_url(url) and not os.path.isfile(url):
            raise FileNotFoundError(f"{where}: shard '{url}' does not exist or is not a file")
        out.append(WidsShard(url, n))
    return out


def wids_shards(source: str | os.PathLike[str]) -> list[WidsShard]:
    """The shards of the wids dataset description at `source` (a path or
    URL), in order: its ``shardlist``, then each of its ``datasets``' (see the
    module docstring). Weights, md5sums and file sizes are not used.

    Raises:
        ValueError: `source` is not a wids dataset description (``wids_version`` 1),
            or lists no shard.
        FileNotFoundError: a local shard it lists does not exist.
        OSError: it cannot be read.
    """
    source = os.fspath(source)
    where = f"wids dataset '{source}'"
    desc = _load(source)
    if not isinstance(desc, dict) or desc.get("wids_version") != 1:
        raise ValueError(f"{where}: not a wids dataset description (a JSON object with \"wids_version\": 1)")
    base = desc.get("base") if isinstance(desc.get("base"), str) else _folder(source)
    out = _shardlist(desc.get("shardlist", []), base, where)
    datasets = desc.get("datasets", [])
    for part in datasets if isinstance(datasets, list) else [datasets]:
        if not isinstance(part, dict):
            raise ValueError(f"{where}: each of 'datasets' must be an object; got {str(part)[:80]}")
        src = part.get("source_url")
        if isinstance(src, str):
            part = _load(src)
            if not isinstance(part, dict) or "source_url" in part:
                raise ValueError(f"{where}: dataset '{src}' must be an object holding a shardlist, "
                                 "no further source_url")
        sub = part.get("base", _folder(src) if isinstance(src, str) else None)
        out += _shardlist(part.get("shardlist"), sub, f"{where}, dataset '{src or part.get('name', '?')}'")
    if not out:
        raise ValueError(f"{where}: lists no shard")
    return out


def check_wids_counts(source: Any, listed: Sequence[WidsShard], indexes: Sequence[ShardIndex]) -> None:
    """Raises ValueError naming `source` and the first shard whose index holds
    another number of samples than its ``nsamples`` in the description."""
    for entry, index in zip(listed, indexes):
        if len(index.samples) != entry.nsamples:
            raise ValueError(f"wids dataset '{os.fspath(source)}': shard '{entry.url}' holds {len(index.samples)} "
                             f"samples; the description says {entry.nsamples} (it describes another version "
                             "of the shard, or another shard)")
