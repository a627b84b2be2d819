"""gdsio.transforms.base: every size argument follows one rule, as torchvision's
_setup_size does: TypeError for a value of the wrong type, ValueError for
one of the wrong length or a size that is not positive, each naming the
argument."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import gdsio.transforms as T
from gdsio.data import CenterCrop, RandomResizedCrop, Resize
from gdsio.transforms.base import size_arg, size_pair

IMG = torch.zeros(3, 20, 30, dtype=torch.uint8)

# Every entry point that takes a size: (name in messages, call with the size).
TAKERS = {
    "resize": ("size", lambda s: T.resize(IMG, s)),
    "resized_crop": ("size", lambda s: T.resized_crop(IMG, 0, 0, 10, 10, s)),
    "center_crop": ("output_size", lambda s: T.center_crop(IMG, s)),
    "resized_crop_flip_normalize": ("size", lambda s: T.resized_crop_flip_normalize(
        IMG[None], [[0, 0, 10, 10]], [False], s, None, None, dtype=torch.float32)),
    "Resize": ("size", Resize),
    "CenterCrop": ("size", CenterCrop),
    "RandomResizedCrop": ("size", RandomResizedCrop),
}


def test_the_rule():
    assert size_arg(224, "size") == (224,) and size_arg(np.int64(7), "size") == (7,)
    assert size_arg([256], "size") == (256,) and size_arg((224, 160), "size") == (224, 160)
    assert size_pair(5, "size") == (5, 5) and size_pair([5], "size") == (5, 5) and size_pair([5, 6], "size") == (5, 6)


@pytest.mark.parametrize("taker", list(TAKERS))
@pytest.mark.parametrize("bad", ["big", 2.5, [2.5, 3], None, True, {"h": 2}])
def test_a_wrong_type_is_a_type_error(taker, bad):
    name, call = TAKERS[taker]
    if taker in ("resize", "resized_crop") and bad is None:
        # v2's resize takes size=None with max_size; without it that is a ValueError naming max_size.
        with pytest.raises(ValueError, match="size=None needs max_size"):
            call(bad)
        return
    with pytest.raises(TypeError, match=f"^{name} must be an int or a sequence of 1 or 2 ints"):
        call(bad)


@pytest.mark.parametrize("taker", list(TAKERS))
@pytest.mark.parametrize("bad, words", [((1, 2, 3), "got 3 of them"), ([], "got 0 of them"), (0, "must be positive"),
                                        (-4, "must be positive"), ([0, 5], "must be positive")])
def test_a_wrong_value_is_a_value_error(taker, bad, words):
    name, call = TAKERS[taker]
    with pytest.raises(ValueError, match=f"^{name} must ") as e:
        call(bad)
    assert words in str(e.value)


def test_one_size_is_the_shorter_side_for_resize_as_in_torchvision():
    # gdsio.transforms.resize and gdsio.data.Resize read [n] alike: the shorter side.
    assert T.resize(IMG, [10]).shape == (3, 10, 15)
    assert Resize([10]).output_size(20, 30) == (10, 15) == Resize(10).output_size(20, 30)
    assert Resize((10, 12)).output_size(20, 30) == (10, 12)
