"""``gdsio.Loader``: files to device batches, with the device never waiting.

One pass over the data runs three stages, each in its own threads:

    reader threads (gdsio.read / File.read_batch, straight into device memory;
                    images: where true GDS runs, each one storage to device, its header
                    read on the host first; elsewhere a group of a batch's images read on
                    the host by one call into pinned memory, then one copy, io "pinned")
      -> the loader thread: decode, then transform, each on a CUDA stream of the loader's
      -> a bounded queue of ready batches -> the consumer's ``next()``

A batch crosses to the consumer's stream through a CUDA event
(``current_stream().wait_event``) and ``record_stream``, never a device-wide
synchronisation. At most ``prefetch`` ready batches, and at most
``prefetch_bytes`` of them, wait in the queue; one is being transformed and
two are being read: memory is bounded and the same in every epoch. On the CPU (``device="cpu"``) the reader threads also decode, in
parallel, and the loader thread transforms with gdsio's CPU kernels.

>>> loader = gdsio.Loader("imagenet/train", 256, device="cuda", shuffle=True,
...                       transform=gdsio.data.Compose([gdsio.data.RandomResizedCrop(224), ...]))
>>> for epoch in range(90):
...     loader.set_epoch(epoch)
...     for images, labels in loader: ...

Package-internal (not in ``__all__``): ``begin_pass``, ``track_pass``,
``running_pass``, ``consumed``, ``finished`` and ``pass_plan``, through
which gdsio.data.ray.Loader runs its passes on a gdsio.Loader's pipeline,
position and state.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import weakref
from typing import Any, Callable

import torch

from ..config import current, parse_bytes
from ..device import resolve_device
from .cache import Cache
from .dataset import SampleDataset
from .flow import (POLL_S, BatchBuffers, ByteBudget, EmptyBatch, End, Failed, ReadyBatch, batch_nbytes, in_loader_thread,
                   track_threads)
from .meter import LoaderStats, Meter
from .producer import PassPlan, Producer
from .sampler import ShardedOrder, WindowOrder
from .sources import SampleTable, scan
from ..io.urls import is_url

__all__ = ["DATALOADER_ONLY", "ON_ERROR", "SHUFFLES", "STATE_VERSION", "Loader"]

log = logging.getLogger("gdsio")

ON_ERROR = ("raise", "skip")
SHUFFLES = (False, True, "global", "window")
STATE_VERSION = 1

# torch DataLoader's keywords that gdsio.Loader does not take, each with what
# gdsio does instead. Refused, never mapped: the nearest gdsio argument means
# something else (num_workers are processes, threads= are threads in this one),
# and code ported from a DataLoader should learn that once, at construction.
DATALOADER_ONLY = {
    "num_workers": "there are no worker processes: reader threads in this process read and decode "
                   "(on the CPU), so pass threads= (default: gdsio.current_settings().threads)",
    "pin_memory": "batches are made on device= itself (for device='cuda' through gdsio's own pinned staging "
                  "buffers), so drop it and pass device=",
    "pin_memory_device": "batches are made on device= itself, so drop it and pass device=",
    "persistent_workers": "there are no worker processes to keep: the reader threads start with each pass "
                          "in this process, with no dataset to copy, so drop it",
    "prefetch_factor": "pass prefetch= (ready batches queued ahead, in total, not per worker; default 4) "
                       "and/or prefetch_bytes=",
    "collate_fn": "samples are stacked into the batch by gdsio; to build the batch your own way pass "
                  "transform=gdsio.data.BatchLambda(fn) (fn gets the batch's samples as a list of tensors)",
    "sampler": "the order is gdsio's: shuffle=, seed=, rank=, world_size=, drop_last= (DistributedSampler's "
               "arguments); for a subset or an order of your own pass the paths (or (path, label) pairs) in it",
    "batch_sampler": "batches are cut by batch_size= and drop_last= from the order of shuffle=, seed=, rank=, "
                     "world_size=; for an order of your own pass the paths (or (path, label) pairs) in it",
    "worker_init_fn": "there are no worker processes to initialise: run setup code in this process before iterating",
    "multiprocessing_context": "there are no worker processes: reading and decoding run in threads of this process",
    "timeout": "there are no worker processes to wait on (gdsio.data.ray.Loader's timeout= bounds its wait for "
               "the CPU nodes)",
    "generator": "the shuffle and gdsio's random transforms draw from seed= and the epoch (set_epoch), not "
                 "from a torch.Generator: pass seed=",
    "in_order": "batches always come in order (an order that seed= and the epoch fix), so drop it",
}


def _refuse_dataloader_args(given: dict[str, Any]) -> None:
    """Raises TypeError for a keyword gdsio.Loader does not take: DataLoader's
    with what gdsio does instead, any other as Python says it."""
    if not given:
        return
    name = next(iter(given))
    if name in DATALOADER_ONLY:
        raise TypeError(f"gdsio.Loader does not take DataLoader's {name}=: {DATALOADER_ONLY[name]}")
    raise TypeError(f"Loader.__init__() got an unexpected keyword argument {name!r}")


def _positive_int(name: str, v: Any) -> int:
    if not isinstance(v, int) or isinstance(v, bool):
        raise TypeError(f"{name} must be a positive int, got {v!r} ({type(v).__name__})")
    if v < 1:
        raise ValueError(f"{name} must be a positive int, got {v!r}")
    return v


class Loader:
    """Batches of `source` on `device`, as ``(images, labels)``: images
    ``(N, C, H, W)`` (or ``(N, *shape)`` for npy and raw samples), labels int64
    on the device (``-1`` where the source has no labels).

    source: a folder in ImageFolder layout (labels from the sorted sub-folder
    names), a glob pattern, a list of paths or of ``(path, label)`` pairs, a
    single file, a ``gdsio.data.FileList``, or a torchvision ``ImageFolder``
    built without a transform (its ``samples`` and ``class_to_idx``; see
    ``FileList.from_dataset``). A source that exists but holds no sample
    raises ValueError; one that names nothing, FileNotFoundError. kind: ``"image"`` (JPEG, PNM:
    decoded on the device), ``"npy"`` (a tensor per file, ``gdsio.load_npy``),
    ``"raw"`` (fixed-size records of ``record_shape`` and ``record_dtype``;
    each file holds one or more whole records, one file of N records or one
    record per file alike; a file's label applies to all its records) or
    ``"auto"`` (from the file extensions).

    transform: which runs batched and which per sample:

    * a gdsio.data transform (a ``BatchTransform``: ``Compose``,
      ``RandomResizedCrop``, ..., ``BatchLambda(fn)`` or a subclass of one's
      own) is called once per batch with its samples (a list of tensors on
      the device; image sizes may differ) and returns the batch tensor; the
      usual chains run as one fused kernel (see ``gdsio.data.Compose``);
    * any other callable (a torchvision v2 transform or ``v2.Compose``, a
      function of one tensor) runs per sample, as a DataLoader transform
      does: on each decoded sample (uint8 ``(C,H,W)`` on the loader's device
      for images), in the loader's thread and on its CUDA stream; the
      outputs are stacked, so they must share one shape (end it with e.g.
      ``v2.Resize((224, 224))`` or ``v2.CenterCrop(224)``).

    While it runs, ``gdsio.data.current_batch()`` gives the batch's (seed,
    epoch, sample indices) (per sample: that sample's), from which gdsio's
    random transforms draw, so a repeated or resumed run is identical. A
    transform drawing from torch's global generator (torchvision's do) gets
    other draws on resume. Without a transform, samples of different shapes
    raise ``ValueError``.

    shuffle/seed/rank/world_size/drop_last: as torch's DistributedSampler
    (each rank a disjoint, equal share, padded by repeating samples, or cut
    when ``drop_last``) under a DataLoader (``drop_last`` also drops each
    rank's last short batch, as DataLoader's does). shuffle: ``False``,
    ``"global"`` (every sample shuffled, each read on its own) or, for tar
    shards, ``"window"`` (gdsio.data.sampler.WindowOrder: shards shuffled and
    read whole, ``shuffle_window`` of them at a time, samples shuffled within
    each window of shards; ranks take contiguous runs of the shards; a pass's
    first batch from shards on a store is read sample by sample meanwhile
    (``stats().early_reads``); on a GPU a local shard's images are read
    member by member into device memory).
    ``True`` is ``"window"`` for shards on an object store, ``"global"``
    otherwise. on_error:
    ``"raise"`` raises ``SampleError`` naming the file; ``"skip"`` logs it to
    the ``gdsio`` logger and yields that batch shorter (never refilled, so
    batches and resumption stay deterministic; a batch left empty is not
    yielded). prefetch: ready batches queued ahead of the consumer;
    prefetch_bytes (an int or "2G"): the bytes those batches may hold (a batch
    larger than that alone still waits when none other does). threads:
    reader threads (default: ``gdsio.current_settings().threads``); where
    each sample is one GET of a URL (an ImageFolder of objects, the global
    order of remote shards), at least ``remote_concurrency``, so that many
    GETs are in flight whatever the CPUs. A pass runs, in all its threads,
    with the ``gdsio.settings`` blocks in force where it starts (``iter()``);
    the shard indexes, with those where the Loader is made.
    cache: a ``gdsio.Cache`` of decoded samples, or a ``Cache(where="disk",
    path=...)`` of the remote objects read (local files for later epochs)
    and of remote tar shards' indexes (gdsio.data.remote_shards).
    image_mode: ``"RGB"``, ``"GRAY"`` or ``"UNCHANGED"``. crop_decode: on
    the CPU, with a transform whose first step is a ``RandomResizedCrop`` (and
    no cache), a JPEG is decoded only for the box the crop keeps (its rows,
    and its iMCU columns), which the loader draws before decoding; the
    batches are the same as with a whole decode (``stats()`` counts these
    decodes as ``libjpeg-turbo-box``). Needs a build that links libjpeg-turbo
    (``gdsio info`` says); False decodes every image whole.

    Epochs: each complete pass advances ``epoch``; ``set_epoch(e)`` sets the
    next pass's epoch (call it each epoch as with DistributedSampler, or let
    it count). One pass runs at a time: a new ``iter()`` stops the previous one.

    DataLoader's own keywords (``num_workers``, ``pin_memory``,
    ``collate_fn``, ``sampler``, ...) raise TypeError saying what gdsio does
    instead (``gdsio.data.loader.DATALOADER_ONLY``).

    What DataLoader code reads is here: ``batch_size``, ``drop_last``,
    ``len(loader)`` (batches per epoch on this rank) and ``dataset`` (a
    ``SampleDataset``: ``len``, ``[i] -> (sample, label)``, ``classes``,
    ``class_to_idx``, ``samples``, ``targets``, as torchvision's ImageFolder).

    >>> loader = gdsio.Loader("data/*.npy", 64, device="cpu", shuffle=True)
    >>> images, labels = next(iter(loader))
    >>> state = loader.state_dict()   # JSON-serialisable; load_state_dict resumes mid-epoch
    """

    def __init__(
        self,
        source: Any,
        batch_size: int,
        *,
        transform: Callable[[Any], Any] | None = None,
        device: Any = "cuda",
        shuffle: bool | str = False,
        shuffle_window: int = 4,
        seed: int = 0,
        drop_last: bool = False,
        rank: int = 0,
        world_size: int = 1,
        prefetch: int = 4,
        prefetch_bytes: int | str | None = None,
        threads: int | None = None,
        on_error: str = "raise",
        cache: Cache | None = None,
        kind: str = "auto",
        record_shape: Any = None,
        record_dtype: Any = None,
        image_mode: str = "RGB",
        crop_decode: bool = True,
        **dataloader_only: Any,
    ) -> None:
        _refuse_dataloader_args(dataloader_only)
        if on_error not in ON_ERROR:
            raise ValueError(f"on_error must be 'raise' or 'skip'; got {on_error!r}")
        if transform is not None and not callable(transform):
            raise TypeError(f"transform must be callable, got {type(transform).__name__}")
        if cache is not None and not isinstance(cache, Cache):
            raise TypeError(f"cache must be a gdsio.Cache, got {type(cache).__name__}")
        if image_mode not in ("RGB", "GRAY", "UNCHANGED"):
            raise ValueError(f"image_mode must be 'RGB', 'GRAY' or 'UNCHANGED'; got {image_mode!r}")
        if not any(shuffle is v or (isinstance(v, str) and shuffle == v) for v in SHUFFLES):
            raise ValueError(f"shuffle must be False, True, 'global' or 'window'; got {shuffle!r}")
        _positive_int("shuffle_window", shuffle_window)
        self.device = resolve_device(device, what=f"cannot load batches into {device}")
        self.table: SampleTable = scan(source, kind=kind, record_shape=record_shape, record_dtype=record_dtype,
                                       cache=cache)
        shards = self.table.shards
        if shuffle is True:  # whole-shard reads where a read costs a request
            shuffle = "window" if shards is not None and any(is_url(p) for p in shards.paths) else "global"
        if shuffle == "window":
            if shards is None:
                raise ValueError("shuffle='window' shuffles tar shards (a .tar source); this source is of "
                                 f"{self.table.kind} files: use shuffle='global' (or True)")
            self.order: ShardedOrder = WindowOrder(
                shards.starts, batch_size=_positive_int("batch_size", batch_size), shuffle_window=shuffle_window,
                seed=seed, rank=rank, world_size=world_size, drop_last=drop_last)
        else:
            self.order = ShardedOrder(len(self.table), batch_size=_positive_int("batch_size", batch_size),
                                      shuffle=shuffle == "global", seed=seed, rank=rank, world_size=world_size,
                                      drop_last=drop_last)
        self.transform = transform
        self.prefetch = _positive_int("prefetch", prefetch)
        self.prefetch_bytes = _byte_budget(prefetch_bytes)
        self.threads = current().threads if threads is None else _positive_int("threads", threads)
        self.on_error = on_error
        self.image_mode = image_mode
        if not isinstance(crop_decode, bool):
            raise TypeError(f"crop_decode must be a bool, got {crop_decode!r}")
        self.crop_decode = crop_decode
        self.cache = cache
        if cache is not None:
            cache.bind(self.device)
        self._meter = Meter()
        self._batch_buffers = BatchBuffers()  # host raw batches, reused across passes
        self._epoch = 0
        self._done = 0  # batches of the epoch consumed so far
        self._resume = False  # the next pass starts at self._done (after load_state_dict)
        self._gen = 0  # bumped by set_epoch/load_state_dict/iter: a stale pass stops updating the position
        self._pass: weakref.ref[Any] | None = None  # the running pass (anything with close())
        self._streams: tuple[Any, ...] | None = None
        self._dataset: SampleDataset | None = None

    # ---- what it is ------------------------------------------------------------

    @property
    def kind(self) -> str:
        return self.table.kind

    @property
    def classes(self) -> list[str]:
        """Class names, index = label (ImageFolder sources); empty otherwise."""
        return self.table.classes

    @property
    def epoch(self) -> int:
        """The epoch of the current pass, or of the next one if none runs."""
        return self._epoch

    @property
    def batch_size(self) -> int:
        """Samples per batch (the last one may be shorter unless ``drop_last``)."""
        return self.order.batch_size

    @property
    def drop_last(self) -> bool:
        """Whether the uneven tail across ranks and the last short batch are dropped."""
        return self.order.drop_last

    @property
    def dataset(self) -> SampleDataset:
        """The samples as a map-style dataset with ImageFolder's attributes
        (``len``, ``[i] -> (sample, label)``, ``classes``, ``class_to_idx``,
        ``samples``, ``targets``); see ``gdsio.data.SampleDataset``."""
        if self._dataset is None:
            self._dataset = SampleDataset(self.table, self.device, self.image_mode)
        return self._dataset

    def __len__(self) -> int:
        """Batches per epoch on this rank: ``ceil(per_rank / batch_size)``, or
        ``per_rank // batch_size`` with ``drop_last`` (DataLoader's rule over
        DistributedSampler's share, ``per_rank``)."""
        return len(self.order)

    def __repr__(self) -> str:
        return (f"Loader({len(self.table)} {self.kind} samples, batch_size={self.batch_size}, device={self.device}, "
                f"rank {self.order.rank}/{self.order.world_size}, {len(self)} batches/epoch, epoch {self._epoch})")

    # ---- position ---------------------------------------------------------------

    def set_epoch(self, epoch: int) -> None:
        """The epoch of the next pass (its shuffle and random transforms)."""
        if not isinstance(epoch, int) or isinstance(epoch, bool) or epoch < 0:
            raise ValueError(f"epoch must be a non-negative int, got {epoch!r}")
        self._gen += 1
        self._epoch, self._done, self._resume = epoch, 0, False

    def state_dict(self) -> dict[str, Any]:
        """Where the loader stands: plain ints and bools (JSON-serialisable).
        Counts batches handed to the consumer, not prefetched ones."""
        o = self.order
        state = {"version": STATE_VERSION, "epoch": self._epoch, "batches_done": self._done,
                 "seed": o.seed, "shuffle": o.shuffle, "num_samples": o.num_samples, "batch_size": o.batch_size,
                 "world_size": o.world_size, "rank": o.rank, "drop_last": o.drop_last}
        if isinstance(o, WindowOrder):  # "shuffle" is "window" then (a bool otherwise)
            state["shuffle_window"] = o.shuffle_window
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resumes: the next pass yields exactly the batches the saved loader had
        not yet handed out, in the same order, with the same random transforms."""
        if not isinstance(state, dict) or state.get("version") != STATE_VERSION:
            raise ValueError(f"not a gdsio.Loader state (version {STATE_VERSION}): {state!r}")
        mine = self.state_dict()
        keys = ("seed", "shuffle", "num_samples", "batch_size", "world_size", "rank", "drop_last", "shuffle_window")
        for key in keys:
            if state.get(key) != mine.get(key):
                raise ValueError(f"state_dict mismatch: {key}={state.get(key)!r} in the state, {mine.get(key)!r} in "
                                 "this loader")
        epoch, done = state.get("epoch"), state.get("batches_done")
        if not isinstance(epoch, int) or not isinstance(done, int) or epoch < 0 or not 0 <= done <= len(self):
            raise ValueError(f"state_dict: bad position epoch={epoch!r}, batches_done={done!r}")
        self._gen += 1
        self._epoch, self._done, self._resume = epoch, done, True
        if done == len(self):  # saved at the very end of an epoch
            self._epoch, self._done = epoch + 1, 0

    def stats(self, reset: bool = False) -> LoaderStats:
        """Throughput, data-wait share, bytes read and the backends that ran
        (see ``gdsio.starvation.LoaderStats``)."""
        s = self._meter.snapshot()
        if self.device.type == "cuda":
            s.clock = "host for waits; CUDA events for gpu_ms"
        if reset:
            self._meter.reset()
        return s

    # ---- iteration --------------------------------------------------------------

    def __iter__(self) -> "_Pass":
        epoch, start, gen = self._begin_pass()
        p = _Pass(self, epoch, start, gen)
        self._pass = weakref.ref(p)
        return p

    def _begin_pass(self) -> tuple[int, int, int]:
        """Stops the previous pass and says where the next one starts: (epoch,
        first batch, generation). gdsio.data.ray's Loader runs its passes from
        here too, so both keep one position and one state_dict."""
        old = self._pass() if self._pass is not None else None
        if old is not None:
            old.close()
        start = self._done if self._resume else 0
        self._gen += 1
        self._done, self._resume = start, False
        return self._epoch, start, self._gen

    def _consumed(self, gen: int, batch_no: int) -> None:
        if gen == self._gen:
            self._done = batch_no + 1

    def _finished(self, gen: int, epoch: int) -> None:
        if gen == self._gen:
            self._epoch, self._done = epoch + 1, 0

    def _plan(self, epoch: int, start: int) -> PassPlan:
        """The frozen description of one pass that the producer runs from."""
        return PassPlan(
            table=self.table, order=self.order, epoch=epoch, start=start, transform=self.transform,
            device=self.device, streams=self._cuda_streams() if self.device.type == "cuda" else None,
            threads=self._reader_threads(), on_error=self.on_error, mode=self.image_mode, cache=self.cache,
            meter=self._meter,
            buffers=self._batch_buffers, crop_decode=self.crop_decode,
        )

    def _reader_threads(self) -> int:
        """A pass's reader threads: ``threads``; at least ``remote_concurrency``
        where samples are read one GET each from URLs (an ImageFolder of
        objects, the global order of remote shards), so that the GETs in
        flight are set by the remote setting, not by the CPUs: such a thread
        waits on its GET most of its time. The shard-window order reads its
        units on threads of its own (gdsio.data.remote_shards.ShardWindows)."""
        one_get_each = self.table.remote and not isinstance(self.order, WindowOrder)  # (a window order: shards)
        return max(self.threads, current().remote_concurrency) if one_get_each else self.threads

    def _cuda_streams(self) -> tuple[Any, Any, Any]:
        """(read stream, work stream, decode stream), made once: the reads of
        batch k+1, the decode of batch k and the transform of batch k-1 each
        queue on their own stream."""
        if self._streams is None:
            self._streams = tuple(torch.cuda.Stream(self.device) for _ in range(3))
        return self._streams


# ---- package-internal: gdsio.data.ray.Loader runs its passes on a gdsio.Loader -----------------


def begin_pass(loader: Loader) -> tuple[int, int, int]:
    """Package-internal (gdsio.data.ray.loader): stops `loader`'s running pass
    and says where the next one starts: (epoch, first batch, generation)."""
    return loader._begin_pass()


def track_pass(loader: Loader, p: Any) -> None:
    """Package-internal (gdsio.data.ray.loader): `p` (anything with close()) is
    `loader`'s running pass, which the next pass of either loader stops."""
    loader._pass = weakref.ref(p)


def running_pass(loader: Loader) -> Any:
    """Package-internal (gdsio.data.ray.loader): `loader`'s running pass, or None."""
    return loader._pass() if loader._pass is not None else None


def consumed(loader: Loader, gen: int, batch_no: int) -> None:
    """Package-internal (gdsio.data.ray.passes): the consumer has had batch
    `batch_no` of pass `gen` (a stale pass changes nothing)."""
    loader._consumed(gen, batch_no)


def finished(loader: Loader, gen: int, epoch: int) -> None:
    """Package-internal (gdsio.data.ray.passes): pass `gen` handed out all of `epoch`."""
    loader._finished(gen, epoch)


def pass_plan(loader: Loader, epoch: int, start: int) -> PassPlan:
    """Package-internal (gdsio.data.ray.passes): the frozen description of one
    pass of `loader` from batch `start` of `epoch`, for a Producer."""
    return loader._plan(epoch, start)


def _byte_budget(value: int | str | None) -> int | None:
    if value is None:
        return None
    n = parse_bytes(value) if isinstance(value, str) else value
    if isinstance(n, bool) or not isinstance(n, int) or n <= 0:
        raise ValueError(f"prefetch_bytes must be a positive byte count (e.g. 2000000000 or '2G'); got {value!r}")
    return n


class _Pass:
    """One pass over the data: the iterator ``iter(loader)`` returns. Its
    threads stop when it ends, on ``close()``, on any exception in ``next()``
    (KeyboardInterrupt included) and when it is garbage collected."""

    def __init__(self, loader: Loader, epoch: int, start: int, gen: int) -> None:
        self._loader = loader
        self._epoch = epoch
        self._gen = gen
        self._queue: queue.Queue[ReadyBatch | EmptyBatch | Failed | End] = queue.Queue(maxsize=loader.prefetch)
        self._budget = ByteBudget(loader.prefetch_bytes)
        self._stop = threading.Event()
        self._closed = False
        self._last: float | None = None
        loader._meter.begin_pass(epoch, start)
        # The producer holds the loader's settings, the queue and the flag, never
        # this object: dropping the iterator is what stops it.
        producer = Producer(loader._plan(epoch, start), self._queue, self._stop, self._budget)
        self._thread = threading.Thread(target=producer.run, name="gdsio-loader", daemon=True)
        self._thread.start()
        track_threads(self._stop, self._thread)  # stopped and joined at exit if still running

    def __iter__(self) -> "_Pass":
        return self

    def __next__(self) -> tuple[Any, Any]:
        if self._closed:
            raise StopIteration
        t0 = time.perf_counter()
        try:
            while True:
                item = self._get()
                if isinstance(item, ReadyBatch):
                    break
                if isinstance(item, EmptyBatch):  # every sample of that batch was skipped
                    self._loader._consumed(self._gen, item.batch_no)
                    continue
                if isinstance(item, End):
                    self._loader._finished(self._gen, self._epoch)
                    self.close()
                    raise StopIteration
                raise item.error  # Failed: an error from the loader's threads, with its traceback
        except StopIteration:
            raise
        except BaseException:
            self.close()
            raise
        batch_no, images, labels, ready = item.batch_no, item.images, item.labels, item.ready
        self._budget.release(batch_nbytes(images, labels))
        if ready is not None:  # CUDA: order the consumer's stream after the batch, no host sync
            cur = torch.cuda.current_stream(self._loader.device)
            cur.wait_event(ready)
            for t in (images, labels):
                if isinstance(t, torch.Tensor) and t.is_cuda:  # a user transform may return anything
                    t.record_stream(cur)
        t1 = time.perf_counter()
        self._loader._meter.consumed(t1 - t0, t1 - (self._last if self._last is not None else t0), int(images.shape[0]))
        self._last = t1
        self._loader._consumed(self._gen, batch_no)
        return images, labels

    def _get(self) -> ReadyBatch | EmptyBatch | Failed | End:
        while True:
            try:
                return self._queue.get(timeout=POLL_S)
            except queue.Empty:
                if not self._thread.is_alive():
                    try:
                        return self._queue.get_nowait()
                    except queue.Empty:
                        raise RuntimeError("gdsio.Loader: the loader thread ended without a result") from None

    def close(self, timeout: float = 60.0) -> None:
        """Stops the pass's threads and waits for them (reads in flight finish)."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        if in_loader_thread():
            return  # called from the loader's own threads (a GC there): they exit by the flag
        self._thread.join(timeout=timeout)
        if self._thread.is_alive():
            log.warning("gdsio.Loader: the loader thread did not stop within %g s (a read is stuck?)", timeout)
        while True:  # drop ready batches now rather than with the queue
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break

    def __del__(self) -> None:
        # A finalizer never joins: set the flag, and the pass's threads exit by it.
        self._closed = True
        stop = getattr(self, "_stop", None)  # None: __init__ failed before making it
        if stop is not None:
            stop.set()
