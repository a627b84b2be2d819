"""gdsio.data: the loader, its batch transforms and its cache.

>>> from gdsio.data import Loader, Compose, RandomResizedCrop, RandomHorizontalFlip, ToDtype, Normalize
>>> tf = Compose([RandomResizedCrop(224), RandomHorizontalFlip(),
...               ToDtype(torch.float16, scale=True), Normalize(IMAGENET_MEAN, IMAGENET_STD)])
>>> loader = Loader("imagenet/train", 256, transform=tf, device="cuda", shuffle=True)
>>> for images, labels in loader: ...
"""

from __future__ import annotations

from .cache import Cache
from . import disk_cache  # noqa: F401 - declares Cache(where="disk")
from .dataset import SampleDataset
from ..errors import SampleError
from .loader import Loader
from .sampler import ShardedOrder, WindowOrder
from .shard_write import write_shards
from .sources import UNLABELED, FileList, SampleTable, scan
from ..transforms.classes import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    BatchInfo,
    BatchLambda,
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
    "BatchLambda",
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
    "SampleDataset",
    "SampleError",
    "SampleTable",
    "ShardedOrder",
    "ToDtype",
    "WindowOrder",
    "batch_context",
    "current_batch",
    "scan",
    "write_shards",
]


def __dir__() -> list[str]:
    # dir() and tab completion show the API (and the dunders), not what was imported to build it (np, torch, Any).
    return sorted({*__all__, *(n for n in globals() if n.startswith("__") and n.endswith("__"))})
