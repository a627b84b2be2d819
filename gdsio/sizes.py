"""The one rule for size arguments: an int, or a sequence of 1 or 2 ints (h, w).

Every transform that takes a size (gdsio.transforms' resize, center_crop,
resized_crop; gdsio.data's Resize, CenterCrop, RandomResizedCrop) reads it
here, so a mistake raises the same exception everywhere, as torchvision's
``_setup_size`` does: ``TypeError`` when the value is not an int or a
sequence of ints, ``ValueError`` when it is one of the wrong length or holds
a size that is not positive. Each message names the argument.

>>> size_arg(224, "size"), size_arg([256], "size"), size_pair((224, 160), "size")
((224,), (256,), (224, 160))
"""

from __future__ import annotations

import numbers
from typing import Any

__all__ = ["is_int", "size_arg", "size_pair"]


def is_int(v: Any) -> bool:
    """An integer (Python or numpy) that is not a bool."""
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def size_arg(value: Any, name: str) -> tuple[int, ...]:
    """``value`` as a tuple of one (an int or ``[n]``) or two (``[h, w]``) positive ints.

    What a single size means (the shorter side, or a square) is the caller's rule.

    Raises:
        TypeError: naming ``name``, when ``value`` is not an int or a list/tuple of ints.
        ValueError: naming ``name``, for a sequence of other than 1 or 2 sizes, or a size <= 0.
    """
    if is_int(value):
        sizes: tuple[int, ...] = (int(value),)
    elif isinstance(value, (list, tuple)) and all(is_int(v) for v in value):
        sizes = tuple(int(v) for v in value)
    else:
        raise TypeError(f"{name} must be an int or a sequence of 1 or 2 ints, got {value!r}")
    if len(sizes) not in (1, 2):
        raise ValueError(f"{name} must be an int or a sequence of 1 or 2 ints (height, width), got {len(sizes)} of them: {value!r}")
    if any(s <= 0 for s in sizes):
        raise ValueError(f"{name} must be positive, got {value!r}")
    return sizes


def size_pair(value: Any, name: str) -> tuple[int, int]:
    """``value`` as ``(height, width)``: an int or ``[n]`` is the square ``(n, n)``.

    Raises:
        TypeError, ValueError: as ``size_arg``.
    """
    sizes = size_arg(value, name)
    return (sizes[0], sizes[-1])
