"""gdsio.data.ray: decode and augment on CPU-only nodes with Ray Data, train on the GPU nodes.

Where a GPU node's own CPUs and GPU cannot keep up with its step, CPU-only
nodes of a Ray cluster make part of the batches, and the GPU node's loader
merges both streams in the epoch's order:

    this node:  gdsio.Loader's own pipeline (reads, decode and transform on the
                loader's device) makes the batches it keeps        --+
    CPU nodes:  Ray Data, map_batches on an actor pool placed by    +--> (images, labels)
                resources or node labels, each actor running        |    in batch order
                gdsio's CPU path (gdsio.Loader's producer, cpu)   --+

A batch is the same whichever side makes it: randomness comes from (seed,
epoch, sample index), so a remote batch is bit-identical to what
``gdsio.Loader(..., device="cpu")`` gives for it. ``local_share`` is the
fraction this node makes; ``"auto"`` steers it by where the consumer waited.

Needs ``pip install "gdsio[ray]"`` and a connected cluster (``ray.init(address=...)``);
``import gdsio`` and ``import gdsio.data`` never import ray. The source's
paths must be readable at the same names on the CPU nodes (a shared file
system), and the transform must pickle.

>>> import ray, gdsio.data.ray as gray
>>> ray.init(address="auto")
>>> loader = gray.Loader("imagenet/train", 256, device="cuda", transform=train_tf, shuffle=True,
...                      local_share="auto", resources={"gdsio-role": "preprocess"})
>>> for images, labels in loader: ...
>>> loader.stats().path, loader.stats().remote_samples, loader.stats().local_share

How many CPU nodes to add: ``offload_plan`` (``gdsio offload-plan``), from the
measured cost per image, the GPU's step rate and the instances' prices.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import queue
import threading
import time
import weakref
from typing import Any, Callable, Iterator

import numpy as np

from .flow import POLL_S, ByteBudget, batch_nbytes
from .loader import Loader as _GdsioLoader
from .meter import LoaderStats, Meter
from .offload_plan import OffloadPlan, offload_plan
from .producer import PassPlan, Producer
from .sampler import ShardedOrder

__all__ = ["EXTRA", "Loader", "OffloadPlan", "OffloadStats", "dataset", "offload_plan"]

log = logging.getLogger("gdsio")

EXTRA = 'pip install "gdsio[ray]"'
AUTO_START = 0.5  # local_share="auto" starts here, then follows the waits
AUTO_STEP = 0.05  # how far one waited-for batch moves the share
AUTO_WAITED = 0.1  # a batch "was waited for" when the wait is this share of the step
HEALTH_EVERY_S = 2.0  # while waiting for a remote batch, how often the nodes are looked at


def _ray() -> Any:
    """The ray module, or an ImportError that names the extra to install."""
    try:
        import ray
        import ray.data  # noqa: F401 - the extra is ray[data]; a bare ray lacks it
    except ImportError as e:
        raise ImportError(f"gdsio.data.ray needs Ray Data: {EXTRA} (ray[data] and pydantic); {e}") from e
    return ray


def _connected() -> Any:
    ray = _ray()
    if not ray.is_initialized():
        raise RuntimeError(
            "gdsio.data.ray: connect to the Ray cluster first, e.g. ray.init(address='auto') on a node of it "
            "(gdsio does not start a cluster of its own)"
        )
    return ray


# ---- where the work runs: custom resources or node labels -----------------------------


@dataclasses.dataclass(frozen=True)
class _Placement:
    resources: dict[str, float]  # custom resources each actor asks for
    labels: dict[str, str]  # node labels each actor's node must carry

    @classmethod
    def parse(cls, resources: Any) -> "_Placement":
        if resources is None:
            return cls({}, {})
        if not isinstance(resources, dict):
            raise TypeError("resources must be a dict: {name: amount} for custom resources, {label: value} for "
                            f"node labels (e.g. {{'gdsio-role': 'preprocess'}}); got {type(resources).__name__}")
        res: dict[str, float] = {}
        labels: dict[str, str] = {}
        for k, v in resources.items():
            if not isinstance(k, str) or not k:
                raise TypeError(f"resources: keys are resource or label names (str), got {k!r}")
            if isinstance(v, str):
                labels[k] = v
            elif isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0:
                res[k] = float(v)
            else:
                raise ValueError(f"resources[{k!r}] must be a positive amount (a custom resource) or a str "
                                 f"(a node label's value); got {v!r}")
        return cls(res, labels)

    def remote_args(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.resources:
            out["resources"] = dict(self.resources)
        if self.labels:
            out["label_selector"] = dict(self.labels)
        return out

    def matches(self, node: dict[str, Any]) -> bool:
        have = node.get("Resources", {})
        labels = node.get("Labels", {}) or {}
        return (all(have.get(k, 0) >= v for k, v in self.resources.items())
                and all(labels.get(k) == v for k, v in self.labels.items()))

    def slots(self, node: dict[str, Any], cpus: float) -> int:
        """How many actors of `cpus` CPUs each the node can hold."""
        have = node.get("Resources", {})
        n = int(have.get("CPU", 0) // cpus)
        for k, v in self.resources.items():
            n = min(n, int(have.get(k, 0) // v))
        return n

    def __str__(self) -> str:
        parts = [f"{k}={v:g}" for k, v in self.resources.items()] + [f"label {k}={v}" for k, v in self.labels.items()]
        return ", ".join(parts) or "any node"


def _nodes(placement: _Placement) -> list[dict[str, Any]]:
    """The live nodes the placement selects."""
    return [n for n in _ray().nodes() if n.get("Alive") and placement.matches(n)]


def _describe(node: dict[str, Any]) -> str:
    return f"node {node['NodeID']} ({node.get('NodeManagerAddress', '?')})"


# ---- the remote side: gdsio's CPU path inside a Ray Data actor ---------------------------


@dataclasses.dataclass(frozen=True)
class _Spec:
    """What an actor needs to make batches: pickled once into each actor."""

    table: Any  # SampleTable
    num_samples: int
    batch_size: int
    shuffle: bool
    seed: int
    rank: int
    world_size: int
    drop_last: bool
    epoch: int
    transform: Any
    mode: str
    on_error: str
    threads: int
    per_batch: bool  # Loader: rows name loader batches; dataset(): rows are sample positions
    start: int = 0  # Loader: batches before it are not made (a resumed pass)
    board: Any = None  # local_share="auto": the actor handle that says who makes each batch
    pass_id: int = 0

    def order(self) -> ShardedOrder:
        return ShardedOrder(self.num_samples, batch_size=self.batch_size, shuffle=self.shuffle, seed=self.seed,
                            rank=self.rank, world_size=self.world_size, drop_last=self.drop_last)


class _Given:
    """An order for the producer: exactly these numbered batches."""

    def __init__(self, batches: list[tuple[int, np.ndarray]], seed: int) -> None:
        self._batches = batches
        self.seed = seed

    def numbered_batches(self, epoch: int, start: int = 0) -> Iterator[tuple[int, np.ndarray]]:
        return iter(self._batches)


def _as_array(images: Any) -> np.ndarray:
    import torch

    if not isinstance(images, torch.Tensor):
        raise TypeError(f"gdsio.data.ray: the transform must return a tensor batch; got {type(images).__name__}")
    if images.dtype == torch.bfloat16:  # numpy, and so Arrow and Ray Data, have no bfloat16
        raise TypeError("gdsio.data.ray: a bfloat16 batch cannot cross Ray Data (numpy has no bfloat16); end the "
                        "transform with ToDtype(torch.float16) or torch.float32 and cast on the GPU")
    return np.ascontiguousarray(images.contiguous().numpy())


class _Maker:
    """The UDF of the actor pool. Makes batches with gdsio.Loader's own
    producer on the CPU, so a batch is what ``gdsio.Loader(device="cpu")``
    makes for it, bit for bit."""

    def __init__(self, spec: _Spec) -> None:
        import ray

        self.spec = spec
        self.node = ray.get_runtime_context().get_node_id()
        self.order = spec.order()
        self.indices = self.order.indices(spec.epoch)

    def __call__(self, batch: dict[str, np.ndarray]) -> Iterator[dict[str, np.ndarray]]:
        spec = self.spec
        if not spec.per_batch:  # dataset(): the rows' positions in the epoch's order, made as one batch
            pos = np.asarray(batch["id"], np.int64)
            for _, out in self._make([(0, self.indices[pos])]):
                yield {k: out[k] for k in ("index", "label", "image")}
            return
        for k in np.asarray(batch["batch_no"]).tolist():
            if k < spec.start:
                continue
            if spec.board is not None:
                import ray

                if ray.get(spec.board.owner.remote(spec.pass_id, k)) != "remote":
                    continue  # this node's loader makes it (or the pass is over)
            yield from (out for _, out in self._make([(k, self.order.batch(spec.epoch, k, self.indices))]))

    def _make(self, batches: list[tuple[int, np.ndarray]]) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
        import torch

        spec = self.spec
        q: queue.Queue[Any] = queue.Queue()
        kept: dict[int, np.ndarray] = {}
        plan = PassPlan(table=spec.table, order=_Given(batches, spec.seed), epoch=spec.epoch, start=0,
                        transform=spec.transform, device=torch.device("cpu"), streams=None, threads=spec.threads,
                        on_error=spec.on_error, mode=spec.mode, cache=None, meter=Meter())
        t0 = time.perf_counter()
        Producer(plan, q, threading.Event(), None, kept=kept).run()
        seconds = (time.perf_counter() - t0) / max(1, len(batches))
        while True:
            item = q.get_nowait()
            if item[0] == "error":
                raise item[1]
            if item[0] == "end":
                return
            if item[0] == "empty":
                continue
            _, k, images, labels, _ = item
            n = int(images.shape[0])
            yield k, {
                "batch_no": np.full(n, k, np.int64), "count": np.full(n, n, np.int64),
                "index": np.asarray(kept[k], np.int64), "label": labels.numpy().astype(np.int64, copy=False),
                "image": _as_array(images), "node": np.full(n, self.node), "seconds": np.full(n, seconds),
            }


def _actors(placement: _Placement, cpus: float, actors: Any) -> int:
    if actors is not None:
        if not isinstance(actors, int) or isinstance(actors, bool) or actors < 1:
            raise ValueError(f"actors must be a positive int, got {actors!r}")
        return actors
    n = sum(placement.slots(node, cpus) for node in _nodes(placement))
    if n < 1:
        nodes = [f"{_describe(x)}: {x.get('Resources')}, labels {x.get('Labels')}" for x in _ray().nodes() if x.get("Alive")]
        raise ValueError(f"resources: no live node of the cluster can hold an actor of {cpus:g} CPU(s) with {placement}; "
                         "the nodes are:\n  " + "\n  ".join(nodes))
    return n


def _pipeline(rows: Any, spec: _Spec, placement: _Placement, *, actors: int, cpus: float, batch_size: int) -> Any:
    ray = _ray()
    ds = rows.map_batches(
        _Maker, batch_size=batch_size, fn_constructor_args=(spec,),
        compute=ray.data.ActorPoolStrategy(size=actors), num_cpus=cpus, **placement.remote_args(),
    )
    # In the epoch's order: the loader merges two ordered streams, and a
    # dataset's rows come as gdsio.Loader's would. The dataset's own context (a copy).
    ds.context.execution_options.preserve_order = True
    # A bad sample raises gdsio's SampleError naming the file, as gdsio.Loader does, not Ray's wrapper of it.
    ds.context.raise_original_map_exception = True
    return ds


def _check_cpus(cpus: Any) -> float:
    if isinstance(cpus, bool) or not isinstance(cpus, (int, float)) or cpus <= 0:
        raise ValueError(f"cpus_per_actor must be a positive number, got {cpus!r}")
    return float(cpus)


def dataset(
    source: Any,
    *,
    transform: Callable[[Any], Any] | None = None,
    seed: int = 0,
    epoch: int = 0,
    shuffle: bool = False,
    kind: str = "auto",
    on_error: str = "raise",
    resources: dict[str, Any] | None = None,
    batch_size: int = 32,
    actors: int | None = None,
    cpus_per_actor: float = 1,
    image_mode: str = "RGB",
    record_shape: Any = None,
    record_dtype: Any = None,
) -> Any:
    """The samples of `source`, decoded and transformed by gdsio's CPU path
    on the nodes `resources` selects, as a ``ray.data.Dataset``.

    Rows, in the epoch's order (shuffled by (seed, epoch) when `shuffle`, as
    ``gdsio.Loader``): ``"index"`` (int64, the sample's index in the source's
    order), ``"label"`` (int64, -1 where the source has none) and ``"image"``
    (the transformed sample: uint8 ``(C, H, W)`` without a transform, or the
    transform's shape and dtype). A sample equals, bit for bit, what
    ``gdsio.Loader(source, ..., device="cpu", transform=transform,
    seed=seed)`` gives for that index in that epoch, for transforms whose
    output for a sample depends on that sample alone (gdsio's do:
    randomness from (seed, epoch, index)).

    Args:
        source, kind, image_mode, record_shape, record_dtype, transform,
            on_error: as ``gdsio.Loader`` (``on_error="skip"`` leaves the
            sample's row out).
        seed, epoch, shuffle: the order and the random draws.
        resources: where the actors run: ``{name: amount}`` asks each actor
            for custom resources (``{"preprocess": 0.01}``), ``{label:
            "value"}`` selects nodes by label (``{"gdsio-role":
            "preprocess"}``); both may be mixed. None: any node.
        batch_size: samples transformed together by one actor call.
        actors: the actor pool's size (default: as many as the selected
            nodes hold, `cpus_per_actor` CPUs each).
        cpus_per_actor: CPUs each actor asks for (its reader threads).

    Returns:
        ray.data.Dataset: lazy; run by iterating it (``iter_batches``,
        ``iter_torch_batches``, ``take_all``).

    Raises:
        ImportError: ray[data] is not installed (names ``gdsio[ray]``).
        RuntimeError: not connected to a Ray cluster.
        ValueError, TypeError: a bad argument (named), or no live node matches `resources`.

    Example:
        >>> ds = gdsio.data.ray.dataset("train", transform=tf, shuffle=True, epoch=3,
        ...                             resources={"gdsio-role": "preprocess"})
        >>> for batch in ds.iter_batches(batch_size=256): ...   # batch["image"], batch["label"]
    """
    ray = _connected()
    # gdsio.Loader checks the arguments and lists the samples; it starts no thread until iterated.
    ref = _GdsioLoader(source, batch_size, transform=transform, device="cpu", shuffle=shuffle, seed=seed,
                       on_error=on_error, kind=kind, image_mode=image_mode, record_shape=record_shape,
                       record_dtype=record_dtype)
    if not isinstance(epoch, int) or isinstance(epoch, bool) or epoch < 0:
        raise ValueError(f"epoch must be a non-negative int, got {epoch!r}")
    cpus = _check_cpus(cpus_per_actor)
    placement = _Placement.parse(resources)
    o = ref.order
    spec = _Spec(table=ref.table, num_samples=o.num_samples, batch_size=o.batch_size, shuffle=o.shuffle, seed=o.seed,
                 rank=0, world_size=1, drop_last=False, epoch=epoch, transform=transform, mode=image_mode,
                 on_error=on_error, threads=max(1, int(cpus)), per_batch=False)
    rows = ray.data.range(len(ref.table))
    return _pipeline(rows, spec, placement, actors=_actors(placement, cpus, actors), cpus=cpus, batch_size=batch_size)


# ---- the consumer side ------------------------------------------------------------------


@dataclasses.dataclass
class OffloadStats(LoaderStats):
    """``LoaderStats`` of the merged stream, and which side made what.

    local_samples / remote_samples: samples this node made / the CPU nodes
    made (handed to the consumer). remote_nodes: samples per Ray node id.
    local_share: the share this node makes now (the last value "auto" chose).
    path: "local", "ray" or "local+ray", from the counts.
    remote_ms_per_sample: the actors' mean time per sample (read, decode,
    transform on ``cpus_per_actor`` cores): the cost ``gdsio offload-plan`` takes.
    """

    local_samples: int = 0
    remote_samples: int = 0
    remote_nodes: dict[str, int] = dataclasses.field(default_factory=dict)
    local_share: float = 1.0
    remote_ms_per_sample: float | None = None

    @property
    def path(self) -> str:
        """Which path made the samples handed out: ``"local"`` (this node
        only), ``"ray"`` (the CPU nodes only) or ``"local+ray"``."""
        if self.remote_samples == 0:
            return "local"
        return "ray" if self.local_samples == 0 else "local+ray"

    def __str__(self) -> str:
        made = (f"; path {self.path}: made here {self.local_samples}, on CPU nodes {self.remote_samples} "
                f"({len(self.remote_nodes)} node(s)), local_share {self.local_share:.2f}")
        return super().__str__() + made


class _Sides:
    """Counts of which side made what (thread-safe, reset by stats(reset=True))."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        with self._lock:
            self.local = 0
            self.remote = 0
            self.nodes: dict[str, int] = {}
            self.remote_s = 0.0

    def add(self, side: str, samples: int, node: str | None = None, seconds: float = 0.0) -> None:
        with self._lock:
            if side == "local":
                self.local += samples
            else:
                self.remote += samples
                self.remote_s += seconds
                if node is not None:
                    self.nodes[node] = self.nodes.get(node, 0) + samples


class _BoardImpl:
    """local_share="auto": who makes each batch, decided once, at the first
    question from either side, from the share at that moment (a Ray actor on
    the trainer's node). Retried remote tasks get the same answer, so a batch
    is never made by both."""

    def __init__(self) -> None:
        self.pass_id = -1
        self.share = AUTO_START
        self.credit = 0.0
        self.owners: dict[int, str] = {}

    def begin(self, pass_id: int, share: float) -> None:
        self.pass_id, self.share, self.credit, self.owners = pass_id, share, 0.0, {}

    def set_share(self, pass_id: int, share: float) -> None:
        if pass_id == self.pass_id:
            self.share = share

    def owner(self, pass_id: int, batch_no: int) -> str:
        if pass_id != self.pass_id:
            return "stale"
        who = self.owners.get(batch_no)
        if who is None:
            self.credit += self.share
            who = "local" if self.credit >= 1.0 - 1e-9 else "remote"
            if who == "local":
                self.credit -= 1.0
            self.owners[batch_no] = who
        return who


def _fixed_local(share: float, k: int) -> bool:
    """Fixed share: batch k is made here for an even spread of ``share`` of the batches."""
    return math.floor((k + 1) * share + 1e-9) > math.floor(k * share + 1e-9)


class _LocalOrder:
    """The local producer's order: the rank's batches that this node makes."""

    def __init__(self, order: ShardedOrder, mine: Callable[[int], bool]) -> None:
        self._order, self._mine = order, mine
        self.seed = order.seed

    def numbered_batches(self, epoch: int, start: int = 0) -> Iterator[tuple[int, np.ndarray]]:
        for k, idx in self._order.numbered_batches(epoch, start):
            if self._mine(k):
                yield k, idx


def _parse_share(v: Any) -> float | str:
    if v == "auto" and isinstance(v, str):
        return "auto"
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 <= v <= 1.0:
        raise ValueError(f"local_share must be 'auto' or a fraction in [0, 1]; got {v!r}")
    return float(v)


class Loader:
    """Batches of `source` as ``(images, labels)``, made partly on this node
    (gdsio.Loader's pipeline on `device`) and partly on the Ray cluster's CPU
    nodes (Ray Data actors running gdsio's CPU path), merged in batch order.

    Same batches, order, sharding and state as ``gdsio.Loader`` with the same
    arguments: ``len``, ``set_epoch``, ``state_dict`` / ``load_state_dict``
    (states move between the two loaders), ``dataset``, ``classes``. Remote
    batches are copied to `device` on the consumer's current CUDA stream
    (through pinned memory), or handed over on the CPU.

    Args:
        source, batch_size, device, transform, seed, shuffle, rank,
            world_size, drop_last, prefetch, prefetch_bytes, threads,
            on_error, kind, record_shape, record_dtype, image_mode: as
            ``gdsio.Loader`` (shuffle defaults to True here).
        local_share: the fraction of the batches this node makes (0.0: all
            on the CPU nodes, 1.0: a plain gdsio.Loader, Ray unused), or
            ``"auto"``: starts at 0.5 and moves by where the consumer waited
            (a batch made here it waited for: more to the CPU nodes; one made
            there: more here; each side's first batch of a pass, its
            start-up, does not count).
        resources: which nodes run the actors (see ``dataset``).
        actors, cpus_per_actor: the actor pool (see ``dataset``).
        timeout: seconds the consumer waits for one batch before raising
            (a lost CPU node with no live node to replace it raises sooner,
            naming the node).

    Raises:
        ImportError: ray[data] is not installed (names ``gdsio[ray]``).
        RuntimeError: not connected to a Ray cluster (unless local_share=1.0).
        ValueError, TypeError: bad arguments, named; no live node matches `resources`.

    Example:
        >>> ray.init(address="auto")
        >>> loader = gdsio.data.ray.Loader("train", 256, device="cuda", transform=tf,
        ...                                local_share="auto", resources={"gdsio-role": "preprocess"})
        >>> for images, labels in loader: ...
        >>> s = loader.stats(); s.local_samples, s.remote_samples, s.data_wait_share
    """

    def __init__(
        self,
        source: Any,
        batch_size: int,
        *,
        device: Any = "cuda",
        transform: Callable[[Any], Any] | None = None,
        seed: int = 0,
        shuffle: bool = True,
        rank: int = 0,
        world_size: int = 1,
        local_share: float | str = "auto",
        resources: dict[str, Any] | None = None,
        actors: int | None = None,
        cpus_per_actor: float = 1,
        drop_last: bool = False,
        prefetch: int = 4,
        prefetch_bytes: int | str | None = None,
        threads: int | None = None,
        on_error: str = "raise",
        kind: str = "auto",
        record_shape: Any = None,
        record_dtype: Any = None,
        image_mode: str = "RGB",
        timeout: float = 600.0,
    ) -> None:
        self._local = _GdsioLoader(
            source, batch_size, transform=transform, device=device, shuffle=shuffle, seed=seed, drop_last=drop_last,
            rank=rank, world_size=world_size, prefetch=prefetch, prefetch_bytes=prefetch_bytes, threads=threads,
            on_error=on_error, kind=kind, record_shape=record_shape, record_dtype=record_dtype, image_mode=image_mode,
        )
        self.local_share = _parse_share(local_share)
        self.placement = _Placement.parse(resources)
        self.cpus_per_actor = _check_cpus(cpus_per_actor)
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        self.timeout = float(timeout)
        self._share = AUTO_START if self.local_share == "auto" else float(self.local_share)
        self._actors: int | None = None
        if self.local_share != 1.0:
            _connected()
            self._actors = _actors(self.placement, self.cpus_per_actor, actors)
        self._meter = Meter()
        self._sides = _Sides()
        self._rows: dict[str, Any] = {}  # the input rows (batch numbers), made once: "all" or "fixed"
        self._board: Any = None
        self._passes = 0

    # ---- what gdsio.Loader says ---------------------------------------------------------

    device = property(lambda self: self._local.device)
    kind = property(lambda self: self._local.kind)
    classes = property(lambda self: self._local.classes)
    epoch = property(lambda self: self._local.epoch)
    batch_size = property(lambda self: self._local.batch_size)
    drop_last = property(lambda self: self._local.drop_last)
    dataset = property(lambda self: self._local.dataset)
    order = property(lambda self: self._local.order)

    def __len__(self) -> int:
        return len(self._local)

    def __repr__(self) -> str:
        o = self.order
        return (f"gdsio.data.ray.Loader({len(self._local.table)} {self.kind} samples, batch_size={self.batch_size}, "
                f"device={self.device}, rank {o.rank}/{o.world_size}, local_share={self.local_share!r}, "
                f"{self._actors or 0} actor(s) on {self.placement})")

    def set_epoch(self, epoch: int) -> None:
        """The epoch of the next pass (its shuffle and random transforms)."""
        self._local.set_epoch(epoch)

    def state_dict(self) -> dict[str, Any]:
        """gdsio.Loader's state: batches handed to the consumer, whichever side made them."""
        return self._local.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resumes mid-epoch: the next pass yields exactly the batches not yet handed out."""
        self._local.load_state_dict(state)

    def stats(self, reset: bool = False) -> OffloadStats:
        """Throughput and data-wait share of the merged stream, and the samples each side made."""
        base = self._meter.snapshot()
        s = self._sides
        with s._lock:
            out = OffloadStats(**{f.name: getattr(base, f.name) for f in dataclasses.fields(LoaderStats)},
                               local_samples=s.local, remote_samples=s.remote, remote_nodes=dict(s.nodes),
                               local_share=self._share,
                               remote_ms_per_sample=1e3 * s.remote_s / s.remote if s.remote else None)
        if reset:
            self._meter.reset()
            self._sides.reset()
        return out

    # ---- iteration ----------------------------------------------------------------------

    def __iter__(self) -> "_OffloadPass":
        epoch, start, gen = self._local._begin_pass()
        self._passes += 1
        p = _OffloadPass(self, epoch, start, gen, self._passes)
        self._local._pass = weakref.ref(p)  # a new pass of either kind stops this one
        return p

    def _input_rows(self, which: str) -> Any:
        """The batch numbers the CPU nodes are given, as a dataset made once
        per loader (one row per block: a block is one actor call, so each
        batch streams out when it is made)."""
        if which not in self._rows:
            ray = _ray()
            n = len(self)
            ks = list(range(n)) if which == "all" else [k for k in range(n) if not _fixed_local(self._share, k)]
            self._rows[which] = (ray.data.from_items([{"batch_no": k} for k in ks], override_num_blocks=len(ks))
                                 if ks else None)
        return self._rows[which]

    def _board_handle(self) -> Any:
        if self._board is None:
            ray = _ray()
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            here = ray.get_runtime_context().get_node_id()  # the trainer's node, where the consumer is
            self._board = ray.remote(num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=False))(
                _BoardImpl).remote()
        return self._board


class _Signalling(queue.Queue):  # type: ignore[type-arg]
    """A bounded queue that wakes the consumer on every put."""

    def __init__(self, maxsize: int, arrived: threading.Event) -> None:
        super().__init__(maxsize)
        self._arrived = arrived

    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        super().put(item, block, timeout)
        self._arrived.set()


class _RemoteFeed:
    """Thread ``gdsio-ray``: iterates the Ray dataset, joins the rows of each
    batch, copies them into (pinned) tensors and queues ``("batch", k, images,
    labels, node, seconds)``, then ``("end",)``, or ``("error", exc)``."""

    def __init__(self, ds: Any, q: queue.Queue[Any], stop: threading.Event, pinned: bool, prefetch: int) -> None:
        self.ds, self.q, self.stop, self.pinned, self.prefetch = ds, q, stop, pinned, prefetch

    def run(self) -> None:
        try:
            parts: list[dict[str, np.ndarray]] = []
            have = 0
            for block in self.ds.iter_batches(batch_size=None, batch_format="numpy", prefetch_batches=self.prefetch):
                if self.stop.is_set():
                    return
                bn = np.asarray(block.get("batch_no", ()))
                if bn.size == 0:
                    continue  # an actor call that made nothing (a batch this node makes)
                cuts = [0, *(np.flatnonzero(np.diff(bn)) + 1).tolist(), len(bn)]
                for a, b in zip(cuts[:-1], cuts[1:]):
                    parts.append({c: v[a:b] for c, v in block.items()})
                    have += b - a
                    if have == int(parts[0]["count"][0]):
                        if not self._put(self._batch(parts)):
                            return
                        parts, have = [], 0
            if parts:
                raise RuntimeError(f"gdsio.data.ray: batch {int(parts[0]['batch_no'][0])} came incomplete "
                                   f"({have} of {int(parts[0]['count'][0])} rows)")
            self._put(("end",))
        except BaseException as e:  # reaches the consumer, which re-raises it
            self._put(("error", e))

    def _batch(self, parts: list[dict[str, np.ndarray]]) -> tuple[Any, ...]:
        images = self._tensor([p["image"] for p in parts])
        labels = self._tensor([p["label"] for p in parts])
        first = parts[0]
        return ("batch", int(first["batch_no"][0]), images, labels, str(first["node"][0]), float(first["seconds"][0]))

    def _tensor(self, arrays: list[np.ndarray]) -> Any:
        """One copy, from Ray's read-only buffers into a tensor of our own (pinned for a GPU)."""
        import torch

        n = sum(len(a) for a in arrays)
        dtype = torch.from_numpy(np.empty(0, arrays[0].dtype)).dtype
        out = torch.empty((n, *arrays[0].shape[1:]), dtype=dtype, pin_memory=self.pinned)
        view, at = out.numpy(), 0
        for a in arrays:
            view[at : at + len(a)] = a
            at += len(a)
        return out

    def abort(self) -> None:
        """Ends the dataset's execution from another thread: a feed blocked in
        Ray (its node lost, no other to run on) then returns. Ray Data has no
        public call for it; its executor's own shutdown, where there is one."""
        executor = getattr(self.ds, "_current_executor", None)
        if executor is not None:
            try:
                executor.shutdown(force=True)
            except Exception as e:  # noqa: BLE001 - best effort while closing; the thread is a daemon
                log.warning("gdsio.data.ray.Loader: could not stop the Ray dataset: %s: %s", type(e).__name__, e)

    def _put(self, item: tuple[Any, ...]) -> bool:
        while not self.stop.is_set():
            try:
                self.q.put(item, timeout=POLL_S)
                return True
            except queue.Full:
                continue
        return False


class _OffloadPass:
    """One pass: the local producer's and the Ray feed's batches, merged in
    batch order. Its threads stop when it ends, on close(), on an exception
    in next() and when it is garbage collected."""

    def __init__(self, loader: Loader, epoch: int, start: int, gen: int, pass_id: int) -> None:
        self._loader = loader
        self._epoch, self._gen, self._pass_id = epoch, gen, pass_id
        self._k, self._end = start, len(loader)
        self._closed = False
        self._last: float | None = None
        self._stop = threading.Event()
        self._arrived = threading.Event()
        self._budget = ByteBudget(loader._local.prefetch_bytes)
        inner = loader._local
        self._heads: dict[str, Any] = {"local": None, "remote": None}
        self._queues: dict[str, queue.Queue[Any]] = {}
        self._threads: dict[str, threading.Thread] = {}
        loader._meter.begin_pass(epoch, start)
        share = loader.local_share
        board = None
        if share == "auto":
            ray = _ray()
            board = loader._board_handle()
            ray.get(board.begin.remote(pass_id, loader._share), timeout=loader.timeout)
            mine: Callable[[int], bool] = lambda k: ray.get(board.owner.remote(pass_id, k), timeout=loader.timeout) == "local"  # noqa: E731
        else:
            mine = lambda k: _fixed_local(float(share), k)  # noqa: E731
        self._board = board
        # This node: gdsio.Loader's producer over the batches it keeps.
        if share != 0.0:
            plan = dataclasses.replace(inner._plan(epoch, start), order=_LocalOrder(inner.order, mine), meter=loader._meter)
            self._queues["local"] = _Signalling(inner.prefetch, self._arrived)
            producer = Producer(plan, self._queues["local"], self._stop, self._budget)
            self._threads["local"] = threading.Thread(target=producer.run, name="gdsio-loader", daemon=True)
        # The CPU nodes: Ray Data over the batches they make.
        rows = None if share == 1.0 else loader._input_rows("all" if share == "auto" else "fixed")
        self._watch: dict[str, dict[str, Any]] = {}
        self._feed: _RemoteFeed | None = None
        if rows is not None:
            o = inner.order
            spec = _Spec(table=inner.table, num_samples=o.num_samples, batch_size=o.batch_size, shuffle=o.shuffle,
                         seed=o.seed, rank=o.rank, world_size=o.world_size, drop_last=o.drop_last, epoch=epoch,
                         transform=inner.transform, mode=inner.image_mode, on_error=inner.on_error,
                         threads=max(1, int(loader.cpus_per_actor)), per_batch=True, start=start, board=board,
                         pass_id=pass_id)
            ds = _pipeline(rows, spec, loader.placement, actors=loader._actors or 1, cpus=loader.cpus_per_actor,
                           batch_size=1)
            self._watch = {n["NodeID"]: n for n in _nodes(loader.placement)}
            self._queues["remote"] = _Signalling(inner.prefetch, self._arrived)
            self._feed = _RemoteFeed(ds, self._queues["remote"], self._stop, inner.device.type == "cuda", inner.prefetch)
            self._threads["remote"] = threading.Thread(target=self._feed.run, name="gdsio-ray", daemon=True)
        self._lost_reported: set[str] = set()
        self._started: set[str] = set()  # the sides that handed over a batch in this pass ("auto" steering)
        for t in self._threads.values():
            t.start()

    def __iter__(self) -> "_OffloadPass":
        return self

    def __next__(self) -> tuple[Any, Any]:
        if self._closed:
            raise StopIteration
        t0 = time.perf_counter()
        try:
            while True:
                if self._k >= self._end:
                    self._loader._local._finished(self._gen, self._epoch)
                    self.close()
                    raise StopIteration
                got = self._take(self._k)
                k = self._k
                self._k += 1
                if got is not None:
                    break
                self._loader._local._consumed(self._gen, k)  # every sample of it skipped: nothing to yield
        except StopIteration:
            raise
        except BaseException:
            self.close()
            raise
        side, images, labels = got
        t1 = time.perf_counter()
        wait, wall = t1 - t0, t1 - (self._last if self._last is not None else t0)
        self._loader._meter.consumed(wait, wall, int(images.shape[0]))
        self._last = t1
        self._steer(side, wait, wall)
        self._loader._local._consumed(self._gen, k)
        return images, labels

    # ---- merging the two streams --------------------------------------------------------

    def _head(self, side: str) -> Any:
        """The next item of a side's queue, without taking it (None: not yet there; ("end",) once it ended)."""
        if side not in self._queues:
            return ("end",)
        if self._heads[side] is None:
            try:
                self._heads[side] = self._queues[side].get_nowait()
            except queue.Empty:
                if not self._threads[side].is_alive():  # ended without a last word: never wait on it
                    try:
                        self._heads[side] = self._queues[side].get_nowait()
                    except queue.Empty:
                        raise RuntimeError(f"gdsio.data.ray.Loader: the {side} producer ended without a result") from None
        head = self._heads[side]
        if head is not None and head[0] == "error":
            err = head[1]
            if side == "remote":
                lost = self._lost_nodes()
                if lost and isinstance(err, Exception):
                    err.add_note("gdsio.data.ray.Loader: lost during this epoch: " + ", ".join(_describe(n) for n in lost))
            raise err
        return head

    def _take(self, k: int) -> tuple[str, Any, Any] | None:
        """Batch k from whichever side made it, or None when neither did (all its samples skipped)."""
        waited_from = time.perf_counter()
        next_health = waited_from + HEALTH_EVERY_S
        while True:
            self._arrived.clear()
            heads = {side: self._head(side) for side in ("local", "remote")}
            for side, head in heads.items():
                if head is not None and head[0] in ("batch", "empty") and head[1] == k:
                    self._heads[side] = None
                    return None if head[0] == "empty" else self._hand_over(side, head)
            if all(h is not None and (h[0] == "end" or h[1] > k) for h in heads.values()):
                return None  # both sides are past k: it had no sample left
            now = time.perf_counter()
            if now - waited_from > self._loader.timeout:
                raise TimeoutError(f"gdsio.data.ray.Loader: batch {k} of epoch {self._epoch} did not come within "
                                   f"{self._loader.timeout:g} s (timeout=); {self._status()}")
            if heads["remote"] is None and now >= next_health:
                self._check_nodes(k, now - waited_from)
                next_health = now + HEALTH_EVERY_S
            self._arrived.wait(POLL_S)

    def _hand_over(self, side: str, head: tuple[Any, ...]) -> tuple[str, Any, Any]:
        import torch

        loader = self._loader
        if side == "local":
            _, k, images, labels, ready = head
            self._budget.release(batch_nbytes(images, labels))
            if ready is not None:  # CUDA: order the consumer's stream after the batch, no host sync
                cur = torch.cuda.current_stream(loader.device)
                cur.wait_event(ready)
                for t in (images, labels):
                    if isinstance(t, torch.Tensor) and t.is_cuda:
                        t.record_stream(cur)
            loader._sides.add("local", int(images.shape[0]))
            return side, images, labels
        _, k, images, labels, node, seconds = head
        if loader.device.type == "cuda":  # from pinned memory, on the consumer's current stream
            images = images.to(loader.device, non_blocking=True)
            labels = labels.to(loader.device, non_blocking=True)
        loader._sides.add("remote", int(images.shape[0]), node, seconds)
        return side, images, labels

    def _steer(self, side: str, wait: float, wall: float) -> None:
        """local_share="auto": a batch the consumer waited for moves the share away from the side that made it.
        A side's first batch of the pass does not count: its wait is the start (Ray Data starts an actor pool
        per pass, seconds), not a sign that the side lags."""
        loader = self._loader
        if self._board is None:
            return
        first = side not in self._started
        self._started.add(side)
        if first or wall <= 0 or wait < AUTO_WAITED * wall:
            return
        step = AUTO_STEP if side == "remote" else -AUTO_STEP
        share = min(1.0, max(0.0, loader._share + step))
        if share != loader._share:
            loader._share = share
            self._board.set_share.remote(self._pass_id, share)  # not waited for

    # ---- a lost node --------------------------------------------------------------------

    def _lost_nodes(self) -> list[dict[str, Any]]:
        alive = {n["NodeID"] for n in _ray().nodes() if n.get("Alive")}
        return [n for nid, n in self._watch.items() if nid not in alive]

    def _check_nodes(self, k: int, waited: float) -> None:
        """While a remote batch is awaited: a lost node with another to take
        its work is logged (Ray remakes its batches there); with none left,
        raises, naming the node, rather than waiting for ever."""
        lost = self._lost_nodes()
        if not lost:
            return
        names = ", ".join(_describe(n) for n in lost)
        left = _nodes(self._loader.placement)
        if left:
            new = [n for n in lost if n["NodeID"] not in self._lost_reported]
            if new:
                log.warning("gdsio.data.ray.Loader: lost %s in epoch %d; Ray remakes its batches on %d other node(s)",
                            ", ".join(_describe(n) for n in new), self._epoch, len(left))
                self._lost_reported.update(n["NodeID"] for n in new)
            return
        raise RuntimeError(
            f"gdsio.data.ray.Loader: lost {names} in epoch {self._epoch} (batch {k} awaited for {waited:.0f} s), and no "
            f"live node has {self._loader.placement} to remake its batches; add such a node, or pass local_share=1.0 "
            "to make every batch on this node"
        )

    def _status(self) -> str:
        parts = []
        for side in ("local", "remote"):
            if side in self._threads:
                alive = "running" if self._threads[side].is_alive() else "ended"
                parts.append(f"{side} producer {alive}, {self._queues[side].qsize()} batch(es) queued")
        lost = self._lost_nodes() if self._watch else []
        if lost:
            parts.append("lost: " + ", ".join(_describe(n) for n in lost))
        return "; ".join(parts)

    # ---- the end ------------------------------------------------------------------------

    def close(self) -> None:
        """Stops the pass's threads (a Ray read in flight ends with its dataset)."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        for side, t in self._threads.items():
            if side == "remote":
                t.join(timeout=2 * POLL_S)
                if t.is_alive() and self._feed is not None:  # blocked in Ray, not at our queue: end the execution
                    self._feed.abort()
            t.join(timeout=60 if side == "local" else 10)
            if t.is_alive():
                log.warning("gdsio.data.ray.Loader: the %s producer did not stop in time", side)
        for q in self._queues.values():
            while True:
                try:
                    q.get_nowait()
                except queue.Empty:
                    break
        self._heads = {"local": None, "remote": None}

    def __del__(self) -> None:
        self._closed = True
        stop = getattr(self, "_stop", None)
        if stop is not None:
            stop.set()
