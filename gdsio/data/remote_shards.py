"""Tar shards on an object store (``s3://``, ``http(s)://``): their index, and
the reads of the shard-window order (``gdsio.Loader(shuffle="window")``).

Everything here goes through gdsio's remote engine (gdsio.io.remote: kept-alive
connections, ranged GETs in parallel, retries, ETags pinned by ``If-Match``).

The index of a remote shard is the local one's format (gdsio.data.shards)
with ``"shard_etag"``, the ETag of the object it describes. For each shard, in
parallel (``remote_concurrency`` shards at a time), one HEAD gives the size
and the ETag, and the index comes from the first of:

1. this process's memory, then the disk cache of a ``Cache(where="disk",
   path=...)`` given to the Loader: ``<path>/shard-index/<sha256 of URL,
   ETag and size>.idx.json`` (so a rewritten shard never finds the old index);
2. ``<shard>.idx.json`` beside the shard (a HEAD and one GET; what
   ``write_shards`` writes, uploaded with the shards), taken when its
   ``shard_size`` is the object's size and the tar headers before its first
   and last members give their sizes (two 512-byte GETs of the shard: tar
   pads to 10 KiB records, so a rewritten shard often keeps its size);
3. one streamed GET of the whole shard: the bytes pass through the tar
   scanner of gdsio.data.shards piece by piece as they arrive (the shard is
   never whole in memory; the GET asks ``If-Match`` the HEAD's ETag).

An index made by 2 or 3 is kept in memory and, with a disk cache, written
there (its bytes are not counted against the cache's budget: an index is
small). Without a disk cache a new process reads or builds it again. A
DALI index beside a remote shard is not read: checking it and reading the
labels would take a ranged GET per member (gdsio.data.shard_index_formats).

The shard-window order reads each unit of its plan (a shard, or the part of
one a rank takes; gdsio.data.sampler.WindowOrder) with one ranged read of
the bytes from its first image member to the end of its last: the engine
splits it into ``remote_chunk_bytes`` GETs, ``remote_concurrency`` in
flight. A remote shard whose ETag at that read differs from its index's (the
shard was rewritten on the store since) raises ``OSError`` (ESTALE) naming
the shard; so does one rewritten during the read. The loader turns that into
a ``SampleError`` per sample, or skips the shard's samples with
``on_error="skip"``. With a ``Cache(where="disk")`` the shards themselves are
fetched whole into the cache once and read from there; a HEAD before that
fetch checks the ETag as above (a rewrite between that HEAD and the cache's
own is not seen). Without a disk cache, a pass's first batch is read sample
by sample while its window arrives (``ShardWindows``).
"""

from __future__ import annotations

import concurrent.futures
import errno
import hashlib
import json
import logging
import os
import queue
import tempfile
import threading
from typing import Any, Callable, Sequence

import numpy as np

from ..config import carried, current
from ..io import http, read
from ..io.buffers import host_empty
from ..io.remote import RemoteReader, fetch
from ..io.urls import is_url, scheme_of
from .disk_cache import DiskCache
from .flow import POLL_S, mark_loader_thread
from .sampler import WindowOrder
from .shard_index_formats import TAR_REGULAR, dali_index_beside, tar_header
from .shards import INDEX_SUFFIX, ShardIndex, ShardSet, scan_tar, shard_index

__all__ = ["INDEX_FOLDER", "ShardReaders", "ShardWindows", "index_folder", "read_shard_range",
           "remote_index", "shard_indexes"]

log = logging.getLogger("gdsio.data")

INDEX_FOLDER = "shard-index"  # under a disk cache's path
_PIECE = 1 << 20  # bytes per piece of a streamed shard
_LOOKBACK = 64 << 10  # bytes of a streamed shard kept behind its position (the scan's one seek back)

# GETs in flight at most for the first batch's own reads (ShardWindows), or remote_concurrency if more: a
# burst of one batch, once a pass, whose point is its latency (a batch of 64 in about one round trip).
EARLY_IN_FLIGHT = 64

_memory: dict[tuple[str, str, int], ShardIndex] = {}
_memory_lock = threading.Lock()


def index_folder(cache: Any) -> str | None:
    """Where remote shards' indexes are kept: under a disk cache's path, or None (memory only)."""
    return os.path.join(cache.path, INDEX_FOLDER) if isinstance(cache, DiskCache) else None


def shard_indexes(paths: Sequence[str], cache: Any = None) -> list[ShardIndex]:
    """The index of each shard of `paths` (local: gdsio.data.shards.shard_index,
    with a DALI index beside the shard read in place of a scan; URLs:
    ``remote_index``, in parallel), in order.

    Raises:
        ValueError: a malformed shard, naming it and the member.
        FileNotFoundError, PermissionError, OSError: a shard that cannot be read.
    """
    folder = index_folder(cache)
    urls = [p for p in paths if is_url(p)]
    got: dict[str, ShardIndex] = {}
    if urls:
        workers = max(1, min(current().remote_concurrency, len(urls)))
        with concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="gdsio-shard-index",
                                                   initializer=carried()) as pool:
            futures = {u: pool.submit(remote_index, u, folder) for u in dict.fromkeys(urls)}
            try:
                got = {u: f.result() for u, f in futures.items()}
            except BaseException:
                for f in futures.values():
                    f.cancel()
                raise
    return [got[p] if is_url(p) else shard_index(p, foreign=dali_index_beside) for p in paths]


def _cache_file(folder: str, url: str, etag: str, size: int) -> str:
    name = hashlib.sha256(f"{url}\0{etag}\0{size}".encode()).hexdigest()
    return os.path.join(folder, name + INDEX_SUFFIX)


def remote_index(url: str, folder: str | None = None) -> ShardIndex:
    """The index of the remote shard `url` (see the module docstring);
    `folder`: where indexes are cached on disk (None: in memory only).

    Raises:
        ValueError: a malformed shard, naming it and the member.
        FileNotFoundError, PermissionError, OSError: the shard cannot be read.
    """
    s = current()
    reader = RemoteReader(url, s)  # one HEAD: the size and ETag the index is kept by
    try:
        size, etag = reader.info.size, reader.info.etag or reader.info.last_modified
        key = (url, etag, size)
        with _memory_lock:
            index = _memory.get(key)
        if index is not None:
            return index
        cached = _cache_file(folder, url, etag, size) if folder is not None else None
        if cached is not None and os.path.isfile(cached):
            index = _load(cached, url, size, etag)
        if index is None:
            index = _beside(url, size, etag, reader)
        if index is None:
            index = _build(reader, url, size, etag)
            if cached is not None:
                _store(index, cached)
        elif cached is not None and not os.path.isfile(cached):
            _store(index, cached)
        with _memory_lock:
            _memory[key] = index
        return index
    finally:
        reader.close()


def _load(path: str, url: str, size: int, etag: str) -> ShardIndex | None:
    try:
        with open(path, encoding="utf-8") as f:
            index = ShardIndex.from_json(url, json.load(f))
    except (OSError, ValueError, KeyError, TypeError, IndexError) as e:
        log.info("gdsio: the cached index of shard '%s' (%s) is unreadable (%s): rebuilding it", url, path, e)
        return None
    return index if index.size == size else None


def _store(index: ShardIndex, path: str) -> None:
    folder = os.path.dirname(path)
    try:
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".", suffix=".tmp", dir=folder)
    except OSError as e:
        log.info("gdsio: cannot keep the index of shard '%s' in %s (%s)", index.path, folder, e)
        return
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(index.to_json(), f, separators=(",", ":"))
        os.replace(tmp, path)  # whole or absent, as the local indexes
    except OSError as e:
        log.info("gdsio: cannot keep the index of shard '%s' in %s (%s)", index.path, folder, e)
        try:
            os.unlink(tmp)
        except OSError:
            pass


def _beside(url: str, size: int, etag: str, shard: RemoteReader) -> ShardIndex | None:
    """`url`'s ``.idx.json`` neighbour, when there and current; None otherwise.
    Current: made for a shard of this size (an object store keeps no mtime,
    and the ETag of an upload is not known where the index is written) whose
    first and last members' tar headers are where the index puts them
    (_stale_because: two small GETs of `shard`)."""
    base, sep, query = url.partition("?") if scheme_of(url) != "s3" else (url, "", "")  # a key may hold '?'
    idx_url = base + INDEX_SUFFIX + sep + query
    s = current()
    try:
        reader = RemoteReader(idx_url, s)
    except (FileNotFoundError, PermissionError):  # S3 answers 403 for a missing key without ListBucket
        return None
    try:
        data = bytearray(reader.info.size)
        reader.read_range(memoryview(data), 0, http.RetryPolicy(s.remote_retries, s.remote_timeout), http.Counters())
    finally:
        reader.close()
    try:
        index = ShardIndex.from_json(url, json.loads(bytes(data)))
    except (ValueError, KeyError, TypeError, IndexError) as e:
        log.info("gdsio: ignoring the index beside shard '%s' (%s): rebuilding it", url, e)
        return None
    if index.size != size:
        log.info("gdsio: the index beside shard '%s' is stale (%d bytes, the shard %d): rebuilding it",
                 url, index.size, size)
        return None
    why = _stale_because(index, shard)
    if why:
        log.info("gdsio: the index beside shard '%s' is stale (%s): rebuilding it", url, why)
        return None
    index.mtime_ns, index.etag = 0, etag
    return index


def _stale_because(index: ShardIndex, shard: RemoteReader) -> str:
    """Why `index` does not describe `shard`, or '': the 512-byte tar header
    before its first and its last member, read from the shard, must be a
    valid header (its checksum; shard_index_formats.tar_header, as a DALI
    index is checked) of a regular file of that member's size, and of its
    name where a ustar header holds the whole of it. Tar pads a shard to
    10 KiB records, so a rewritten shard (other images, another order) often
    keeps its size; its members then start elsewhere, and a stale index
    would hand out other samples' bytes and labels."""
    s = current()
    policy = http.RetryPolicy(s.remote_retries, s.remote_timeout)
    for name, offset, size in dict.fromkeys(index.members[:1] + index.members[-1:]):
        if offset < 512:
            return f"member {name} at byte {offset} has no header before it"
        head = bytearray(512)
        shard.read_range(memoryview(head), offset - 512, policy, http.Counters())
        try:
            got, hsize, kind = tar_header(bytes(head), f"member {name} at byte {offset}")
        except ValueError as e:
            return str(e)
        if kind not in TAR_REGULAR or hsize != size:
            return f"the tar header before member {name} gives {hsize} bytes, the index {size}"
        if name.isascii() and len(name) <= 100 and got != name:  # longer names sit in a pax or GNU header
            return f"the tar header before member {name} names '{got}'"
    return ""


class _Stop(Exception):
    """The scan needs no more of the streamed shard: ends its GET."""


class _StreamedTar:
    """A read-only file over a shard whose bytes arrive in pieces from a GET
    in another thread: reads, and seeks forward (and back by at most
    ``_LOOKBACK`` bytes), as ``scan_tar`` does them."""

    def __init__(self, url: str, size: int, pieces: "queue.Queue[Any]", getter: threading.Thread) -> None:
        self.url, self.size = url, size
        self._pieces, self._getter = pieces, getter
        self._data = bytearray()
        self._base = 0  # the shard offset of _data[0]
        self._pos = 0
        self._eof = False

    def tell(self) -> int:
        return self._pos

    def seek(self, pos: int, whence: int = 0) -> int:
        pos = pos if whence == 0 else self._pos + pos if whence == 1 else self.size + pos
        if pos < self._base:
            raise OSError(errno.ESPIPE, f"a streamed shard cannot seek back to byte {pos}", self.url)
        self._pos = pos
        return pos

    def _next_piece(self) -> bytes | None:
        while True:
            try:
                item = self._pieces.get(timeout=POLL_S)
            except queue.Empty:
                if not self._getter.is_alive() and self._pieces.empty():
                    raise OSError(errno.EIO, "the GET of the shard ended without its bytes", self.url) from None
                continue
            if isinstance(item, BaseException):
                raise item
            return item

    def read(self, n: int = -1) -> bytes:
        end = self.size if n is None or n < 0 else min(self._pos + n, self.size)
        while self._base + len(self._data) < end and not self._eof:
            piece = self._next_piece()
            if piece is None:
                self._eof = True
                break
            self._data += piece
            drop = min(len(self._data), self._pos - _LOOKBACK - self._base)  # far behind: skipped bytes
            if drop > 0:
                del self._data[:drop]
                self._base += drop
        out = bytes(self._data[max(0, self._pos - self._base): max(0, end - self._base)])
        self._pos += len(out)
        return out


def _build(reader: RemoteReader, url: str, size: int, etag: str) -> ShardIndex:
    """The index of `url` by one streamed GET of the whole shard."""
    s = current()
    pieces: queue.Queue[Any] = queue.Queue(maxsize=8)
    stop = threading.Event()

    def put(item: Any) -> bool:
        """Hands `item` to the scan; False once the scan has stopped taking."""
        while not stop.is_set():
            try:
                pieces.put(item, timeout=POLL_S)
                return True
            except queue.Full:
                continue
        return False

    def sink(view: memoryview) -> None:
        if not put(bytes(view)):
            raise _Stop

    def get() -> None:
        last: BaseException | None = None  # None: the end of the shard
        try:
            reader.read_range(http.Streamed(size, memoryview(bytearray(min(_PIECE, max(size, 1)))), sink), 0,
                              http.RetryPolicy(s.remote_retries, s.remote_timeout), http.Counters())
        except _Stop:
            return
        except BaseException as e:  # the scan raises it in the caller's thread
            last = e
        put(last)

    getter = threading.Thread(target=get, name="gdsio-shard-scan", daemon=True)
    getter.start()
    try:
        return scan_tar(_StreamedTar(url, size, pieces, getter), url, size, 0, etag)
    finally:
        stop.set()
        getter.join(timeout=s.remote_timeout * (s.remote_retries + 1) + 5)
        if getter.is_alive():
            log.warning("gdsio: the GET of shard '%s' did not stop (a socket stuck?)", url)


def _stale(path: str, etag: str, now: str | None = None) -> OSError:
    seen = (f"ETag {now or 'none'} now, {etag} in the index" if now is not None
            else f"its ETag is no longer {etag}, the index's")
    return OSError(errno.ESTALE, f"the shard changed on the store since its index was made ({seen}); its members' "
                   "offsets no longer hold: restart the loader to index it again", path)


def _check_version(reader: RemoteReader, etag: str) -> None:
    now = reader.info.etag or reader.info.last_modified
    if etag and now.strip('"') != etag.strip('"'):
        raise _stale(reader.path, etag, now)


class ShardReaders:
    """The remote shards one pass reads, each opened once (one HEAD, its ETag
    checked against its index's) and read by any thread until ``close()``:
    the reads of a shard's samples then cost a GET each, no HEAD (each GET
    still asks ``If-Match`` that ETag, so a rewrite is never read)."""

    def __init__(self) -> None:
        self._open: dict[str, RemoteReader] = {}
        self._opening: dict[str, threading.Lock] = {}  # per shard: held by the thread opening it
        self._lock = threading.Lock()

    def get(self, path: str, etag: str) -> RemoteReader:
        with self._lock:
            reader = self._open.get(path)
            if reader is not None:
                return reader
            opening = self._opening.setdefault(path, threading.Lock())
        with opening:  # the other threads wanting this shard wait for its one HEAD
            with self._lock:
                reader = self._open.get(path)
            if reader is not None:
                return reader
            reader = RemoteReader(path, current())  # a failed open raises here; the next thread tries again
            try:
                _check_version(reader, etag)
            except BaseException:
                reader.close()
                raise
            with self._lock:
                self._open[path] = reader
        return reader

    def close(self) -> None:
        with self._lock:
            readers, self._open, self._opening = list(self._open.values()), {}, {}
        for r in readers:
            r.close()


def read_shard_range(path: str, etag: str, offset: int, size: int, cache: Any = None,
                     readers: ShardReaders | None = None) -> tuple[Any, Any]:
    """`size` bytes of the shard `path` at `offset`, into host memory, by one
    ranged read (the engine's chunks and concurrency for a URL; a disk cache's
    copy when `cache` is one), a remote shard's ETag checked against `etag`,
    its index's. `readers`: the pass's open shards (None: opened for this read).
    Returns (uint8 tensor, (backend, bytes read)).

    Raises:
        OSError: the read failed; ESTALE: the shard changed (see the module docstring).
    """
    if is_url(path) and isinstance(cache, DiskCache):
        if etag and path not in cache:  # about to be fetched into the cache: only the version indexed
            reader = RemoteReader(path, current())
            reader.close()
            _check_version(reader, etag)
        path = cache.local_path(path)  # the URL itself where the budget is spent
    if not is_url(path):
        t, st = read(path, offset=offset, size=size, device="cpu", return_stats=True)
        return t, (st.backend, st.nbytes)
    s = current()
    reader = readers.get(path, etag) if readers is not None else RemoteReader(path, s)
    try:
        _check_version(reader, etag)
        if offset + size > reader.info.size:
            raise _stale(reader.path, etag, reader.info.etag)
        out = host_empty(size)
        try:
            r = fetch(reader, [out], [(0, size, offset)], to_gpu=False, device=0, stream=0, settings=s)
        except OSError as e:  # rewritten since it was opened (a GET's If-Match failed): the index no longer holds
            if e.errno == errno.ESTALE:
                raise _stale(reader.path, etag) from e
            raise
    finally:
        if readers is None:
            reader.close()
    return out, (r.backend, r.nbytes)


class ShardWindows:
    """The producer's reads in the shard-window order: each unit of the pass's
    plan read whole (``read_shard_range``) on a pool of ``shuffle_window``
    threads, the units of the window being consumed and of the next one;
    a unit's bytes are dropped once its last sample has been taken.

    Shards on a store without a disk cache: the pass's first batch is not
    held until its window has arrived whole (``shuffle_window`` shards, a GB
    at the default shard size). Each of its samples is read alone, one ranged
    GET (up to ``EARLY_IN_FLIGHT`` in flight, or ``remote_concurrency`` if
    more), while the window's shards are read whole for the rest of their
    samples, and is taken from whichever read arrives first: the first batch
    is out in about a round trip. Its bytes are read twice (alone, and in
    their shard's range); ``Loader.stats().early_reads`` counts these reads.

    Args:
        shards: the source's shards. ranges: per sample, its image member's
            (offset, size) in its shard. order: the loader's WindowOrder.
        epoch, start: the pass (its first batch). cache: the loader's cache.
        readers: the pass's open shards. count: the meter's ``read``, called
            as each read ends. remote: whether the shards are on a store
            (SampleTable.remote).
    """

    def __init__(self, shards: ShardSet, ranges: np.ndarray, order: WindowOrder, epoch: int, start: int,
                 cache: Any = None, readers: ShardReaders | None = None,
                 count: Callable[[str, int, bool], None] | None = None, remote: bool = False) -> None:
        self.shards, self.ranges, self.order, self.cache, self.readers = shards, ranges, order, cache, readers
        self.count = count  # the meter's read(backend, bytes, early): every read, units and own reads, as it ends
        self.plan = order.window_plan(epoch)
        bs = order.batch_size
        end = min(len(order) * bs, len(self.plan.indices))
        # Uses left per unit in this pass (from its first batch on): the unit is dropped at 0.
        self.left = np.bincount(self.plan.unit_of[start * bs: end], minlength=len(self.plan.units)).tolist()
        self.pool = concurrent.futures.ThreadPoolExecutor(order.shuffle_window, thread_name_prefix="gdsio-shard",
                                                          initializer=mark_loader_thread,
                                                          initargs=(carried(),))  # the pass's settings blocks
        self.futures: dict[int, concurrent.futures.Future[Any]] = {}
        self.submitted = 0  # units before this one are submitted (or not needed)
        self.lock = threading.Lock()
        # The pass's first batch read sample by sample (see above): sample index -> its read.
        self.early_batch = start if remote and not isinstance(cache, DiskCache) else -1
        self.early: dict[int, concurrent.futures.Future[Any]] = {}
        self.early_pool: concurrent.futures.ThreadPoolExecutor | None = None

    def units_of(self, batch_no: int, count: int) -> list[int]:
        """The unit of each sample of batch `batch_no` (of `count` samples)."""
        at = batch_no * self.order.batch_size
        return self.plan.unit_of[at: at + count].tolist()

    def want(self, units: list[int], samples: list[int] | None = None, batch_no: int = -1) -> None:
        """Starts the reads of every unit up to the end of the window after the last of `units`, the units of
        batch `batch_no`'s `samples`; the pass's first batch's samples are read alone first (see above)."""
        if not units:
            return
        last_window = int(self.plan.window_of[max(units)]) + 1
        stop = int(np.searchsorted(self.plan.window_of, last_window, side="right"))
        with self.lock:
            if batch_no == self.early_batch and samples is not None:
                if self.early_pool is None:
                    self.early_pool = concurrent.futures.ThreadPoolExecutor(
                        min(max(current().remote_concurrency, EARLY_IN_FLIGHT), len(samples)),
                        thread_name_prefix="gdsio-shard-early",
                        initializer=mark_loader_thread, initargs=(carried(),))
                for u, i in zip(units, samples):
                    if i not in self.early:  # (a sample twice in one batch: its second read from the unit)
                        self._use(u)  # the unit is read for its other samples (not at all if none)
                        self.early[i] = self._counting(self.early_pool.submit(self._read_alone, u, i), True)
            for u in range(self.submitted, stop):
                if self.left[u] > 0:
                    self.futures[u] = self._counting(self.pool.submit(self._read_unit, u), False)
            self.submitted = max(self.submitted, stop)

    def _read_unit(self, u: int) -> tuple[Any, int, Any]:
        shard, first, end = (int(v) for v in self.plan.units[u])
        lo = int(self.ranges[first, 0])
        hi = int(self.ranges[end - 1, 0] + self.ranges[end - 1, 1])
        data, stats = read_shard_range(self.shards.paths[shard], self.shards.etags[shard], lo, hi - lo, self.cache,
                                       self.readers)
        return data, lo, stats

    def _read_alone(self, u: int, index: int) -> tuple[Any, tuple[str, int]]:
        shard = int(self.plan.units[u][0])
        off, size = int(self.ranges[index, 0]), int(self.ranges[index, 1])
        return read_shard_range(self.shards.paths[shard], self.shards.etags[shard], off, size, None, self.readers)

    def _counting(self, fut: concurrent.futures.Future[Any], early: bool) -> concurrent.futures.Future[Any]:
        """`fut`, whose read the meter counts when it ends well (its result's last item: (backend, bytes))."""
        def counted(f: concurrent.futures.Future[Any]) -> None:
            if not f.cancelled() and f.exception() is None:
                self.count(*f.result()[-1], early)  # type: ignore[misc]

        if self.count is not None:
            fut.add_done_callback(counted)
        return fut

    def taken(self, units: list[int]) -> None:
        """Samples of `units` that are not read (a sample cache had them)."""
        with self.lock:
            for u in units:
                self._use(u)

    def _use(self, u: int) -> None:
        self.left[u] -= 1
        if self.left[u] == 0:
            self.futures.pop(u, None)  # the bytes go with the last view of them

    def member(self, u: int, index: int) -> tuple[Any, None]:
        """Sample `index`'s image bytes (a view of its unit's), waiting for the
        unit's read, and None (the reads are counted as they end, by `count`).
        A sample of the first batch: the first of its own read and its unit's
        to arrive (the same bytes: both ask the index's ETag). Raises the
        read's error (a first-batch sample's: when both reads failed)."""
        with self.lock:
            alone = self.early.pop(index, None)
            fut = self.futures.get(u) if alone is not None else self.futures[u]
            if alone is None:
                self._use(u)
        if alone is not None:
            if fut is not None and not alone.done():
                concurrent.futures.wait([alone, fut], return_when=concurrent.futures.FIRST_COMPLETED)
            own_first = alone.done() and alone.exception() is None
            if fut is None or own_first or fut.exception() is not None:  # else: the unit's read came first, whole
                return alone.result()[0], None
        assert fut is not None
        data, lo, _ = fut.result()
        off, size = int(self.ranges[index, 0]), int(self.ranges[index, 1])
        return data[off - lo: off - lo + size], None

    def close(self, finish: bool = False) -> None:
        """Stops the reads (`finish`: the first batch's own reads run to their end first, and are counted)."""
        if self.early_pool is not None:
            self.early_pool.shutdown(wait=True, cancel_futures=not finish)
        self.pool.shutdown(wait=True, cancel_futures=True)
        with self.lock:
            self.futures.clear()
            self.early.clear()
