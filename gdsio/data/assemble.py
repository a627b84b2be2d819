"""The loader thread's last step for a batch: its kept samples made one batch,
stacked as they are or through the pass's transform: gdsio's batch transforms
over the whole batch (with ``current_batch()`` set, the crop boxes drawn before
decoding passed on), any other transform on each sample, as a DataLoader runs
it. Package-internal (gdsio.data.producer)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..transforms.classes import BatchInfo, BatchTransform, batch_context

__all__: list[str] = []  # the producer's; nothing here is API


def assemble(plan: Any, cuda: bool, batch_no: int, indices: np.ndarray, keep: list[int], samples: list[Any],
             buf: Any = None, regions: dict[int, tuple[int, int, int, int]] | None = None) -> Any:
    """Batch `batch_no` of the pass `plan` (a PassPlan) from the samples at positions `keep` of `indices`:
    `samples[r]` each, or the rows of `buf` (a raw kind's batch buffer, the records read into it); `regions`:
    position -> (image height, image width, top, left) of an image decoded only for its crop's box."""
    t = plan.table
    kept_idx = indices[keep]
    names: list[str] | None = None
    if buf is not None:
        rows = buf if len(keep) == len(indices) else buf[torch.as_tensor(keep, device=buf.device)]
        batch = rows.view(t.record_dtype).view(len(keep), *t.record_shape)
        if plan.transform is None:
            return batch  # read straight into the batch: no copy
        chosen = list(batch.unbind(0))
    else:
        chosen = [samples[r] for r in keep]
        names = [t.describe(i) for i in kept_idx.tolist()]
        if plan.transform is None:
            return collate(chosen, names)
    if not isinstance(plan.transform, BatchTransform):
        return _per_sample(plan, batch_no, chosen, kept_idx)
    boxes = None
    if regions:
        boxes = np.full((len(keep), 4), -1, np.int64)
        for k, r in enumerate(keep):
            if r in regions:
                boxes[k] = regions[r]
    taken: list[Any] = []

    def alloc(shape: tuple[int, ...], dtype: Any) -> Any:
        # Host batches from the Loader's reused buffers (no page faults on
        # every byte of every batch); free again once the consumer drops them.
        b = plan.buffers.take(shape, dtype)
        taken.append(b)
        return b.view(b.shape)  # a tensor of its own: the pool sees the consumer hold it

    try:
        with batch_context(BatchInfo(plan.order.seed, plan.epoch, kept_idx, boxes, None if cuda else alloc)):
            out = plan.transform(chosen)
    except Exception as e:
        e.add_note(f"in the transform of gdsio.Loader, batch {batch_no} of epoch {plan.epoch}")
        raise
    finally:
        for b in taken:
            plan.buffers.release(b)
    if isinstance(out, (list, tuple)):
        return collate(list(out), names)
    if not isinstance(out, torch.Tensor) or out.dim() < 1 or out.shape[0] != len(chosen):
        got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise ValueError(f"the transform must return a batch of {len(chosen)} samples (a tensor (N, ...)); got {got}")
    return out


def _per_sample(plan: Any, batch_no: int, chosen: list[Any], kept_idx: np.ndarray) -> Any:
    """A transform that is not gdsio's (a torchvision v2 transform, a
    function of one tensor) runs on each sample, as in a DataLoader; the
    outputs are stacked. current_batch() names the one sample."""
    outs = []
    for k, (sample, index) in enumerate(zip(chosen, kept_idx.tolist())):
        try:
            with batch_context(BatchInfo(plan.order.seed, plan.epoch, kept_idx[k : k + 1])):
                out = plan.transform(sample)
        except Exception as e:
            e.add_note(f"in the transform of gdsio.Loader, run on sample {index} ('{plan.table.describe(index)}'), "
                       f"batch {batch_no} of epoch {plan.epoch}")
            raise
        if not isinstance(out, torch.Tensor):
            raise TypeError(
                f"the transform must return a tensor for each sample; it returned {type(out).__name__} for sample "
                f"{index} ('{plan.table.describe(index)}'). A transform that is not a gdsio.data transform runs on "
                "each sample (a tensor); one of the whole batch goes in gdsio.data.BatchLambda"
            )
        outs.append(out)
    return collate(outs, [plan.table.describe(i) for i in kept_idx.tolist()], per_sample=True)


def collate(samples: list[Any], names: list[str] | None, per_sample: bool = False) -> Any:
    """The samples stacked; samples of different shapes are a ValueError naming the first two (by `names`)."""
    shapes = [tuple(s.shape) for s in samples]
    for k, shape in enumerate(shapes[1:], start=1):
        if shape != shapes[0]:
            a = f" ('{names[0]}')" if names else ""
            b = f" ('{names[k]}')" if names else ""
            if per_sample:
                raise ValueError(
                    f"the transform, run on each sample, gave outputs of different shapes: {shapes[0]}{a} and "
                    f"{shape}{b}; they are stacked into one batch, so end the transform with a fixed size, e.g. "
                    "v2.Resize((224, 224)) or v2.Resize(256) then v2.CenterCrop(224) (or v2.RandomResizedCrop(224)), "
                    "or use gdsio.data.Compose([gdsio.data.Resize(256), gdsio.data.CenterCrop(224)])"
                )
            raise ValueError(
                f"samples of one batch differ in shape: {shapes[0]}{a} and {shape}{b}; pass a transform that "
                "fixes the size, e.g. gdsio.data.Compose([gdsio.data.Resize(256), gdsio.data.CenterCrop(224)])"
            )
    return torch.stack(samples)
