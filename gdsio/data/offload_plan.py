"""How many CPU-only nodes keep a GPU node fed: arithmetic over measured costs.

The decision before a heterogeneous cluster: the GPU step needs
``steps_per_s * batch_size`` images a second. The GPU node's free cores
(``local_cores``) both make images (``ms_per_image`` of CPU each) and receive
the ones the CPU nodes made (``receive_ms_per_image`` each: taking the batch
out of Ray's object store is not free); a CPU node of ``node_cores`` cores
makes ``node_cores * 1000 / remote_ms_per_image`` images a second (its cores
need not be the GPU node's: ``remote_ms_per_image`` is measured on it, Ray's
processes there included). An image sent saves the GPU node
``ms_per_image - receive_ms_per_image`` of CPU, so offloading pays only while
receiving costs less than making, and the GPU node's cores cap what it can
take in at ``local_cores * 1000 / receive_ms_per_image`` images a second
however many nodes are added.

No Ray needed: the inputs are measured (``gdsio offload-plan --measure
DATASET`` measures all three on a sample: ``gdsio.data.offload_measure``) or
given, and priced by the user; ``gdsio offload-plan`` prints the plan. Costs
are CPU time (user + system), not wall time: they do not move with the
machine's load.
"""

from __future__ import annotations

import dataclasses
import math

__all__ = ["ASSUMED_RECEIVE_FRACTION", "OffloadPlan", "best_split", "offload_plan"]

# The receive cost taken when none is given (a fraction of ms_per_image), and
# where it comes from: said in every plan that uses it.
ASSUMED_RECEIVE_FRACTION = 0.35
ASSUMED_RECEIVE_SOURCE = ("bench/results/ray-pinned-2026-12-03-run2.md: gdsio.data.ray at f4223cb, a float32 "
                          "chain crossing as uint8, cost the GPU node 0.27 CPU-ms per image received against 0.77 "
                          "to make one")


@dataclasses.dataclass(frozen=True)
class OffloadPlan:
    """The answer of :func:`offload_plan`.

    images_per_s_needed: what the GPU consumes at its step rate.
    local_images_per_s: what the GPU node's free cores make alone.
    node_images_per_s: what one CPU node makes.
    receive_cap_images_per_s: the most the GPU node's free cores can receive
        (inf when receiving is free).
    cpu_nodes: CPU nodes of ``node_cores`` cores to add (0: the node keeps
        up, or offloading does not pay).
    local_share: the fraction of the images the GPU node then makes itself
        (a starting point for ``gdsio.data.ray.Loader(local_share=...)``).
    steps_per_s_alone / steps_per_s_with_nodes: the step rate without and
        with the CPU nodes.
    cost_per_step_alone / cost_per_step_with_nodes: the instances' price
        per step, in the unit of the prices given (per hour -> per step).
    ms_per_image, receive_ms_per_image, remote_ms_per_image, local_cores,
        batch_size, gpu_steps_per_s: the inputs the rates came from.
    assumptions: what was taken without being given (each said in ``str``).
    """

    images_per_s_needed: float
    local_images_per_s: float
    cpu_nodes: int
    node_cores: int
    local_share: float
    steps_per_s_alone: float
    steps_per_s_with_nodes: float
    cost_per_step_alone: float
    cost_per_step_with_nodes: float
    node_images_per_s: float = 0.0
    receive_cap_images_per_s: float = math.inf
    ms_per_image: float = 0.0
    receive_ms_per_image: float = 0.0
    remote_ms_per_image: float = 0.0
    local_cores: float = 0.0
    batch_size: int = 1
    gpu_steps_per_s: float = 0.0
    assumptions: tuple[str, ...] = ()

    def steps_per_s_at(self, local_share: float, cpu_nodes: int | None = None) -> float:
        """The step rate with this node making `local_share` of the images and
        `cpu_nodes` nodes (default: the plan's) the rest.

        Raises:
            ValueError: a share outside [0, 1] or a negative node count (named).
        """
        if isinstance(local_share, bool) or not isinstance(local_share, (int, float)) or not 0 <= local_share <= 1:
            raise ValueError(f"local_share must be a fraction in [0, 1], got {local_share!r}")
        nodes = self.cpu_nodes if cpu_nodes is None else cpu_nodes
        if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 0:
            raise ValueError(f"cpu_nodes must be a non-negative int, got {cpu_nodes!r}")
        s = float(local_share)
        local_ms = s * self.ms_per_image + (1 - s) * self.receive_ms_per_image  # the GPU node's CPU per image
        rates = [self.gpu_steps_per_s * self.batch_size]
        rates.append(self.local_cores * 1000.0 / local_ms if local_ms > 0 else math.inf)
        if s < 1:
            rates.append(nodes * self.node_images_per_s / (1 - s))
        return min(rates) / self.batch_size

    def __str__(self) -> str:
        lines = [f"the GPU consumes {self.images_per_s_needed:,.0f} images/s; this node's cores make "
                 f"{self.local_images_per_s:,.0f} ({self.ms_per_image:.3g} ms/image), one CPU node "
                 f"{self.node_images_per_s:,.0f} ({self.remote_ms_per_image:.3g} ms/image)",
                 f"receiving costs this node {self.receive_ms_per_image:.3g} ms/image: it can take in at most "
                 + ("any rate" if math.isinf(self.receive_cap_images_per_s)
                    else f"{self.receive_cap_images_per_s:,.0f} images/s")]
        if self.cpu_nodes == 0 and self.local_share >= 1.0:
            if self.receive_ms_per_image >= self.ms_per_image and self.steps_per_s_alone < self.gpu_steps_per_s:
                lines.append("no CPU node helps: receiving an image costs this node as much as making it")
            else:
                lines.append("no CPU node is needed: the GPU node keeps itself fed (local_share=1.0)")
        else:
            lines.append(f"add {self.cpu_nodes} CPU node(s) of {self.node_cores} cores; the GPU node makes "
                         f"local_share={self.local_share:.2f} of the batches")
        lines.append(f"steps/s: {self.steps_per_s_alone:.3g} alone -> {self.steps_per_s_with_nodes:.3g} with them")
        ratio = self.cost_per_step_alone / self.cost_per_step_with_nodes if self.cost_per_step_with_nodes else math.inf
        lines.append(f"cost per step: {self.cost_per_step_alone:.4g} alone -> {self.cost_per_step_with_nodes:.4g} "
                     f"with them ({ratio:.2f}x price-performance)")
        lines += [f"assumed: {a}" for a in self.assumptions]
        return "\n".join(lines)


def _positive(name: str, v: object, *, zero: bool = False) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0 or (v == 0 and not zero):
        raise ValueError(f"{name} must be a {'non-negative' if zero else 'positive'} number, got {v!r}")
    return float(v)


def best_split(local_budget: float, make: float, receive: float, remote: float,
               need: float = math.inf) -> tuple[float, float]:
    """The most images a second the GPU node and its CPU nodes give the
    consumer, and how many of those the GPU node makes itself. Every image
    sent saves the GPU node ``make - receive`` of its budget, so it sends as
    many as pay, up to what the CPU nodes make and `need`. The one home of
    this balance, for :func:`offload_plan`'s advice;
    ``gdsio.data.ray.Loader(local_share="auto")`` reaches it as it runs
    without a model (each batch to the side that asks for it first).

    Args:
        local_budget: the GPU node's CPU for preprocessing, per second, in
            the unit of `make` and `receive` (ms/s for costs in ms: 1000 x
            its free cores).
        make, receive: its CPU cost to make an image, and to take in one a
            CPU node made.
        remote: images a second the CPU nodes make together.
        need: images a second the consumer takes at most (inf: no bound).
            Where it binds, the GPU node makes all its budget allows.

    Returns:
        (images a second in all, images a second made on the GPU node); the
        local share is their ratio.
    """
    m, v = make, receive
    x_remote = 0.0
    if v < m:
        x_remote = min(remote, local_budget / v if v > 0 else math.inf, need)
    x_local = max(0.0, (local_budget - x_remote * v) / m)
    if x_remote + x_local > need:  # the GPU's rate binds: make here all the budget allows, send the rest
        x_local = min(need, max(0.0, (local_budget - need * v) / (m - v)) if m > v else local_budget / m)
        x_remote = need - x_local
    return x_remote + x_local, x_local


def offload_plan(
    *,
    ms_per_image: float,
    steps_per_s: float,
    batch_size: int,
    local_cores: float,
    node_cores: int,
    gpu_node_price: float,
    cpu_node_price: float,
    headroom: float = 1.2,
    receive_ms_per_image: float | None = None,
    remote_ms_per_image: float | None = None,
    cpu_nodes: int | None = None,
) -> OffloadPlan:
    """How many CPU nodes keep the GPU fed, and what that does to the cost per step.

    Args:
        ms_per_image: the GPU node's CPU time to read + decode + transform one
            image (one core), in milliseconds (CPU time, not wall time).
        steps_per_s: the GPU's step rate when it never waits for data.
        batch_size: images per step.
        local_cores: the GPU node's cores free for preprocessing (0: none).
        node_cores: cores of one CPU node.
        gpu_node_price, cpu_node_price: the instances' prices, per hour (any
            currency, the same for both).
        headroom: capacity bought above the need (1.2: 20% more), for
            stragglers and the loss of a node.
        receive_ms_per_image: the GPU node's CPU time to take in one image
            made on a CPU node (its process and its Ray processes). None:
            ``ASSUMED_RECEIVE_FRACTION`` of `ms_per_image`, said in the plan.
        remote_ms_per_image: a CPU node's CPU time to make one image (its Ray
            processes included). None: `ms_per_image`, said in the plan.
        cpu_nodes: plan for this many CPU nodes instead of the count that
            covers the need with `headroom`.

    Returns:
        OffloadPlan: nodes to add, the local share to start from, and step
        rates and costs per step with and without them.

    Raises:
        ValueError: an argument that is not a positive number (named).

    Example:
        >>> p = offload_plan(ms_per_image=20.0, steps_per_s=4, batch_size=256, local_cores=12, node_cores=16,
        ...                  gpu_node_price=4.1, cpu_node_price=0.68, receive_ms_per_image=2.0)
        >>> p.cpu_nodes, round(p.local_share, 2), round(p.steps_per_s_alone, 2)
        (1, 0.54, 2.34)
    """
    ms = _positive("ms_per_image", ms_per_image)
    steps = _positive("steps_per_s", steps_per_s)
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
    local = _positive("local_cores", local_cores, zero=True)
    if isinstance(node_cores, bool) or not isinstance(node_cores, int) or node_cores < 1:
        raise ValueError(f"node_cores must be a positive int, got {node_cores!r}")
    gpu_price = _positive("gpu_node_price", gpu_node_price, zero=True)
    cpu_price = _positive("cpu_node_price", cpu_node_price, zero=True)
    head = _positive("headroom", headroom)
    if head < 1:
        raise ValueError(f"headroom must be >= 1 (capacity above the need), got {headroom!r}")
    if cpu_nodes is not None and (isinstance(cpu_nodes, bool) or not isinstance(cpu_nodes, int) or cpu_nodes < 0):
        raise ValueError(f"cpu_nodes must be a non-negative int, got {cpu_nodes!r}")
    assumed = []
    if receive_ms_per_image is None:
        v = ASSUMED_RECEIVE_FRACTION * ms
        assumed.append(f"receive_ms_per_image = {ASSUMED_RECEIVE_FRACTION:g} x ms_per_image ({ASSUMED_RECEIVE_SOURCE}); "
                       f"measure it: gdsio offload-plan --measure DATASET")
    else:
        v = _positive("receive_ms_per_image", receive_ms_per_image, zero=True)
    if remote_ms_per_image is None:
        r = ms
        assumed.append("remote_ms_per_image = ms_per_image (the CPU nodes' cores as fast as this node's)")
    else:
        r = _positive("remote_ms_per_image", remote_ms_per_image)

    need = steps * batch_size
    budget = local * 1000.0  # the GPU node's free CPU, ms per second
    per_node = node_cores * 1000.0 / r
    have = budget / ms
    cap = budget / v if v > 0 else math.inf
    if cpu_nodes is not None:
        nodes = cpu_nodes
    elif have >= need * head or v >= ms:
        nodes = 0  # keeps up alone, or no image sent saves this node anything
    else:
        # The fewest nodes whose images, with what the budget still makes here, cover the need with headroom;
        # past the receive cap more nodes add nothing: stop where they would.
        target = min(need * head, cap)
        nodes = 0
        while best_split(budget, ms, v, nodes * per_node)[0] < target * (1 - 1e-9):
            nodes += 1
    alone = min(steps, have / batch_size)
    rate, made_here = best_split(budget, ms, v, nodes * per_node, need)
    with_nodes = min(steps, rate / batch_size)
    share = made_here / rate if rate > 0 else 1.0

    def per_step(price_per_hour: float, rate: float) -> float:
        return price_per_hour / 3600.0 / rate if rate > 0 else math.inf

    return OffloadPlan(
        images_per_s_needed=need, local_images_per_s=have, cpu_nodes=nodes, node_cores=node_cores, local_share=share,
        steps_per_s_alone=alone, steps_per_s_with_nodes=with_nodes,
        cost_per_step_alone=per_step(gpu_price, alone),
        cost_per_step_with_nodes=per_step(gpu_price + nodes * cpu_price, with_nodes),
        node_images_per_s=per_node, receive_cap_images_per_s=cap, ms_per_image=ms, receive_ms_per_image=v,
        remote_ms_per_image=r, local_cores=local, batch_size=batch_size, gpu_steps_per_s=steps,
        assumptions=tuple(assumed),
    )
