"""gdsio.data.ray: decode and augment on CPU-only nodes with Ray, train on the GPU nodes.

Where a GPU node's own CPUs and GPU cannot keep up with its step, CPU-only
nodes of a Ray cluster make part of the batches, and the GPU node's loader
merges both streams in the epoch's order:

    this node:  gdsio.Loader's own pipeline (reads, decode and transform on the
                loader's device) makes the batches it keeps        --+
    CPU nodes:  a pool of Ray actors placed by resources or node    +--> (images, labels)
                labels, each running gdsio's CPU path               |    in batch order
                (gdsio.Loader's producer, cpu), one call a batch  --+

Each batch is one actor call and one object of Ray's object store, which
the consumer maps. A fused chain ending in a float cast (``ToDtype``, then
``Normalize``) crosses as uint8 and the consumer's device casts (the same
fused kernel, the same bits): for a GPU one copy into pinned memory, on the
CPU the cast writes the batch straight from the block (any other batch on
the CPU is the block itself, the consumer's alone). ``cast_on="cpu_nodes"``
runs the whole chain there.

A batch is the same whichever side makes it: randomness comes from (seed,
epoch, sample index), so a remote batch is bit-identical to what
``gdsio.Loader(..., device="cpu")`` gives for it. ``local_share`` is the
fraction this node makes; ``"auto"`` sets it from costs it measures as it runs
(``offload_plan``'s model), the consumer's waits kept as a guard.
``epochs_per_pool=N`` keeps one execution (one actor pool) for N
consecutive epochs, so no epoch after the first waits for a pool to start.

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

from ..offload_plan import OffloadPlan, offload_plan
from .loader import Loader, OffloadStats
from .remote import EXTRA, dataset

__all__ = ["EXTRA", "Loader", "OffloadPlan", "OffloadStats", "dataset", "offload_plan"]
