"""Decoded samples kept in memory, so later epochs skip the disk and the decoder.

The cache holds samples as they come out of the decoder, before any random
augmentation, so every epoch still draws fresh crops and flips. It admits
samples until its byte budget is spent and then evicts nothing: under the
shuffled, uniform access of training, any eviction policy keeps about the
same hit rate (budget / dataset) while paying for churn; keeping the first
samples is free. Storage is a few large slabs with a bump pointer, so a pinned
cache costs a handful of ``cudaHostAlloc`` calls, not one per image, and the
memory in use never grows past the budget.

>>> cache = gdsio.Cache(bytes="24G", where="cuda")
>>> loader = gdsio.Loader("train", 256, cache=cache, device="cuda")
>>> for epoch in range(3): ...          # epochs 1 and 2 read nothing if it fits
>>> loader.stats().passes[1]["bytes_read"]
0
"""

from __future__ import annotations

import logging
import threading
from typing import Any, ClassVar, Hashable

import torch

from ..config import parse_bytes
from ..device import require_cuda
from ..io.buffers import host_empty

log = logging.getLogger("gdsio")

__all__ = ["Cache", "parse_budget"]

_WHERE = ("cuda", "pinned", "cpu")
_SLAB = 64 << 20  # bytes per slab; a larger sample gets a slab of its own
_ALIGN = 256  # keeps every dtype's views aligned and matches cudaMalloc's alignment


def parse_budget(bytes: int | str) -> int:
    """A cache's byte budget: a non-negative int, or text like ``"8G"``.

    Raises:
        ValueError: naming ``bytes``, for anything else.
    """
    budget = parse_bytes(bytes) if isinstance(bytes, str) else bytes
    if not isinstance(budget, int) or isinstance(budget, bool) or budget < 0:
        raise ValueError(f"bytes must be a non-negative int or text like '8G'; got {bytes!r}")
    return budget


def _require_cuda(where: str) -> None:
    # 'pinned' needs CUDA too (page-locked memory is registered with the driver).
    index = int(where[5:]) if where.startswith("cuda:") else None
    require_cuda(f"Cache(where={where!r}) needs CUDA", index, arg="where")


class Cache:
    """Up to `bytes` (an int, or text like ``"8G"``) of decoded samples in
    `where`: ``"cuda"`` (device memory; ``"cuda:N"`` for a given device),
    ``"pinned"`` (page-locked host memory, copied to the GPU on use) or
    ``"cpu"``. ``None`` picks the loader's device. Thread-safe; one cache may
    serve several loaders over the same files.

    ``Cache(where="disk", path=folder, bytes=...)`` is another kind, a
    gdsio.data.disk_cache.DiskCache (a subclass): the s3:// and http(s)://
    objects a loader reads, kept whole as local files under `folder`."""

    # where= -> the subclass that serves it, declared by the subclass (class DiskCache(Cache,
    # where="disk")): Cache(...) stays the one constructor users call, and this module needs
    # no import of that one (which imports this).
    _kinds: ClassVar[dict[str, type[Cache]]] = {}

    def __init_subclass__(cls, where: str | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if where is not None:
            Cache._kinds[where] = cls

    def __new__(cls, bytes: int | str = 0, where: str | None = None, path: Any = None) -> Cache:
        kind = Cache._kinds.get(where) if cls is Cache and isinstance(where, str) else None
        return object.__new__(kind if kind is not None else cls)

    def __init__(self, bytes: int | str, where: str | None = None, path: Any = None) -> None:
        if path is not None:
            raise ValueError(f"path= is for Cache(where='disk'); a Cache(where={where!r}) holds samples in memory")
        budget = parse_budget(bytes)
        if where is not None and (not isinstance(where, str) or where.split(":")[0] not in _WHERE
                                  or (":" in where and not (where.startswith("cuda:") and where[5:].isdigit()))):
            raise ValueError(f"where must be 'cuda', 'cuda:N', 'pinned', 'cpu' or 'disk'; got {where!r}")
        if where is not None and where != "cpu":
            _require_cuda(where)  # at the line that asked for it, not later in the Loader
        self.budget = budget
        self.where = where
        self._lock = threading.Lock()
        self._items: dict[Hashable, tuple[Any, Any]] = {}  # key -> (tensor, CUDA event or None)
        self._slabs: list[Any] = []
        self._used = 0  # bytes of slabs allocated: what counts against the budget
        self._fill = 0  # bump pointer in the last slab
        self.hits = self.misses = self.rejected = 0

    def bind(self, device: Any) -> None:
        """Called by the loader: picks `where` if unset and checks it can serve `device`."""
        dev = torch.device(device)
        with self._lock:
            if self.where is None:
                self.where = "cpu" if dev.type == "cpu" else str(dev)
        if self.where != "cpu":
            _require_cuda(self.where)
        if self.where.startswith("cuda") and dev.type == "cpu":
            raise ValueError(f"a Cache(where={self.where!r}) cannot serve a loader on the CPU; use where='cpu'")
        if self.where == "cpu" and dev.type == "cuda":
            log.warning("gdsio.Cache(where='cpu') for a loader on %s: every copy in and out of pageable memory "
                        "blocks the loader thread; where='pinned' keeps them asynchronous", dev)

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._items

    @property
    def bytes_used(self) -> int:
        return self._used

    def get(self, key: Hashable) -> Any:
        """The cached tensor (a view into the cache: do not modify it) or None.
        A sample still being copied in on a GPU stream is waited for here."""
        found = self.lookup(key)
        if found is None:
            return None
        tensor, ready = found
        if ready is not None:
            ready.synchronize()
        return tensor

    def lookup(self, key: Hashable) -> tuple[Any, Any] | None:
        """(tensor, CUDA event or None) or None. Before using the tensor on a
        stream, make that stream wait for the event (the copy into the cache
        may still be queued); the loader does."""
        with self._lock:
            item = self._items.get(key)
            if item is None:
                self.misses += 1
                return None
            self.hits += 1
            tensor, ready = item
            if ready is not None and ready.query():
                self._items[key] = (tensor, None)  # done: forget the event
                ready = None
            return tensor, ready

    def put(self, key: Hashable, tensor: Any) -> bool:
        """Copies `tensor` in if it fits the budget; False when it does not."""
        return self.put_many([key], [tensor])[0]

    def put_many(self, keys: list[Hashable], tensors: list[Any]) -> list[bool]:
        """Copies each tensor that fits the budget, on the current stream of
        its device; one CUDA event marks them all complete."""
        placed = []
        seen: set[Hashable] = set()  # a key twice in one call is stored once
        for key, tensor in zip(keys, tensors):
            nbytes = tensor.numel() * tensor.element_size()
            with self._lock:
                if key in self._items or key in seen:
                    continue
                seen.add(key)
                dst = self._alloc(nbytes)
                if dst is None:
                    self.rejected += 1
                    continue
            view = dst.view(tensor.dtype).view(tensor.shape) if nbytes else torch.empty_like(tensor, device=dst.device)
            view.copy_(tensor, non_blocking=True)
            placed.append((key, view, tensor))
        ready = None
        cuda = [t for _, _, t in placed if t.is_cuda] or [v for _, v, _ in placed if v.is_cuda]
        if cuda:
            # Copies queued on a stream: readers on other streams wait for this event.
            ready = torch.cuda.Event()
            ready.record(torch.cuda.current_stream(cuda[0].device))
        with self._lock:
            for key, view, _ in placed:
                # Published once the copy is queued (host copies are done); a key another
                # loader sharing this cache stored meanwhile keeps its first copy.
                self._items.setdefault(key, (view, ready))
            return [k in self._items for k in keys]

    def _alloc(self, nbytes: int) -> Any:
        size = -(-nbytes // _ALIGN) * _ALIGN
        if self._slabs and self._fill + size <= self._slabs[-1].numel():
            out = self._slabs[-1][self._fill : self._fill + nbytes]
            self._fill += size
            return out
        slab_bytes = max(_SLAB, size)
        if self._used + slab_bytes > self.budget:
            slab_bytes = self.budget - self._used  # a last, smaller slab uses up the budget
            if slab_bytes < size:
                return None
        self._slabs.append(self._new_slab(slab_bytes))
        self._used += slab_bytes
        self._fill = size
        return self._slabs[-1][:nbytes]

    def _new_slab(self, nbytes: int) -> Any:
        if self.where == "pinned":
            return torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
        if (self.where or "cpu") == "cpu":
            return host_empty(nbytes)  # huge pages where the setting allows: the slab fills once per epoch
        return torch.empty(nbytes, dtype=torch.uint8, device=self.where)

    def clear(self) -> None:
        """Drops every sample and frees the memory (pinned slabs too: torch's
        caching host allocator is asked to give its free blocks back)."""
        with self._lock:
            self._items.clear()
            self._slabs.clear()
            self._used = self._fill = 0
        if self.where == "pinned":
            empty = getattr(torch._C, "_host_emptyCache", None)
            if empty is not None:
                empty()

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {"samples": len(self._items), "bytes_used": self._used, "budget": self.budget,
                    "where": self.where, "hits": self.hits, "misses": self.misses, "rejected": self.rejected}

    def __repr__(self) -> str:
        return f"Cache(bytes={self.budget}, where={self.where!r}, samples={len(self._items)}, used={self._used})"
