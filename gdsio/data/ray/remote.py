"""gdsio.data.ray, the remote side: where the actors run (custom resources or
node labels), what each actor does (gdsio.Loader's producer on the CPU):
the Loader's actors (``BatchMaker``, one call a batch), and ``dataset()``'s
Ray Data pipeline over the same producer.

Package-internal (not in ``__all__``; used by gdsio.data.ray.loader, passes
and feed): ``import_ray``, ``connected_ray``, ``Placement``, ``placed_nodes``,
``describe_node``, ``ActorSpec``, ``BatchMaker`` (the Loader's actors),
``actor_pipeline`` (``dataset()``'s), ``pool_size``, ``check_cpus``,
``node_loss`` and ``unwrapped_sample_error``."""

from __future__ import annotations

import dataclasses
import logging
import queue
import threading
import time
from typing import Any, Callable, Iterator

import numpy as np
import torch

from ...errors import SampleError
from ..loader import Loader as _GdsioLoader
from ..flow import BatchBuffers, EmptyBatch, End, Failed
from ..meter import Meter
from ..producer import PassPlan, Producer
from ..sampler import ShardedOrder, WindowOrder
from .shard_units import Units, units_wanted

__all__ = ["EXTRA", "dataset"]

log = logging.getLogger("gdsio")

EXTRA = 'pip install "gdsio[ray]"'


def import_ray() -> Any:
    """The ray module, or an ImportError that names the extra to install
    (package-internal: gdsio.data.ray's modules import ray through it)."""
    try:
        import ray
        import ray.data  # noqa: F401 - the extra is ray[data]; a bare ray lacks it
    except ImportError as e:
        raise ImportError(f"gdsio.data.ray needs Ray Data: {EXTRA} (ray[data] and pydantic); {e}") from e
    return ray


def connected_ray() -> Any:
    """The ray module once connected to a cluster, else RuntimeError (package-internal: gdsio.data.ray.loader)."""
    ray = import_ray()
    if not ray.is_initialized():
        raise RuntimeError(
            "gdsio.data.ray: connect to the Ray cluster first, e.g. ray.init(address='auto') on a node of it "
            "(gdsio does not start a cluster of its own)"
        )
    return ray


# ---- where the work runs: custom resources or node labels -----------------------------


@dataclasses.dataclass(frozen=True)
class Placement:
    """Where the actors run: custom resources and node labels (package-internal: gdsio.data.ray.loader, passes)."""

    resources: dict[str, float]  # custom resources each actor asks for
    labels: dict[str, str]  # node labels each actor's node must carry

    @classmethod
    def parse(cls, resources: Any) -> "Placement":
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


def placed_nodes(placement: Placement) -> list[dict[str, Any]]:
    """The live nodes the placement selects (package-internal: gdsio.data.ray.passes)."""
    return [n for n in import_ray().nodes() if n.get("Alive") and placement.matches(n)]


def describe_node(node: dict[str, Any]) -> str:
    """A node, as errors and logs name it (package-internal: gdsio.data.ray.passes)."""
    return f"node {node['NodeID']} ({node.get('NodeManagerAddress', '?')})"


# ---- the remote side: gdsio's CPU path inside an actor -----------------------------------


@dataclasses.dataclass(frozen=True)
class ActorSpec:
    """What an actor needs to make batches: pickled once into each actor
    (package-internal: gdsio.data.ray.passes makes one per execution)."""

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
    # Loader: row s of the execution is the batch at place offset + s of the sequence that runs from
    # batch 0 of `epoch` on, `per` places an epoch: every batch of each epoch ("auto"), or only those in
    # `remote_ks` (a fixed share). offset > 0: a pass resumed mid-epoch, or a fixed share's later start.
    offset: int = 0
    per: int = 0
    remote_ks: tuple[int, ...] | None = None
    gen: int = 0  # the execution's number (its units on the UnitBoard; a stale one makes nothing)
    # shuffle="window": the WindowOrder's shards (their first samples, and the end) and window; `units`:
    # the loader's UnitBoard (gdsio.data.ray.shard_units), whose units the actors share (None: read per sample).
    shard_starts: Any = None
    shuffle_window: int = 0
    units: Any = None

    def place(self, seq: int) -> tuple[int, int]:
        """(epoch, batch number) of the execution's row `seq`."""
        t = self.offset + seq
        e, i = divmod(t, self.per)
        return self.epoch + e, (i if self.remote_ks is None else self.remote_ks[i])

    def order(self) -> ShardedOrder:
        if self.shuffle == "window":  # the loader's WindowOrder, rebuilt from its parameters
            return WindowOrder(self.shard_starts, batch_size=self.batch_size, shuffle_window=self.shuffle_window,
                               seed=self.seed, rank=self.rank, world_size=self.world_size, drop_last=self.drop_last)
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
    if not isinstance(images, torch.Tensor):
        raise TypeError(f"gdsio.data.ray: the transform must return a tensor batch; got {type(images).__name__}")
    if images.dtype == torch.bfloat16:  # numpy, and so Arrow and Ray Data, have no bfloat16
        raise TypeError("gdsio.data.ray: a bfloat16 batch cannot leave a CPU node (numpy has no bfloat16); end the "
                        "transform with ToDtype(torch.float16) or torch.float32 and cast on the GPU (a fused "
                        "gdsio.data.Compose ending in ToDtype(torch.bfloat16) casts on the consumer by itself)")
    return np.ascontiguousarray(images.contiguous().numpy())


class _Maker:
    """The UDF of ``dataset()``'s actor pool (Ray Data). Makes batches with
    gdsio.Loader's own producer on the CPU, so a batch is what
    ``gdsio.Loader(device="cpu")`` makes for it, bit for bit."""

    def __init__(self, spec: ActorSpec) -> None:
        import ray

        self.spec = spec
        self.node = ray.get_runtime_context().get_node_id()
        self.order = spec.order()
        self.units = Units(spec.table, self.order, spec.epoch) if spec.units is not None else None
        self._indices: dict[int, np.ndarray] = {}  # the epochs' orders, the last two kept

    def indices(self, epoch: int) -> np.ndarray:
        got = self._indices.get(epoch)
        if got is None:
            got = self._indices[epoch] = self.order.indices(epoch)
            for e in [e for e in self._indices if e < epoch - 1]:
                del self._indices[e]
        return got

    def __call__(self, batch: dict[str, np.ndarray]) -> Iterator[dict[str, np.ndarray]]:
        spec = self.spec
        pos = np.asarray(batch["id"], np.int64)  # the rows' positions in the epoch's order, made as one batch
        for _, images, labels, kept, seconds in self._made([(0, self.indices(spec.epoch)[pos])], spec.epoch):
            yield {"index": np.asarray(kept, np.int64), "label": labels.numpy().astype(np.int64, copy=False),
                   "image": _as_array(images)}

    def _made(self, batches: list[tuple[int, np.ndarray]], epoch: int,
              windows: Any = None) -> Iterator[tuple[int, Any, Any, Any, float]]:
        """(batch number, images, labels, sample indices kept, seconds per batch) of each batch made;
        `windows`: the units the window order reads the batches' samples from (a shard_units.UnitView)."""
        spec = self.spec
        q: queue.Queue[Any] = queue.Queue()
        kept: dict[int, np.ndarray] = {}
        plan = PassPlan(table=spec.table, order=_Given(batches, spec.seed), epoch=epoch, start=0,
                        transform=spec.transform, device=torch.device("cpu"), streams=None, threads=spec.threads,
                        on_error=spec.on_error, mode=spec.mode, cache=None, meter=Meter(),
                        # A pool per call: the batch leaves as Ray's copy. One kept across calls made more page
                        # faults and CPU (Ray still held the last batch when the next call came: a new buffer each time).
                        buffers=BatchBuffers(),
                        crop_decode=True,  # as gdsio.Loader's default: the same pixels, a crop's box decoded
                        # One CPU: each sample read and decoded in this thread (0.88-0.91x the node's CPU an
                        # image, bench/results/ray-actor-inline-2026-12-04.md); more: the reader threads.
                        inline_reads=spec.threads == 1)
        t0 = time.perf_counter()
        producer = Producer(plan, q, threading.Event(), None, kept=kept)
        producer.windows = windows  # the order here is _Given's: the producer makes no ShardWindows of its own
        producer.run()
        seconds = (time.perf_counter() - t0) / max(1, len(batches))
        while True:
            item = q.get_nowait()
            if isinstance(item, Failed):
                raise item.error
            if isinstance(item, End):
                return
            if isinstance(item, EmptyBatch):
                continue
            yield item.batch_no, item.images, item.labels, kept[item.batch_no], seconds  # a ReadyBatch


class BatchMaker(_Maker):
    """A Ray Core actor of gdsio.data.ray.Loader's pool (package-internal:
    gdsio.data.ray.feed starts them): ``make(place)`` makes the batch at that
    place of the execution's sequence and returns (epoch, batch number,
    images, labels, node id, seconds it took) as numpy arrays, which Ray
    stores out of band (the consumer maps them), or None where none of its
    samples was left. It is asked only for batches the CPU nodes make ("auto":
    the feed asks the trainer's Board first, in its own process)."""

    def make(self, place: int) -> tuple[int, int, np.ndarray, np.ndarray, str, float] | None:
        spec = self.spec
        epoch, k = spec.place(place)
        idx = self.order.batch(epoch, k, self.indices(epoch))
        windows = None
        if self.units is not None:  # the window order: the batch's units, each read once for the whole pool
            windows = units_wanted(self.units, spec.units, spec.gen, epoch, k, len(idx), self.node)
            if windows is None:
                return None  # a stale execution's call
        for _, images, labels, _kept, seconds in self._made([(k, idx)], epoch, windows):
            return epoch, k, _as_array(images), labels.numpy().astype(np.int64, copy=False), self.node, seconds
        return None


def pool_size(placement: Placement, cpus: float, actors: Any, ranks: int = 1) -> int:
    """The actor pool's size (package-internal: gdsio.data.ray.loader): `actors`, or the slots of the selected nodes
    shared among `ranks` pools (at least 1 each). An actor holds its CPUs
    until its pool's execution ends, so pools that together ask for more
    actors than the nodes hold wait for one another: the first to start can
    take every slot, and another makes nothing until it ends."""
    if actors is not None:
        if not isinstance(actors, int) or isinstance(actors, bool) or actors < 1:
            raise ValueError(f"actors must be a positive int, got {actors!r}")
        return actors
    n = sum(placement.slots(node, cpus) for node in placed_nodes(placement))
    if n < 1:
        nodes = [f"{describe_node(x)}: {x.get('Resources')}, labels {x.get('Labels')}" for x in import_ray().nodes()
                 if x.get("Alive")]
        raise ValueError(f"resources: no live node of the cluster can hold an actor of {cpus:g} CPU(s) with {placement}; "
                         "the nodes are:\n  " + "\n  ".join(nodes))
    if n < ranks:
        log.warning("gdsio.data.ray: the nodes with %s hold %d actor(s) of %g CPU(s), fewer than the %d ranks: "
                    "a rank's pool may wait for another's to end (pass actors= to size them)",
                    placement, n, cpus, ranks)
    return max(1, n // ranks)


def actor_pipeline(rows: Any, spec: ActorSpec, placement: Placement, *, actors: int, cpus: float,
                   batch_size: int) -> Any:
    """`rows` through a pool of `actors` actors making gdsio's batches (package-internal: gdsio.data.ray.passes)."""
    ray = import_ray()
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


def unwrapped_sample_error(e: BaseException) -> BaseException:
    """A SampleError an actor raised, as gdsio.Loader raises it (package-internal:
    gdsio.data.ray.passes). Ray hands an actor's exception over as a subclass of
    both RayTaskError and its type, with the original as ``cause``: ``except
    SampleError`` catches either, but the type, the message and ``path`` are the
    original's only. Any other exception is handed on as Ray gives it (its remote
    traceback is the one place that says where a user's transform failed)."""
    cause = getattr(e, "cause", None)
    if isinstance(e, SampleError) and type(e) is not SampleError and isinstance(cause, SampleError):
        return cause
    return e


# Ray's words for work lost with its node (the node, an actor or worker on it, an object it held);
# ObjectFreedError (freed by its owner) is not.
_NODE_LOSS = ("NodeDiedError", "RayActorError", "WorkerCrashedError", "ObjectLostError")


def node_loss(e: BaseException) -> bool:
    """Whether `e`, or an exception it wraps, is Ray saying that work was lost
    with a node (package-internal: gdsio.data.ray.passes finishes the epoch on
    this node then). A SampleError never is: a bad sample raises wherever it is made; nor is an
    actor whose creation raised (it would raise again in a new actor: the loader raises it)."""
    exceptions = import_ray().exceptions
    kinds = tuple(getattr(exceptions, name) for name in _NODE_LOSS if hasattr(exceptions, name))
    seen: set[int] = set()
    todo: list[Any] = [e]
    while todo:
        x = todo.pop()
        if not isinstance(x, BaseException) or id(x) in seen:
            continue
        seen.add(id(x))
        if isinstance(x, SampleError):
            return False
        if getattr(x, "actor_init_failed", False):  # the actor's constructor raised: a new one would too
            return False
        if isinstance(x, kinds) and not isinstance(x, getattr(exceptions, "ObjectFreedError", ())):
            return True
        todo += [getattr(x, "cause", None), x.__cause__, x.__context__]
    return False


def check_cpus(cpus: Any) -> float:
    """cpus_per_actor, checked (package-internal: gdsio.data.ray.loader)."""
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
    ray = connected_ray()
    # gdsio.Loader checks the arguments and lists the samples; it starts no thread until iterated.
    ref = _GdsioLoader(source, batch_size, transform=transform, device="cpu", shuffle=shuffle, seed=seed,
                       on_error=on_error, kind=kind, image_mode=image_mode, record_shape=record_shape,
                       record_dtype=record_dtype)
    if not isinstance(epoch, int) or isinstance(epoch, bool) or epoch < 0:
        raise ValueError(f"epoch must be a non-negative int, got {epoch!r}")
    cpus = check_cpus(cpus_per_actor)
    placement = Placement.parse(resources)
    o = ref.order
    spec = ActorSpec(table=ref.table, num_samples=o.num_samples, batch_size=o.batch_size, shuffle=o.shuffle,
                     seed=o.seed, rank=0, world_size=1, drop_last=False, epoch=epoch, transform=transform,
                     mode=image_mode, on_error=on_error, threads=max(1, int(cpus)), per_batch=False,
                     shard_starts=getattr(o, "shard_starts", None), shuffle_window=getattr(o, "shuffle_window", 0))
    rows = ray.data.range(len(ref.table))
    return actor_pipeline(rows, spec, placement, actors=pool_size(placement, cpus, actors), cpus=cpus,
                          batch_size=batch_size)
