"""gdsio.data.ray.Loader(local_share="auto"): the share this node makes, set
to the balance point of gdsio.data.offload_plan's model (``best_split``) from
costs the pass measures as it runs, the consumer's waits kept as a guard.

The model (the planner's): this node's cores spend ``make`` CPU seconds on a
batch made here and ``receive`` on one a CPU node made; the CPU nodes make
``remote`` batches a second. At share s this node's CPU per batch is
``s * make + (1 - s) * receive`` against what its cores give it a second
(``budget``), and the CPU nodes make ``1 - s`` of the batches; the share
where both run out at once gives the consumer the most.

Measured per batch handed over (a ``Window``, from the pass's running
``Gauges``): this process's CPU time less the consumer thread's, the feed
thread's (receiving), the batches each side made or took in meanwhile (handed
over or queued), the wall time this node's producer worked (not blocked on
its full queue: its CPU over that time is its budget, what the machine's
other work leaves it), and each remote batch's maker seconds, per node. Each
side's first ``STARTUP`` batches (of the pass here, of the actor pool there)
are its start-up and do not count: the second still carried the pool's and
the producer's start (a receive cost 10-20x the steady one, and the model's
first point from it sent the share to 0.06-0.16:
bench/results/ray-pinned-2026-12-04-convergence.md). After ``MEASURED``
batches of each side the
share goes to the model's point; later windows refine it as moving averages
(``HORIZON``). A batch the consumer waited for still moves the share away
from the side that made it, by ``GUARD_STEP`` around the model's point
(fading by ``GUARD_DECAY`` a batch), or by ``AUTO_STEP`` before the model has
its figures.

Package-internal (``__all__`` is empty; used by gdsio.data.ray.passes):
``AutoShare``, ``Window``, ``Gauges``, ``thread_cpu`` and the constants."""

from __future__ import annotations

import collections
import dataclasses
import math
import os
import time
from typing import Any

from ..offload_plan import best_split

__all__: list[str] = []  # the mechanics of gdsio.data.ray.Loader; nothing here is API

AUTO_START = 0.5  # local_share="auto" starts here
AUTO_STEP = 0.05  # before the model has its figures: how far one waited-for batch moves the share
AUTO_WAITED = 0.1  # a batch "was waited for" when the wait is this share of the step
STARTUP = 2  # a side's first batches (of the pass here, of the actor pool there): its start-up, not counted
MEASURED = 2  # batches of each side, after its start-up, before the model sets the share
HORIZON = 16.0  # the moving averages' memory, in batches (a window's weight falls by 1/HORIZON a batch)
# Once modelled: a waited-for batch moves the share this far from the model's point, the nudges fade by
# GUARD_DECAY a batch (the share returns to the point) and go at most GUARD_MAX from it. Small: the waits lean
# to the CPU nodes' side whatever the split (their pipeline is shallower: 2 * actors + 1 calls in flight
# against the local producer's queue): at 0.02 a wait the nudges reached +0.13 over a kept pool's passes
# and "auto" ran 10% below a fixed 0.5 (bench/results/ray-pinned-2026-12-04-auto.md, run 1).
GUARD_STEP = 0.01
GUARD_DECAY = 0.9
GUARD_MAX = 0.1
# A counted window's CPU enters make or receive at most CLIP times their figure so far a batch: the process has
# bursts (150-200 ms of CPU in a 30 ms step's window, neither making nor receiving a batch) that pulled the
# share 0.1-0.3 away for some 16 batches. A window of a stall (the consumer waited half of it or more) before the
# model has its point is not counted at all: the pool's fourth batch stalled 150-400 ms with such a burst in
# every traced run (bench/results/ray-pinned-2026-12-04-convergence.md).
CLIP = 2.0
STALL = 0.5
SEND_STEP = 0.005  # a smaller change of the share is not sent to the board (the decisions need no finer step)


@dataclasses.dataclass(frozen=True)
class Window:
    """What happened between two batches handed over: `side` made the
    second ("local" or "remote"). The figures below count only where `timed`
    (a pass's first window has nothing to compare with); a side's `first`
    batch is its start-up. CPU and wall times in seconds, counts in batches."""

    side: str
    wait_s: float = 0.0  # the consumer's wait for the batch
    wall_s: float = 0.0  # since the batch before
    first: bool = False
    timed: bool = False
    cpu_s: float = 0.0  # this process's CPU time, less the consumer thread's (the producer's work and the feed's)
    receive_cpu_s: float | None = None  # the feed thread's (None: not known, e.g. a new feed)
    made: int = 0  # batches this node's producer finished (handed over or queued)
    received: int = 0  # batches the feed took in (handed over or queued)
    busy_s: float = 0.0  # wall time this node's producer worked: running, not blocked on its full queue
    node: str | None = None  # a remote batch: the node that made it
    seconds: float = 0.0  # a remote batch: its maker's wall time for it


@dataclasses.dataclass(frozen=True)
class Gauges:
    """The running figures a pass reads at each batch handed over (``Window``s are their differences)."""

    cpu_s: float  # time.process_time() - time.thread_time() in the consumer's thread
    feed: Any  # the feed thread's identity (a new one restarts its clock), or None
    feed_cpu_s: float | None  # its CPU time (None: not known)
    local_queued: int  # batches made here, not yet handed over
    remote_queued: int  # batches taken in by the feed, not yet handed over
    blocked_s: float  # the producer's time blocked on its full queue or waiting for the board, over the pass
    producing: bool  # this node's producer is running


def thread_cpu(native_id: int | None) -> float | None:
    """CPU seconds of this process's thread `native_id` (Linux: its thread CPU clock), None if unknown."""
    if native_id is None:
        return None
    try:  # MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED) of linux/posix-timers.h; refused for another process's
        return time.clock_gettime((~native_id << 3) | 6)
    except (OSError, OverflowError, AttributeError):
        return None


class _Ratio:
    """A moving ratio: sums of numerators and denominators, each window's weight falling by 1/HORIZON a batch."""

    def __init__(self) -> None:
        self.num = self.den = 0.0

    def add(self, num: float, den: float) -> None:
        keep = 1.0 - 1.0 / HORIZON
        self.num, self.den = keep * self.num + num, keep * self.den + den

    def add_clipped(self, num: float, den: float) -> None:
        """add, `num` at most CLIP times the value so far for max(den, 1) (no value yet: as it is)."""
        v = self.value()
        self.add(num if v is None else min(num, CLIP * v * max(den, 1.0)), den)

    def value(self) -> float | None:
        return self.num / self.den if self.den > 0 else None


class AutoShare:
    """The share controller (see the module's docstring): ``observe`` a
    ``Window`` per batch handed over, read ``share``. Deterministic: it reads
    no clock (``step`` turns the pass's ``Gauges`` into windows).

    Args:
        actors: the actor pool's size (each actor makes its batches in turn).
        cores: the most CPU a second this node's producer can have (None: the CPUs this process may run on).
        share: where it starts.
    """

    def __init__(self, actors: int, cores: float | None = None, share: float = AUTO_START) -> None:
        cores = len(os.sched_getaffinity(0)) if cores is None else cores
        self.actors, self.cores = max(1, actors), max(1e-9, float(cores))
        self.share = float(share)
        self.model: float | None = None  # the model's balance point (None: too few figures yet)
        self.nudge = 0.0
        self.measured = {"local": 0, "remote": 0}  # batches counted, each side (after its start-up)
        self.handed = {"local": 0, "remote": 0}  # batches handed over, each side (this pass / this pool)
        self._make, self._receive, self._budget = _Ratio(), _Ratio(), _Ratio()
        self._nodes: dict[str, _Ratio] = {}  # node -> seconds per batch
        self._recent: collections.deque[str] = collections.deque(maxlen=max(4, 2 * self.actors))
        self._last: Gauges | None = None

    # ---- what the pass tells it -----------------------------------------------------------

    def begin_pass(self) -> None:
        """A new pass: a new producer here (its first batch is a start-up), no gauges to compare with yet."""
        self._last = None
        self.handed["local"] = 0

    def begin_pool(self) -> None:
        """A new actor pool: its first batches are a start-up."""
        self.handed["remote"] = 0

    def lost_nodes(self) -> None:
        """Every CPU node lost: their figures go (a later pool is measured afresh); this node makes the rest."""
        self._receive, self._nodes, self.model = _Ratio(), {}, None
        self._recent.clear()
        self.measured["remote"] = 0
        self.begin_pool()

    def step(self, side: str, first: bool, wait_s: float, wall_s: float, g: Gauges, node: str | None = None,
             seconds: float = 0.0) -> float:
        """A batch of `side` handed over (`first`: the side's start-up), with the gauges read then: its
        window observed (timed from the last gauges of this pass); the share."""
        last, self._last = self._last, g
        w = Window(side, wait_s, wall_s, first=first, node=node, seconds=seconds)
        if last is not None:
            same_feed = g.feed is not None and g.feed == last.feed
            feed_cpu = (g.feed_cpu_s - last.feed_cpu_s if same_feed and g.feed_cpu_s is not None
                        and last.feed_cpu_s is not None else None)
            w = dataclasses.replace(
                w, timed=True, cpu_s=max(0.0, g.cpu_s - last.cpu_s),
                receive_cpu_s=None if feed_cpu is None else max(0.0, feed_cpu),
                made=max(0, (side == "local") + g.local_queued - last.local_queued),
                received=max(0, (side == "remote") + g.remote_queued - last.remote_queued),
                busy_s=max(0.0, wall_s - (g.blocked_s - last.blocked_s)) if g.producing and last.producing else 0.0)
        return self.observe(w)

    # ---- the controller ---------------------------------------------------------------------

    def observe(self, w: Window) -> float:
        """One window: its costs into the moving averages (once both sides have handed over their ``STARTUP``
        batches, and not a window ending one of them), the model's point once each side has ``MEASURED``
        counted batches, and the guard's nudge; the share."""
        if w.side not in self.measured:
            raise ValueError(f"side must be 'local' or 'remote', got {w.side!r}")
        if w.first:
            self.handed[w.side] = 0
        counted = all(n >= STARTUP for n in self.handed.values())
        self.handed[w.side] += 1
        if counted:
            self.measured[w.side] += 1
            self._costs(w)
        waited = not w.first and w.wall_s > 0 and w.wait_s >= AUTO_WAITED * w.wall_s
        away = (1.0 if w.side == "remote" else -1.0) if waited else 0.0  # waited for it: less of that side
        model = self._model()
        if model is None:
            self.share = _clamp(self.share + away * AUTO_STEP)
            return self.share
        if self.model is None:
            self.nudge = 0.0  # the waits before the model's first point were the start's
        self.model = model
        self.nudge = max(-GUARD_MAX, min(GUARD_MAX, GUARD_DECAY * self.nudge + away * GUARD_STEP))
        self.share = _clamp(model + self.nudge)
        return self.share

    def _costs(self, w: Window) -> None:
        """A counted window's figures: the maker's seconds of a remote batch; where timed (and not a stall
        before the model's point), the CPU of making here (the process's less the feed's, per batch made), of
        receiving (the feed's, per batch taken in), each clipped (CLIP), and what this node's cores gave (the
        process's CPU over the producer's busy time)."""
        if w.side == "remote" and w.seconds > 0 and w.node is not None:
            self._nodes.setdefault(w.node, _Ratio()).add(w.seconds, 1.0)
            self._recent.append(w.node)
        if not w.timed or (self.model is None and w.wall_s > 0 and w.wait_s >= STALL * w.wall_s):
            return
        # Every counted window's CPU goes in, whether or not a batch was finished in it: a batch made here
        # takes the producer's CPU of the windows before it too (dropping those halved `make` at a share of
        # 0.5, bench/results/ray-pinned-2026-12-04-convergence.md), and the feed's likewise.
        receive = w.receive_cpu_s if w.receive_cpu_s is not None else 0.0
        self._make.add_clipped(max(0.0, w.cpu_s - receive), w.made)
        if w.busy_s > 0:
            self._budget.add(w.cpu_s, w.busy_s)
        if w.receive_cpu_s is not None:
            self._receive.add_clipped(w.receive_cpu_s, w.received)

    def remote_rate(self) -> float | None:
        """Batches a second the actor pool makes: each actor's rate (one batch per its node's seconds), the actors
        spread over the nodes as their recent batches were (each actor makes its batches in turn)."""
        if not self._recent:
            return None
        counts = collections.Counter(self._recent)
        rate = 0.0
        for node, n in counts.items():
            s = self._nodes[node].value()
            if s:
                rate += self.actors * n / len(self._recent) / s
        return rate or None

    def _model(self) -> float | None:
        if min(self.measured.values()) < MEASURED:
            return None
        make, receive, budget, remote = (self._make.value(), self._receive.value(), self._budget.value(),
                                         self.remote_rate())
        if make is None or receive is None or budget is None or remote is None:
            return None
        total, here = best_split(min(budget, self.cores), max(make, 1e-9), receive, remote)
        return here / total if total > 0 else 1.0


def _clamp(share: float) -> float:
    return min(1.0, max(0.0, share)) if math.isfinite(share) else AUTO_START



