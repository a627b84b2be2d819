"""gdsio.data: the loader, its batch transforms and its cache.

>>> from gdsio.data import Loader, Compose, RandomResizedCrop, RandomHorizontalFlip, ToDtype, Normalize
>>> tf = Compose([RandomResizedCrop(224), RandomHorizontalFlip(),
...               ToDtype(torch.float16, scale=True), Normalize(IMAGENET_MEAN, IMAGENET_STD)])
>>> loader = Loader("imagenet/train", 256, transform=tf, device="cuda", shuffle=True)
>>> for images, labels in loader: ...
"""

from __future__ import annotations

from .cache import Cache
from .loader import Loader, SampleError
from .sampler import ShardedOrder
from .sources import UNLABELED, FileList, SampleTable, scan
from .transforms import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    BatchInfo,
    BatchTransform,
    CenterCrop,
    ColorJitter,
    Compose,
    Normalize,
    Pad,
    RandomHorizontalFlip,
    RandomResizedCrop,
    RandomVerticalFlip,
    Resize,
    ToDtype,
    batch_context,
    current_batch,
)

__all__ = [
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "UNLABELED",
    "BatchInfo",
    "BatchTransform",
    "Cache",
    "CenterCrop",
    "ColorJitter",
    "Compose",
    "FileList",
    "Loader",
    "Normalize",
    "Pad",
    "RandomHorizontalFlip",
    "RandomResizedCrop",
    "RandomVerticalFlip",
    "Resize",
    "SampleError",
    "SampleTable",
    "ShardedOrder",
    "ToDtype",
    "batch_context",
    "current_batch",
    "scan",
]
