"""The one device rule of every public entry point that takes a device.

``resolve_device`` turns what a caller wrote ('cpu', 'cuda', 'cuda:N', an int
or a ``torch.device``) into a ``torch.device`` of type cpu, or cuda with its
index, checked usable. Every entry point goes through it, so a bad spelling,
a missing GPU and a GPU index out of range read the same everywhere.

>>> from gdsio.device import resolve_device
>>> resolve_device("cpu", what="cannot read 'a.bin'")
device(type='cpu')
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import _core
from .platform import nvidia

# torch is imported inside the functions that use it: `import gdsio` imports this module and
# stays light (no torch) for host reads into numpy buffers (tests/test_build.py).
if TYPE_CHECKING:
    import torch

__all__ = ["DEVICE_SPELLINGS", "parse_device", "require_cuda", "resolve_device"]

# torch is imported at first use, here and in the rest of the read path:
# `import gdsio` stays light (no torch) for host reads into numpy buffers
# and for the command line.

DEVICE_SPELLINGS = "'cpu', 'cuda', 'cuda:N', an int or a torch.device"


_PARSED: dict[str, Any] = {}  # device strings already parsed -> their torch.device


def parse_device(device: Any, *, arg: str = "device") -> "torch.device":
    """``device`` as a ``torch.device`` of type cpu or cuda (index None for the
    current device), without asking whether CUDA works.

    Raises:
        ValueError: naming ``arg``, for anything else (an int is a CUDA index).
    """
    if type(device) is str:
        hit = _PARSED.get(device)
        if hit is not None:  # every read names its device: "cpu" needs no torch.device built each time
            return hit
    import torch

    if isinstance(device, int) and not isinstance(device, bool):
        if device < 0:
            raise ValueError(f"{arg} must be {DEVICE_SPELLINGS}; got {device!r}")
        return torch.device("cuda", device)
    if isinstance(device, (str, torch.device)):
        try:
            d = torch.device(device)
        except (RuntimeError, TypeError, ValueError):
            d = None
        if d is not None and d.type in ("cpu", "cuda"):
            d = torch.device("cpu") if d.type == "cpu" else d
            if type(device) is str and len(_PARSED) < 64:
                _PARSED[device] = d  # torch.device is immutable
            return d
    raise ValueError(f"{arg} must be {DEVICE_SPELLINGS}; got {device!r}")


def require_cuda(what: str, index: int | None = None, *, arg: str = "device") -> "torch.device":
    """The torch.device ``cuda:index`` (None: the current device) when gdsio and
    torch can both use it.

    Raises:
        BackendUnavailable: saying ``what`` could not be done, the one cause,
            and the hint to pass ``arg="cpu"``.
        ValueError: naming ``arg`` when the index does not exist.
    """
    # Through the module, so that one stand-in (tests) covers every caller.
    why = nvidia.cuda_unusable_reason() or nvidia.torch_cuda_unusable_reason()
    if why:
        raise _core.BackendUnavailable(f"{what}: {why}; {nvidia.cpu_hint(arg)}")
    import torch

    count = torch.cuda.device_count()
    if index is None:
        index = torch.cuda.current_device()
    elif not 0 <= index < count:
        raise ValueError(f"{arg}=cuda:{index} does not exist ({count} CUDA device(s) visible)")
    return torch.device("cuda", index)


def resolve_device(device: Any, *, what: str, arg: str = "device") -> "torch.device":
    """``device`` parsed and, for CUDA, checked usable: ``cpu`` or ``cuda:N``.

    Args:
        device: 'cpu', 'cuda' (the current device), 'cuda:N', an int or a torch.device.
        what: the start of the error message, e.g. "cannot read 'a.bin' into cuda".
        arg: the argument's name as the caller spells it ('device', 'where', '--device').

    Returns:
        torch.device: type cpu, or cuda with an index.

    Raises:
        ValueError: for a spelling that names no cpu or cuda device, or an index out of range.
        BackendUnavailable: when CUDA is not usable here (the one cause, and the hint).
    """
    d = parse_device(device, arg=arg)
    return d if d.type == "cpu" else require_cuda(what, d.index, arg=arg)
