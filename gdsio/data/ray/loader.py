"""gdsio.data.ray.Loader: this node's gdsio.Loader pipeline and the CPU nodes'
Ray actors, merged in batch order (the passes themselves: passes.py; the
receiving side: feed.py)."""

from __future__ import annotations

import bisect
import dataclasses
import logging
import threading
from typing import Any, Callable

from ..loader import Loader as _GdsioLoader
from ..loader import begin_pass, running_pass, track_pass
from ..meter import LoaderStats, Meter
from ..sampler import WindowOrder
from .feed import TRANSPORTS, calls_in_flight
from .passes import Board, Execution, fixed_local, OffloadPass, OffloadShared
from .shard_units import UnitBoard
from .remote import check_cpus, connected_ray, import_ray, placed_nodes, Placement, pool_size

__all__ = ["Loader", "OffloadStats"]

CAST_ON = ("device", "cpu_nodes")

log = logging.getLogger("gdsio")


@dataclasses.dataclass
class OffloadStats(LoaderStats):
    """``LoaderStats`` of the merged stream, and which side made what.

    local_samples / remote_samples: samples this node made / the CPU nodes
    made (handed to the consumer). remote_nodes: samples per Ray node id.
    local_share: the share of the batches this node makes: the fixed share,
    or with "auto" local_samples over all samples counted (0.5 before any).
    path: "local", "ray" or "local+ray", from the counts.
    remote_ms_per_sample: the actors' mean time per sample (read, decode,
    transform on ``cpus_per_actor`` cores): the cost ``gdsio offload-plan`` takes.
    remote_pools: executions (each with its actor pool) started by the
    loader so far: one per pass, or one per ``epochs_per_pool`` epochs.
    finished_here: epoch -> the batch number from which this node made every
    batch of that epoch, as the CPU nodes were lost during it (or none was
    live when its pass began); empty when the CPU nodes made their share.
    remote_lost: the Ray node ids of the CPU nodes lost in those epochs.
    """

    local_samples: int = 0
    remote_samples: int = 0
    remote_nodes: dict[str, int] = dataclasses.field(default_factory=dict)
    local_share: float = 1.0
    remote_ms_per_sample: float | None = None
    remote_pools: int = 0
    finished_here: dict[int, int] = dataclasses.field(default_factory=dict)
    remote_lost: list[str] = dataclasses.field(default_factory=list)

    @property
    def path(self) -> str:
        """Which path made the samples handed out: ``"local"`` (this node
        only), ``"ray"`` (the CPU nodes only) or ``"local+ray"``."""
        if self.remote_samples == 0:
            return "local"
        return "ray" if self.local_samples == 0 else "local+ray"

    def __str__(self) -> str:
        made = (f"; path {self.path}: made here {self.local_samples}, on CPU nodes {self.remote_samples} "
                f"({len(self.remote_nodes)} node(s), {self.remote_pools} actor pool(s)), local_share {self.local_share:.2f}")
        if self.finished_here:
            epochs = ", ".join(f"epoch {e} from batch {k}" for e, k in self.finished_here.items())
            made += (f"; CPU nodes lost ({', '.join(self.remote_lost) or 'none live'}): made here {epochs}")
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
            self.finished_here: dict[int, int] = {}
            self.lost: list[str] = []

    def add(self, side: str, samples: int, node: str | None = None, seconds: float = 0.0) -> None:
        with self._lock:
            if side == "local":
                self.local += samples
            else:
                self.remote += samples
                self.remote_s += seconds
                if node is not None:
                    self.nodes[node] = self.nodes.get(node, 0) + samples

    def went_local(self, epoch: int, k: int, lost: list[str]) -> None:
        """From batch k of `epoch` this node makes every batch (the CPU nodes `lost`, or none live)."""
        with self._lock:
            self.finished_here[epoch] = min(k, self.finished_here.get(epoch, k))
            self.lost += [n for n in lost if n not in self.lost]


def _parse_share(v: Any) -> float | str:
    if v == "auto" and isinstance(v, str):
        return "auto"
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 <= v <= 1.0:
        raise ValueError(f"local_share must be 'auto' or a fraction in [0, 1]; got {v!r}")
    return float(v)


class Loader:
    """Batches of `source` as ``(images, labels)``, made partly on this node
    (gdsio.Loader's pipeline on `device`) and partly on the Ray cluster's CPU
    nodes (Ray actors running gdsio's CPU path), merged in batch order.

    Same batches, order, sharding and state as ``gdsio.Loader`` with the same
    arguments: ``len``, ``set_epoch``, ``state_dict`` / ``load_state_dict``
    (states move between the two loaders), ``dataset``, ``classes``. Remote
    batches are copied to `device` on the consumer's current CUDA stream
    (through pinned memory), or handed over on the CPU. A fused chain ending
    in a float ``ToDtype`` (and ``Normalize``) crosses as uint8 and is cast
    and normalised on `device` by the same fused kernel (the same bits);
    a bfloat16 batch can then come from the CPU nodes too.

    Args:
        source, batch_size, device, transform, seed, shuffle, rank,
            world_size, drop_last, prefetch, prefetch_bytes, threads,
            on_error, kind, record_shape, record_dtype, image_mode,
            shuffle_window: as ``gdsio.Loader``, with its defaults
            (shuffle=False, as torch's DataLoader: pass shuffle=True to
            train). Tar shards in the shard-window order (``"window"``,
            and ``True`` for shards on an object store): the CPU nodes'
            actors share each unit of the plan (a shard, or a rank's part
            of one), read whole once per actor pool by a task on the node
            of the first actor that needs it, through Ray's object store
            (gdsio.data.ray.shard_units); an actor on another node has Ray
            copy the unit to its node once. This node reads whole units
            (gdsio.Loader's reads) in a pass it makes alone
            (``local_share=1.0``, or the CPU nodes lost); sharing a pass
            with the CPU nodes, it reads its batches' samples one ranged
            read each.
        local_share: the fraction of the batches this node makes (0.0: all
            on the CPU nodes, 1.0: a plain gdsio.Loader, Ray unused), or
            ``"auto"``: each batch goes to the side that asks for it first,
            each side asking as it has room to start one (this node's
            producer as its pipeline takes the next batch, the feed when
            an actor call is free and an actor of the pool is ready), so
            each makes batches at the rate it can from the first batch on,
            with no estimate to converge (tf.data service's dynamic
            sharding); the order stays exact whichever side made a batch.
        resources: which nodes run the actors (see ``dataset``).
        actors, cpus_per_actor: the actor pool (see ``dataset``). The
            default pool is this rank's share of the selected nodes: the
            actors they hold divided by `world_size` (at least 1), as the
            ranks share the CPU nodes and each runs its own pool. An actor
            holds its CPUs until its pool ends, so pools asking for more
            actors than the nodes hold wait for one another (a warning says
            so when the nodes hold fewer actors than there are ranks).
        epochs_per_pool: how many consecutive epochs one execution (one
            actor pool) makes. 1: a new execution each pass, as Ray
            Data runs a dataset: its pool's start (seconds) before each
            epoch's first remote batch. N > 1: after a whole epoch the pool
            goes on into the next, whose first batches it made while the
            consumer finished this one; its actors hold their CPUs between
            epochs, until the N epochs end, a pass does not continue where
            the last stopped (set_epoch to another epoch, a state loaded, a
            pass left mid-epoch: a new execution starts) or ``close()``.
        cast_on: where a fused chain's final float ``ToDtype`` (and
            ``Normalize``) runs. ``"device"``: on `device`, by the same fused
            kernel (the same bits): the CPU nodes send uint8, a quarter of
            float32's bytes, and the consumer copies each batch once (into
            pinned memory for a GPU, cast there; on the CPU the cast reads
            the block in the object store and writes the batch).
            ``"cpu_nodes"``: the CPU nodes run the whole chain and send its
            dtype; on the CPU the consumer's batch is then the block in the
            object store itself, no copy, but the consumer node's raylet
            pulls 4x the bytes, which cost it more CPU than the cast saves
            (bench/results/ray-receive-2026-12-03.md). Other transforms
            run whole on the CPU nodes, and their blocks are not copied on
            the CPU either.
        transport: how a batch's images reach this process. ``"socket"``
            (default): each actor streams them over one TCP connection to a
            socket this process listens on (an ephemeral port on the address
            Ray uses for this node, a random token per actor pool), and the
            kernel copies them straight into the batch's buffer (pinned for a
            GPU); the actor call carries the rest. ``"object_store"``: Ray's
            object store, whose raylet on this node pulls every batch from
            the CPU node's store, then this process copies it once more
            (none on the CPU without a cast). The socket costs this node
            less CPU per image (bench/results/ray-receive-2026-12-04.md).
            Use ``"object_store"`` where the CPU nodes cannot open a
            connection to this node beyond Ray's ports, or where Ray's
            traffic must be TLS (``RAY_USE_TLS``): the socket is plain TCP.
        timeout: seconds the consumer waits for one batch before raising.
            Losing every CPU node mid-epoch (or Ray failing the execution
            with a node's loss) does not raise: this node makes the rest of
            the epoch, in order, the same batches, and ``stats()`` says so
            (``finished_here``, ``remote_lost``). The next pass starts a new
            actor pool if a node with `resources` is live again, else it
            makes every batch here (and says so).

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
        shuffle: bool | str = False,
        shuffle_window: int = 4,
        rank: int = 0,
        world_size: int = 1,
        local_share: float | str = "auto",
        resources: dict[str, Any] | None = None,
        actors: int | None = None,
        cpus_per_actor: float = 1,
        epochs_per_pool: int = 1,
        cast_on: str = "device",
        transport: str = TRANSPORTS[0],
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
        **dataloader_only: Any,
    ) -> None:
        # DataLoader's own keywords (num_workers=, pin_memory=, ...) are refused by
        # gdsio.Loader, whose pipeline this is, with what gdsio does instead.
        self._local = _GdsioLoader(
            source, batch_size, transform=transform, device=device, shuffle=shuffle, shuffle_window=shuffle_window,
            seed=seed, drop_last=drop_last,
            rank=rank, world_size=world_size, prefetch=prefetch, prefetch_bytes=prefetch_bytes, threads=threads,
            on_error=on_error, kind=kind, record_shape=record_shape, record_dtype=record_dtype, image_mode=image_mode,
            **dataloader_only,
        )
        self.local_share = _parse_share(local_share)
        self.placement = Placement.parse(resources)
        self.cpus_per_actor = check_cpus(cpus_per_actor)
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        self.timeout = float(timeout)
        if isinstance(epochs_per_pool, bool) or not isinstance(epochs_per_pool, int) or epochs_per_pool < 1:
            raise ValueError(f"epochs_per_pool must be a positive int, got {epochs_per_pool!r}")
        self.epochs_per_pool = epochs_per_pool
        if cast_on not in CAST_ON:
            raise ValueError(f"cast_on must be one of {', '.join(map(repr, CAST_ON))}; got {cast_on!r}")
        self.cast_on = cast_on
        if transport not in TRANSPORTS:
            raise ValueError(f"transport must be one of {', '.join(map(repr, TRANSPORTS))}; got {transport!r}")
        self.transport = transport
        self._actors: int | None = None
        if self.local_share != 1.0:
            connected_ray()
            self._actors = pool_size(self.placement, self.cpus_per_actor, actors, ranks=world_size)
        # What the passes and executions share with this loader: the counts, the fixed share, the "auto" board.
        self._shared = OffloadShared(
            local=self._local, meter=Meter(), sides=_Sides(), arrived=threading.Event(), actors=self._actors,
            share=None if self.local_share == "auto" else float(self.local_share),
        )
        self._exec: Execution | None = None
        self._pools = 0
        self._units: Any = None  # the window order's UnitBoard, made with the first execution

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
        base = self._shared.meter.snapshot()
        s = self._shared.sides
        with s._lock:
            out = OffloadStats(**{f.name: getattr(base, f.name) for f in dataclasses.fields(LoaderStats)},
                               local_samples=s.local, remote_samples=s.remote, remote_nodes=dict(s.nodes),
                               local_share=(self._shared.share if self._shared.share is not None
                                            else s.local / (s.local + s.remote) if s.local + s.remote else 0.5),
                               remote_ms_per_sample=1e3 * s.remote_s / s.remote if s.remote else None,
                               remote_pools=self._pools, finished_here=dict(s.finished_here),
                               remote_lost=list(s.lost))
        if reset:
            self._shared.meter.reset()
            self._shared.sides.reset()
        return out

    # ---- iteration ----------------------------------------------------------------------

    def __iter__(self) -> "OffloadPass":
        epoch, start, gen = begin_pass(self._local)  # the last pass closed: where it left its execution is known
        ex = self._exec
        if ex is not None and not ex.continues(epoch, start):
            ex.close()
            ex = self._exec = None
        all_here = False
        if ex is None and self.local_share != 1.0:
            # CPU nodes lost in an earlier pass: a new pool when one is live again, else this pass is all made here.
            all_here = not placed_nodes(self.placement)
            if all_here:
                log.warning("gdsio.data.ray.Loader: no live node has %s: this node makes all of epoch %d from "
                            "batch %d", self.placement, epoch, start)
                self._shared.sides.went_local(epoch, start, [])
            else:
                ex = self._exec = self._execution(epoch, start)
        p = OffloadPass(self, self._shared, epoch, start, gen, ex, all_here=all_here)
        track_pass(self._local, p)  # a new pass of either kind stops this one
        return p

    def close(self) -> None:
        """Stops the running pass and ends the execution, freeing its
        actors (with ``epochs_per_pool`` > 1 they outlive a pass) and, in the
        shard-window order, the units held for them. Iterating again starts
        a new one."""
        p = running_pass(self._local)
        if p is not None:
            p.close()
        if self._exec is not None:
            self._exec.close()
            self._exec = None
        if self._units is not None:  # the window order's board, and the units it still holds in the object store
            import_ray().kill(self._units, no_restart=True)
            self._units = None

    def __del__(self) -> None:
        ex = getattr(self, "_exec", None)
        if ex is not None:
            ex.stop.set()  # the feed ends at its next put; the dataset and its pool go with it

    def _remote_ks(self) -> tuple[int, ...] | None:
        """A fixed share: the batch numbers of an epoch the CPU nodes make (None: "auto", every batch asks)."""
        if self.local_share == "auto":
            return None
        share = self._shared.share
        assert share is not None
        return tuple(k for k in range(len(self)) if not fixed_local(share, k))

    def _execution(self, epoch: int, start: int) -> Execution | None:
        """An execution (an actor pool) over the batches the CPU nodes make, from batch
        `start` of `epoch` to the end of epoch + epochs_per_pool - 1 (None: none there)."""
        ks = self._remote_ks()
        per = len(self) if ks is None else len(ks)
        offset = start if ks is None else bisect.bisect_left(ks, start)
        count = per * self.epochs_per_pool - offset
        if per == 0 or count <= 0:
            return None
        self._pools += 1
        if self.local_share == "auto":
            if self._shared.board is None:
                self._shared.board = Board()
            # The producer's horizon: the feed's places (up to twice its calls in flight ahead) and the
            # producer's own reach (its queue and two batches in hand) past the consumer.
            window = calls_in_flight(self._actors or 1)
            self._shared.board.begin(self._pools, epoch=epoch, start=start, per=len(self),
                                     horizon=2 * window + self._local.prefetch + 2)
        spec_args = dict(offset=offset, per=per, remote_ks=ks)
        if isinstance(self.order, WindowOrder):  # the actors rebuild the order, and share its units
            # The board keeps a unit while the batches asked for are within the calls in flight (and one) of
            # its last batch, counted in batches (a fixed share's places skip this node's; with
            # "auto" the feed's places run at most twice the calls in flight ahead: 4 * actors + 2 < keep).
            keep = (calls_in_flight(self._actors or 1) + 1) * (-(-len(self) // per) + 1)
            units = self._units_handle()
            import_ray().get(units.begin.remote(self._pools, keep), timeout=self.timeout)
            spec_args.update(shard_starts=self.order.shard_starts, shuffle_window=self.order.shuffle_window,
                             units=units)
        return Execution(self, self._shared, epoch, start, self._pools, count, spec_args)

    def _units_handle(self) -> Any:
        """The loader's UnitBoard (the window order's units), on the trainer's node, made once."""
        if self._units is None:
            ray = import_ray()
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            where = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
            self._units = ray.remote(num_cpus=0, scheduling_strategy=where)(UnitBoard).remote()
        return self._units
