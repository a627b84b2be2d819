"""The loader's producing side: reader threads and the loader thread.

For each batch the loader thread submits the reads (cache misses only) to
the reader pool one batch ahead, so the reads of batch k+1 run while batch k
is decoded and transformed. On a GPU the reads, the decode and the transform
each have a stream of the loader's; each step waits for the previous one
through CUDA events (only nvJPEG's hardware engines need a host wait, on the
decode stream, whose queue holds one batch's decode).
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import dataclasses
import logging
import queue
import threading
import time
from typing import Any, Callable, Iterator

import numpy as np
import torch

from ..config import carried, current
from ..errors import SampleError
from ..image.batch import Item, options
from ..io import File, read
from ..io.backends import BACKENDS
from ..io.many import coalesce_ranges, read_ranges
from ..io.urls import is_url
from ..tensors import load_npy, npy_from_bytes
from . import decode
from .assemble import assemble
from .disk_cache import DiskCache
from .flow import (END, NOT_YET, BatchBuffers, ByteBudget, EmptyBatch, End, Failed, ReadyBatch, batch_nbytes,
                   mark_loader_thread, put_until_stopped)
from .meter import Meter
from .remote_shards import ShardReaders, ShardWindows, read_shard_range
from .sampler import WindowOrder
from .shards import read_members
from .sources import SampleTable
from ..transforms.classes import BatchInfo, BatchTransform

__all__ = ["PassPlan", "Producer"]

log = logging.getLogger("gdsio")


class _RowErrors(dict):
    """{batch row: error} of a batched host read that failed for some files."""


@dataclasses.dataclass
class _Group:
    """A reader's result for several rows of a batch: per row an Item or the error of its read, and the events
    of the reads' copies."""

    samples: list[Any]
    events: list[Any]


@dataclasses.dataclass
class _Pending:
    batch_no: int
    indices: np.ndarray
    t0: float
    hits: dict[int, Any]  # position in the batch -> cached sample
    futures: list[tuple[list[int], concurrent.futures.Future[Any]]]  # positions -> (samples, event)
    buf: Any = None  # raw kind: the batch buffer the reads fill
    regions: dict[int, tuple[int, int, int, int]] = dataclasses.field(default_factory=dict)  # position -> decoded box
    members: Any = None  # local shards on the CPU: the buffer the batch's member reads fill


class _Region(tuple):
    """A reader's result for an image decoded only for its crop's box:
    (tensor, (image height, image width, top, left))."""

    __slots__ = ()

    def __new__(cls, tensor: Any, region: tuple[int, int, int, int]) -> _Region:
        return super().__new__(cls, (tensor, region))


def batch_options(mode: str) -> Any:
    """gdsio.image's decode options for a reader thread (its settings, on_error="raise")."""
    return options(mode=mode, on_error="raise")


@dataclasses.dataclass(frozen=True)
class PassPlan:
    """One pass, as the Loader hands it to its producer: what to read, in
    which order, what to do with it, and where the counts go. Frozen: a pass
    runs from what it was given, whatever the Loader does meanwhile."""

    table: SampleTable
    order: Any  # ShardedOrder, or anything with its .seed and .numbered_batches(epoch, start)
    epoch: int
    start: int  # the first batch of the pass (resume)
    transform: Any
    device: Any  # torch.device
    streams: tuple[Any, Any, Any] | None  # CUDA: (read, work, decode) streams; None on the CPU
    threads: int
    on_error: str
    mode: str  # image mode
    cache: Any  # gdsio.Cache or None
    meter: Meter
    buffers: BatchBuffers  # host batch buffers (raw reads, fused transform outputs), kept by the Loader across passes
    crop_decode: bool = False  # CPU JPEGs: decode only the box the transform's first crop keeps
    # The reads run in the producer's own thread, each as it is submitted (InlineExecutor): for a pass of one
    # batch on one CPU (a CPU node's actor call), where a reader thread overlaps nothing and costs a thread
    # and two hand-overs a sample.
    inline_reads: bool = False


class InlineExecutor(concurrent.futures.Executor):
    """An executor that runs each call in the submitting thread, at once, and
    hands back its finished future (the result, or the exception a reader
    thread's future would hold)."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[Any]:
        fut: concurrent.futures.Future[Any] = concurrent.futures.Future()
        try:
            fut.set_result(fn(*args, **kwargs))
        except BaseException as e:  # as ThreadPoolExecutor's worker: the future holds it, result() raises it
            fut.set_exception(e)
        return fut


class Producer:
    """Runs in the thread ``gdsio-loader``; puts a ``ReadyBatch`` or an
    ``EmptyBatch`` per batch, then ``END``, or ``Failed`` (gdsio.data.flow's
    records) on the queue."""

    def __init__(self, plan: PassPlan, q: queue.Queue[Any], stop: threading.Event, budget: ByteBudget | None = None,
                 kept: dict[int, np.ndarray] | None = None) -> None:
        self.plan = plan
        self.carry = carried()  # made where the pass starts (iter()): its settings blocks, for the pass's threads
        self.kept = kept  # when given: batch number -> the sample indices its batch holds (on_error="skip" drops some)
        self.cuda = plan.device.type == "cuda"
        self.q, self.stop, self.budget = q, stop, budget
        self.image_setup = None
        if self.cuda and plan.table.kind == "image":
            self.image_setup = decode.image_setup(plan.device, plan.mode)
        # Boxes before decoding: a CPU pass of images whose transform reads
        # only a box of each (a RandomResizedCrop first); not with a cache of
        # decoded samples, which must hold whole images.
        self.boxes = (plan.crop_decode and not self.cuda and plan.table.kind == "image" and plan.cache is None
                      and isinstance(plan.transform, BatchTransform)
                      and type(plan.transform).decode_boxes is not BatchTransform.decode_boxes)
        # The shard-window order's reads, a window ahead; remote shards opened once a pass (made and closed in run())
        self.windows: ShardWindows | None = None
        self.readers = ShardReaders()
        t = plan.table  # local shards on the CPU: a batch's members are read in one call (_read_members)
        self.batch_members = (not self.cuda and t.kind == "image" and t.ranges is not None and t.shards is not None
                              and not t.remote)
        self.group_images = self._group_images()

    def _group_images(self) -> bool:
        """Images for a GPU without true GPUDirect Storage (gds's probe refuses; or backend "pinned"): a group of
        a batch's local files or shard members read on the host by one call (_read_images), copied up in one copy
        (one engine read per image was Python-bound). Where GDS runs, or URLs without a disk cache: one by one."""
        t = self.plan.table
        uncached = t.remote and not isinstance(self.plan.cache, DiskCache)  # with one, later passes read local copies
        if not (self.cuda and t.kind == "image") or uncached or (t.ranges is not None and not self._members_to_device()):
            return False
        backend = current().backend
        if backend == "pinned":
            return True
        return backend == "auto" and BACKENDS["gds"].probe(None, self.plan.device.index or 0)[0] is not None

    # ---- contexts ---------------------------------------------------------------

    @contextlib.contextmanager
    def _on(self, which: int) -> Iterator[None]:
        """Makes the loader's read (0), work (1) or decode (2) stream current in this thread."""
        if not self.cuda:
            yield
            return
        stream = self.plan.streams[which]  # type: ignore[index]
        with torch.cuda.device(stream.device), torch.cuda.stream(stream):
            yield

    def _event(self, stream_index: int, timing: bool = False) -> Any:
        if not self.cuda:
            return None
        ev = torch.cuda.Event(enable_timing=timing)
        ev.record(self.plan.streams[stream_index])  # type: ignore[index]
        return ev

    # ---- the loop ---------------------------------------------------------------

    def run(self) -> None:
        mark_loader_thread(self.carry)
        pool: concurrent.futures.Executor = InlineExecutor() if self.plan.inline_reads else (
            concurrent.futures.ThreadPoolExecutor(
                self.plan.threads, thread_name_prefix="gdsio-reader", initializer=mark_loader_thread,
                initargs=(self.carry,)))
        try:
            t = self.plan.table
            if (isinstance(self.plan.order, WindowOrder) and t.shards is not None and t.ranges is not None
                    and not self._members_to_device()):
                self.windows = ShardWindows(t.shards, t.ranges, self.plan.order, self.plan.epoch, self.plan.start,
                                            self.plan.cache, self.readers, self.plan.meter.read, t.remote)
            batches = iter(self.plan.order.numbered_batches(self.plan.epoch, self.plan.start))
            ahead: collections.deque[_Pending] = collections.deque()
            while True:
                # Keep this batch and the next one submitted: reads overlap the transform.
                while len(ahead) < 2 and (nxt := next(batches, None)) is not None:
                    if nxt is NOT_YET:  # an order deciding its batches as the consumer nears them
                        if ahead or self.stop.is_set():
                            break  # what is read first (its batches let the consumer move on)
                        self.plan.order.wait(self.stop)
                        continue
                    ahead.append(self._submit(pool, *nxt))
                if not ahead or self.stop.is_set():
                    break
                item = self._finish(ahead.popleft())
                if not self._put(item):
                    return
            if not self.stop.is_set():
                if self.windows is not None:  # the first batch's own reads end, and are counted, before the end
                    self.windows.close(finish=True)
                self._put(END)
        except BaseException as e:  # reaches the consumer, which re-raises it
            self._put(Failed(e))
        finally:
            if self.windows is not None:  # first: a reader waiting for a unit not yet read gets it cancelled
                self.windows.close()
            pool.shutdown(wait=True, cancel_futures=True)
            self.readers.close()

    def _put(self, item: ReadyBatch | EmptyBatch | Failed | End) -> bool:
        if isinstance(item, ReadyBatch) and self.budget is not None:
            if not self.budget.acquire(batch_nbytes(item.images, item.labels), self.stop):
                return False
        return put_until_stopped(self.q, item, self.stop)

    # ---- reads ------------------------------------------------------------------

    def _keys(self, idx: np.ndarray) -> list[tuple[Any, ...]]:
        """Cache keys: (kind, path, byte offset, image mode), shareable between loaders."""
        t = self.plan.table
        files = t.file_of(idx).tolist()
        offs = t.offset_of(idx).tolist() if t.starts is not None or t.ranges is not None else [0] * len(files)
        mode = self.plan.mode if t.kind == "image" else None
        return [(t.kind, t.files.paths[f], off, mode) for f, off in zip(files, offs)]

    def _submit(self, pool: concurrent.futures.Executor, batch_no: int, idx: np.ndarray) -> _Pending:
        p = _Pending(batch_no, idx, time.perf_counter(), {}, [])
        misses = list(range(len(idx)))
        if self.plan.cache is not None:
            misses = []
            for pos, key in enumerate(self._keys(idx)):
                hit = self.plan.cache.lookup(key)
                if hit is not None:
                    p.hits[pos] = hit
                else:
                    misses.append(pos)
        if self.plan.table.kind == "raw":
            t = self.plan.table
            if self.cuda:
                with self._on(0):  # allocated on the read stream, which fills it
                    p.buf = torch.empty((len(idx), t.record_bytes), dtype=torch.uint8, device=self.plan.device)
            else:
                p.buf = self.plan.buffers.take((len(idx), t.record_bytes))
            if not self.cuda and misses:
                # Host batches: every file of the batch in one C++ call (no future,
                # File or GIL hand-off per file).
                p.futures.append((misses, pool.submit(self._read_records_host, idx, misses, p.buf)))
            else:
                for rows in self._group_by_file(idx, misses):
                    p.futures.append((rows, pool.submit(self._read_records, idx, rows, p.buf)))
        else:
            # The crop boxes of the batch, drawn before decoding (per sample, from
            # (seed, epoch, index): the same draws the transform makes later).
            draw = (self.plan.transform.decode_boxes(BatchInfo(self.plan.order.seed, self.plan.epoch, idx))
                    if self.boxes else None)
            units: list[Any] = [None] * len(idx)
            if self.windows is not None:
                units = self.windows.units_of(batch_no, len(idx))
                self.windows.want([units[pos] for pos in misses], idx[misses].tolist(), batch_no)
                self.windows.taken([units[pos] for pos in p.hits])
            views = self._read_members(p, idx, misses) if self.batch_members and self.windows is None and misses else None
            if self.group_images and self.windows is None and misses:
                step = -(-len(misses) // min(4, max(1, len(misses) // 16)))  # up to 4 groups of 16+: reads overlap parsing
                for k in range(0, len(misses), step):
                    p.futures.append((misses[k : k + step], pool.submit(self._read_images, idx, misses[k : k + step])))
                misses = []
            for k, pos in enumerate(misses):
                box = (lambda h, w, pos=pos: draw(pos, h, w)) if draw is not None else None
                fut = (pool.submit(self._decode_host, views[k], int(idx[pos]), box) if views is not None  # read already
                       else pool.submit(self._read_file, int(idx[pos]), box, units[pos]))
                p.futures.append(([pos], fut))
        return p

    def _group_by_file(self, idx: np.ndarray, rows: list[int]) -> list[list[int]]:
        files = self.plan.table.file_of(idx[rows]) if rows else []
        groups: dict[int, list[int]] = {}
        for r, f in zip(rows, np.asarray(files).tolist()):
            groups.setdefault(f, []).append(r)
        return list(groups.values())

    def _read_records_host(self, idx: np.ndarray, rows: list[int], buf: Any) -> tuple[Any, None]:
        """Reader thread, host batches: the records of `rows` in one call
        (gdsio.io.many.read_ranges), the per-row work vectorised (a batch of
        one-record files is as many reads as files). When it fails, file by
        file, so that each error names its own rows: returns {row: error} then."""
        t = self.plan.table
        rb = t.record_bytes
        sel = idx[rows]
        files = np.asarray(t.file_of(sel))
        paths = t.files.paths
        try:
            # Runs adjacent both in a file and in the batch (unshuffled data) are one request.
            read_ranges(buf, [paths[f] for f in files.tolist()], t.offset_of(sel), np.full(len(rows), rb),
                        np.asarray(rows, dtype=np.int64) * rb)
        except (OSError, ValueError):
            errors: dict[int, BaseException] = {}
            for group in self._group_by_file(idx, rows):
                try:
                    self._read_records(idx, group, buf)
                except (OSError, ValueError) as e:
                    errors.update({r: e for r in group})
            return _RowErrors(errors), None
        for n in np.unique(files, return_counts=True)[1].tolist():  # one read per file, as the per-file path counts
            self.plan.meter.read("posix", n * rb)
        return None, None

    def _read_records(self, idx: np.ndarray, rows: list[int], buf: Any) -> tuple[None, Any]:
        """Reader thread: the records of `rows` (one file) into their rows of the batch buffer."""
        t = self.plan.table
        rb = t.record_bytes
        offs = np.asarray(t.offset_of(idx[rows]), dtype=np.int64)
        dst = np.asarray(rows, dtype=np.int64) * rb
        # Runs adjacent both in the file and in the batch (unshuffled data): fewer, larger requests.
        first, merged = coalesce_ranges(np.ones(len(rows) - 1, dtype=bool), offs, np.full(len(rows), rb), dst)
        path = self._local(t.files.paths[int(t.file_of(idx[rows[:1]])[0])])
        with self._on(0):
            stream = self.plan.streams[0].cuda_stream if self.cuda else None  # type: ignore[index]
            with File(path) as f:
                st = f.read_batch([(buf, n, off, out) for n, off, out in
                                   zip(merged.tolist(), offs[first].tolist(), dst[first].tolist())], stream=stream)
            ev = self._event(0)
        self.plan.meter.read(st.backend, st.nbytes)
        return None, ev

    def _read_members(self, p: _Pending, idx: np.ndarray, rows: list[int]) -> tuple[Any, ...] | None:
        """Loader thread, local shards on the CPU: the members of `rows` by one call (read_members; a ranged
        read each cost ~90 Python calls a sample more than a file's one-call read), their views in order;
        None when it fails: each is then read alone, its error naming it."""
        sel = idx[rows]
        try:
            p.members, views = read_members([self.plan.table.files.paths[i] for i in sel.tolist()],
                                            self.plan.table.ranges[sel], self.plan.buffers)  # type: ignore[index]
        except (OSError, ValueError):
            return None
        for v in views:  # one read a sample, as the per-sample path counts them
            self.plan.meter.read("posix", v.numel())
        return views

    def _local(self, path: str) -> str:
        """The file to read for `path`: a Cache(where="disk")'s local copy of a remote object, or `path`."""
        cache = self.plan.cache
        return cache.local_path(path) if isinstance(cache, DiskCache) else path

    def _read_file(self, index: int, box: Any = None, unit: int | None = None) -> tuple[Any, Any]:
        """Reader thread: one npy tensor, or one image (decoded here on the CPU;
        on a GPU its header and bytes, decoded later with the whole batch);
        `unit`: the shard-window order's unit the image is read with."""
        path = self.plan.table.files.paths[index]
        ranges = self.plan.table.ranges
        if ranges is None:
            path = self._local(path)
        with self._on(0):
            if ranges is not None:  # a shard's member: one ranged read, decoded as a whole file's bytes would be
                t, st = self._read_member(index, unit)
            elif self.plan.table.kind == "npy":
                t, st = load_npy(path, device=self.plan.device, return_stats=True)
            elif self.cuda:  # an image for the GPU: its header on the host, its bytes to the device
                t = decode.read_image(path, self.image_setup)
                st = t.io
            else:
                t, st = read(path, device=self.plan.device, return_stats=True)
            ev = self._event(0)
        if isinstance(st, tuple):  # a shard's read: (backend, bytes)
            self.plan.meter.read(*st)
        elif st is not None:
            self.plan.meter.read(st.backend, st.nbytes)
        if self.plan.table.kind == "image" and not self.cuda:
            return self._decode_host(t, index, box)
        return t, ev

    def _decode_host(self, data: Any, index: int, box: Any) -> tuple[Any, None]:
        """Reader thread, CPU: sample `index`'s image bytes decoded (a _Region when only its crop's box
        was), and no event (the CPU has none)."""
        if box is not None:
            t, backend, region = decode.decode_box(data, self.plan.mode, box, batch_options(self.plan.mode),
                                                   self.plan.table.files.paths[index])
            self.plan.meter.decoded(backend)
            return (_Region(t, region) if region is not None else t), None
        t, backend = decode.decode_one(data, self.plan.device, self.plan.mode)
        self.plan.meter.decoded(backend)
        return t, None

    def _read_images(self, idx: np.ndarray, rows: list[int]) -> tuple[_Group, None]:
        """Reader thread, GPU images without GDS (group_images): the images of `rows` read on the host by one
        call into pinned memory (decode.read_images: headers parsed there), then the group to the
        device in one copy on the read stream; an item of a format decoded on the host keeps its host view.
        When the read fails, each image alone (_read_file), so that each error names its own file."""
        t = self.plan.table
        sel = idx[rows]
        paths = [t.files.paths[i] for i in sel.tolist()]
        spans = None
        if t.ranges is None:
            paths = [self._local(path) for path in paths]
        else:
            spans = t.ranges[sel]
        if any(is_url(path) for path in paths):  # a remote file not in a disk cache: each read alone
            return self._one_by_one(idx, rows), None
        try:
            items, buf = decode.read_images(paths, spans, self.image_setup, pin=self.plan.device.type == "cuda")
        except (OSError, ValueError):
            return self._one_by_one(idx, rows), None
        with self._on(0):
            dev = buf.to(self.plan.device, non_blocking=True)  # the host allocator keeps buf until the copy is done
            ev = self._event(0)
        for it in items:
            at, n = it.data.storage_offset(), it.data.numel()  # where it lies in buf, and so in dev
            if it.format is None or not it.format.host_bytes:
                it.data = dev[at : at + n]
            self.plan.meter.read("pinned", n)
        return _Group(items, [ev]), None

    def _one_by_one(self, idx: np.ndarray, rows: list[int]) -> _Group:
        """The images of `rows` each read alone (_read_file): per row its item or its error."""
        samples: list[Any] = []
        events: list[Any] = []
        for r in rows:
            try:
                it, ev = self._read_file(int(idx[r]))
            except Exception as e:
                samples.append(e)
                continue
            samples.append(it)
            events.append(ev)
        return _Group(samples, events)

    def _members_to_device(self) -> bool:
        """Images of local shards only, for a GPU: each member is read by itself into device memory
        (_read_member), so the shard-window order reads no unit into host memory (ShardWindows is not made)."""
        t = self.plan.table
        return (self.cuda and t.kind == "image" and t.ranges is not None and t.shards is not None
                and not t.remote)

    def _read_member(self, index: int, unit: int | None) -> tuple[Any, Any]:
        """A tar shard's member. An image of a local shard for a GPU: a loose
        file's path over the member's byte range (decode.read_image: the
        header from a host read of its first bytes, then one read of the I/O
        engine into device memory, gds or pinned), a batch item that
        decode.decode_items decodes with the batch from that device
        bitstream. Otherwise its bytes by one ranged read into host memory (a
        remote shard's ETag checked against its index's), or a view of its
        unit's bytes in the shard-window order; an npy member's tensor on the
        device; a remote shard's image on a GPU as a batch item of those host
        bytes, which go to the device in one copy at the decode. Returns
        (bytes, tensor or item, (backend, bytes read) or None)."""
        t = self.plan.table
        offset, size = int(t.ranges[index, 0]), int(t.ranges[index, 1])  # type: ignore[index]
        path = t.files.paths[index]
        if unit is not None and self.windows is not None:
            data, st = self.windows.member(unit, index)
        elif self.cuda and t.kind == "image" and not is_url(path):
            it = decode.read_image(path, self.image_setup, (offset, size))
            return it, (it.io.backend, it.io.nbytes)
        else:
            shards = t.shards
            assert shards is not None  # a table with ranges is one of shards
            data, st = read_shard_range(path, shards.etags[shards.shard_of(index)], offset, size, self.plan.cache,
                                        self.readers)
        if t.kind == "npy":  # an npy member: its tensor, on the device, as load_npy makes a file's
            return npy_from_bytes(data, t.describe(index), device=self.plan.device), st
        if self.cuda:
            return Item(0, f"{path}@{offset}", data, size), st
        return data, st

    # ---- one batch --------------------------------------------------------------

    def _failed(self, index: int, err: BaseException, failures: dict[int, BaseException], pos: int) -> None:
        desc = self.plan.table.describe(index)
        if self.plan.on_error == "raise":
            raise SampleError(f"sample {index} ('{desc}'): {type(err).__name__}: {err}", index=index,
                              path=self.plan.table.files.paths[int(self.plan.table.file_of(np.asarray([index]))[0])]) from err
        log.warning("gdsio.Loader: skipping sample %d ('%s'): %s: %s", index, desc, type(err).__name__, err)
        failures[pos] = err

    def _finish(self, p: _Pending) -> ReadyBatch | EmptyBatch:
        try:
            return self._finish_batch(p)
        finally:
            if p.buf is not None and not self.cuda:
                self.plan.buffers.release(p.buf)  # the batch built from it (if any) now keeps it
            if p.members is not None:  # reused once no view of it is left (a reader may still hold one)
                self.plan.buffers.release(p.members)

    def _finish_batch(self, p: _Pending) -> ReadyBatch | EmptyBatch:
        n = len(p.indices)
        idx = p.indices.tolist()
        samples: list[Any] = [None] * n
        failures: dict[int, BaseException] = {}
        events = []
        for rows, fut in p.futures:
            try:
                t, ev = fut.result()
            except Exception as e:
                for r in rows:
                    self._failed(idx[r], e, failures, r)
                continue
            if isinstance(t, _RowErrors):
                for r, e in t.items():
                    self._failed(idx[r], e, failures, r)
            if isinstance(t, _Group):
                events += t.events
                for r, x in zip(rows, t.samples):
                    if isinstance(x, BaseException):
                        self._failed(idx[r], x, failures, r)
                    else:
                        samples[r] = x
                continue
            events.append(ev)
            if p.buf is None:
                if isinstance(t, _Region):
                    t, p.regions[rows[0]] = t
                samples[rows[0]] = t
        fresh = [r for rows, _ in p.futures for r in rows if r not in failures]
        start = None
        if self.plan.table.kind == "image" and self.cuda and fresh:
            # Decoded on a stream of its own, after this batch's reads only: the
            # JPEG engines' host wait (nvjpeg_shim.cpp) then waits for neither the
            # next batch's reads (read stream) nor the last one's transform (work
            # stream), and the reads never queue behind a decode.
            dec = self.plan.streams[2]  # type: ignore[index]
            for ev in events:
                if ev is not None:
                    dec.wait_event(ev)
            for r in fresh:
                if samples[r].data.is_cuda:  # Pillow's formats are read to the host, and decoded there
                    samples[r].data.record_stream(dec)  # read on the read stream, used here
            with self._on(2):
                start = self._event(2, timing=True)
                decoded, errors, backends = decode.decode_items([samples[r] for r in fresh], self.image_setup)
                events.append(self._event(2))
            for name, count in backends.items():
                self.plan.meter.decoded(name, count)
            for k, r in enumerate(fresh):
                samples[r] = decoded[k]
                if k in errors:
                    self._failed(idx[r], errors[k], failures, r)
            fresh = [r for r in fresh if r not in failures]
        with self._on(1):
            if start is None:
                start = self._event(1, timing=True)
            work = self.plan.streams[1] if self.cuda else None  # type: ignore[index]
            for ev in events:
                if ev is not None:
                    work.wait_event(ev)
            if self.cuda:  # made on another stream, used on this one: keep the allocator from reusing early
                for r in fresh if p.buf is None else []:
                    samples[r].record_stream(work)
                if p.buf is not None:
                    p.buf.record_stream(work)
            self._fill_from_cache(p, samples)
            if self.plan.cache is not None and fresh:
                self.plan.cache.put_many(self._keys(p.indices[fresh]), [samples[r] if p.buf is None else p.buf[r] for r in fresh])
            keep = [r for r in range(n) if r not in failures]
            if not keep:
                self.plan.meter.produced(time.perf_counter() - p.t0, len(p.hits), len(failures), None)
                return EmptyBatch(p.batch_no)
            images = assemble(self.plan, self.cuda, p.batch_no, p.indices, keep, samples, p.buf, p.regions)
            if self.kept is not None:
                self.kept[p.batch_no] = p.indices[keep]
            labels = torch.from_numpy(self.plan.table.labels_of(p.indices[keep])).to(self.plan.device, non_blocking=True)
            end = self._event(1, timing=True)
        self.plan.meter.produced(time.perf_counter() - p.t0, len(p.hits), len(failures),
                            (start, end) if self.cuda else None)
        return ReadyBatch(p.batch_no, images, labels, end)

    def _fill_from_cache(self, p: _Pending, samples: list[Any]) -> None:
        for r, (hit, ready) in p.hits.items():
            if ready is not None:  # still being copied into the cache on some stream
                self.plan.streams[1].wait_event(ready)  # type: ignore[index]
            if hit.is_cuda:  # a cache cleared meanwhile (shared by loaders) must not free it under these reads
                hit.record_stream(self.plan.streams[1])  # type: ignore[index]
            if hit.device != self.plan.device:  # a pinned cache: the copy is queued on the work stream
                hit = hit.to(self.plan.device, non_blocking=True)
            if p.buf is not None:
                p.buf[r].copy_(hit, non_blocking=True)
            else:
                samples[r] = hit
