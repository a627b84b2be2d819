"""How many CPU-only nodes keep a GPU node fed: arithmetic over measured costs.

The decision before a heterogeneous cluster: the GPU step needs
``steps_per_s * batch_size`` images a second; the GPU node's own cores make
``local_cores * 1000 / ms_per_image`` of them; CPU nodes of ``node_cores``
cores make the rest. Without them the step runs at the rate the local cores
allow, and the GPU idles for the difference. No Ray needed: the inputs are
measured (``ms_per_image``: ``gdsio.data.ray.Loader.stats().remote_ms_per_sample``
times its ``cpus_per_actor``, or a ``gdsio.Loader(device="cpu")`` epoch on one
thread) and priced by the user; ``gdsio offload-plan`` prints it.
"""

from __future__ import annotations

import dataclasses
import math

__all__ = ["OffloadPlan", "offload_plan"]


@dataclasses.dataclass(frozen=True)
class OffloadPlan:
    """The answer of :func:`offload_plan`.

    images_per_s_needed: what the GPU consumes at its step rate.
    local_images_per_s: what the GPU node's own cores make.
    cpu_nodes: CPU nodes of ``node_cores`` cores to add (0: the node keeps up).
    local_share: the fraction of the batches the GPU node then makes itself
        (a starting point for ``gdsio.data.ray.Loader(local_share=...)``).
    steps_per_s_alone / steps_per_s_with_nodes: the step rate without and
        with the CPU nodes (the GPU's rate once they keep up).
    cost_per_step_alone / cost_per_step_with_nodes: the instances' price
        per step, in the unit of the prices given (per hour -> per step).
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

    def __str__(self) -> str:
        lines = [
            f"the GPU consumes {self.images_per_s_needed:,.0f} images/s; this node's cores make {self.local_images_per_s:,.0f}",
        ]
        if self.cpu_nodes == 0:
            lines.append("no CPU node is needed: the GPU node keeps itself fed (local_share=1.0)")
        else:
            lines.append(f"add {self.cpu_nodes} CPU node(s) of {self.node_cores} cores; the GPU node makes "
                         f"local_share={self.local_share:.2f} of the batches")
        lines.append(f"steps/s: {self.steps_per_s_alone:.3g} alone -> {self.steps_per_s_with_nodes:.3g} with them")
        ratio = self.cost_per_step_alone / self.cost_per_step_with_nodes if self.cost_per_step_with_nodes else math.inf
        lines.append(f"cost per step: {self.cost_per_step_alone:.4g} alone -> {self.cost_per_step_with_nodes:.4g} "
                     f"with them ({ratio:.2f}x price-performance)")
        return "\n".join(lines)


def _positive(name: str, v: object, *, zero: bool = False) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0 or (v == 0 and not zero):
        raise ValueError(f"{name} must be a {'non-negative' if zero else 'positive'} number, got {v!r}")
    return float(v)


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
) -> OffloadPlan:
    """How many CPU nodes keep the GPU fed, and what that does to the cost per step.

    Args:
        ms_per_image: measured read + decode + transform time of one image on
            one CPU core, in milliseconds.
        steps_per_s: the GPU's step rate when it never waits for data.
        batch_size: images per step.
        local_cores: the GPU node's cores free for preprocessing (0: none).
        node_cores: cores of one CPU node.
        gpu_node_price, cpu_node_price: the instances' prices, per hour (any
            currency, the same for both).
        headroom: capacity bought above the need (1.2: 20% more), for
            stragglers and the loss of a node.

    Returns:
        OffloadPlan: nodes to add, the local share to start from, and step
        rates and costs per step with and without them.

    Raises:
        ValueError: an argument that is not a positive number (named).

    Example:
        >>> p = offload_plan(ms_per_image=20.0, steps_per_s=4, batch_size=256, local_cores=12,
        ...                  node_cores=16, gpu_node_price=4.1, cpu_node_price=0.68)
        >>> p.cpu_nodes, round(p.local_share, 2), round(p.steps_per_s_alone, 2)
        (1, 0.59, 2.34)
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

    need = steps * batch_size
    per_core = 1000.0 / ms
    have = local * per_core
    missing = max(0.0, need * head - have)
    nodes = math.ceil(missing / (node_cores * per_core) - 1e-9) if missing > 0 else 0
    alone = min(steps, have / batch_size)
    with_nodes = min(steps, (have + nodes * node_cores * per_core) / batch_size)
    share = min(1.0, have / need)

    def per_step(price_per_hour: float, rate: float) -> float:
        return price_per_hour / 3600.0 / rate if rate > 0 else math.inf

    return OffloadPlan(
        images_per_s_needed=need, local_images_per_s=have, cpu_nodes=nodes, node_cores=node_cores, local_share=share,
        steps_per_s_alone=alone, steps_per_s_with_nodes=with_nodes,
        cost_per_step_alone=per_step(gpu_price, alone),
        cost_per_step_with_nodes=per_step(gpu_price + nodes * cpu_price, with_nodes),
    )
