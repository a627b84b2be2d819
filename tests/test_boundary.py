"""The extension's boundary: no binding trusts an address.

Every binding of gdsio._core that writes memory takes array objects and checks
them in C++ (csrc/bindings/arrays.hpp). tests/boundary/cases_*.py list, for
each such binding, calls with a destination on the wrong device, with the
wrong strides and too small (and more where it matters); each must raise
ValueError or TypeError naming the argument, before any byte moves. They run
here in-process on the installed module, and again in a subprocess on a
build of the module under AddressSanitizer and UndefinedBehaviorSanitizer
(tests/boundary/asan_core.py), where a write past an array's end would stop
the process with a report instead of passing unseen.
"""

from __future__ import annotations

import importlib
import json
import re
from pathlib import Path

import pytest

from boundary import asan_core
from gdsio import _core

HERE = Path(__file__).resolve().parent
MODULES = sorted(p.stem for p in (HERE / "boundary").glob("cases_*.py"))

# The bindings that write into memory the caller hands them. A new one is
# added here and to a cases file; test_every_writer_has_its_cases holds them together.
WRITERS = {
    "tf_resize", "tf_pad", "tf_color",
    "img_decode_pixels_cpu", "img_decode_pixels_cuda", "nvjpeg_decode_batch", "jpeg_cpu_decode",
    "jpeg_cpu_decode_many",
    "read", "staged_read_host_engine", "read_paths", "read_file_into", "StagingRing.copy",
    "cufile_register_buffer",  # cuFile writes into a registered buffer later, by DMA
}
KINDS = ("wrong device", "wrong stride", "too small")
# "out: has shape ...", "images[3]: is on cpu ...", "jobs[0].dst: ...".
NAMED = re.compile(r"^[A-Za-z_][\w.]*(\[\d+\])?(\.\w+)?: ")


def _cases(core) -> dict[tuple[str, str, str], object]:
    out = {}
    for name in MODULES:
        mod = importlib.import_module(f"boundary.{name}")
        for binding, calls in mod.writers(core).items():
            for kind, call in calls.items():
                out[(name, binding, kind)] = call
    return out


CASES = _cases(_core)


def test_every_writer_has_its_cases():
    have: dict[str, set[str]] = {}
    for _, binding, kind in CASES:
        have.setdefault(binding, set()).add(kind)
    missing = {b: sorted(set(KINDS) - have.get(b, set())) for b in WRITERS if set(KINDS) - have.get(b, set())}
    assert not missing, f"bindings that write without their boundary cases: {missing}"
    assert set(have) <= WRITERS, f"cases for bindings not listed in WRITERS: {sorted(set(have) - WRITERS)}"


@pytest.mark.parametrize("key", sorted(CASES), ids=lambda k: f"{k[1]}-{k[2]}".replace(" ", "_"))
def test_a_bad_array_raises_naming_the_argument(key):
    with pytest.raises((ValueError, TypeError)) as e:
        CASES[key]()
    assert NAMED.match(str(e.value)), f"{key}: the message does not start with the argument: {e.value}"


# Runs every case on the ASan module and prints one JSON line per case.
_SCRIPT = r"""
import importlib, json, sys
import _core
sys.modules["gdsio._core"] = _core
names = sys.argv[1:]
for name in names:
    mod = importlib.import_module("boundary." + name)
    for binding, calls in mod.writers(_core).items():
        for kind, call in calls.items():
            try:
                call()
                got = ["none", ""]
            except (ValueError, TypeError) as e:
                got = [type(e).__name__, str(e)]
            print(json.dumps([name, binding, kind, *got]), flush=True)
print("done", flush=True)
"""


@pytest.mark.skipif(asan_core.unavailable() is not None, reason=f"no ASan build here: {asan_core.unavailable()}")
def test_every_case_raises_under_asan():
    r = asan_core.run(_SCRIPT, *MODULES)
    assert r.returncode == 0 and r.stdout.rstrip().endswith("done"), (
        f"the ASan run stopped (rc {r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-6000:]}")
    rows = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("[")]
    assert len(rows) == len(CASES)
    silent = [row[:3] for row in rows if row[3] == "none"]
    assert not silent, f"calls that raised nothing under ASan: {silent}"
    unnamed = [row for row in rows if not NAMED.match(row[4])]
    assert not unnamed, f"messages that do not name the argument: {unnamed}"


def test_no_binding_takes_an_address():
    # An address crosses only as an array; ints that remain are CUDA stream
    # handles (torch.cuda.Stream.cuda_stream), which the runtime checks.
    allowed = {"stream"}
    found = []
    for src in sorted((HERE.parent / "csrc" / "bindings").glob("*.cpp")):
        for m in re.finditer(r"std::uintptr_t\s+(\w+)\s*[,)]", src.read_text()):
            if m.group(1) not in allowed:
                found.append(f"{src.name}: {m.group(1)}")
    assert not found, f"bindings that take an address as an int: {found}"


def test_a_torch_tensor_and_its_dlpack_give_one_view():
    # torch tensors take a shorter road to the same capsule (arrays.cpp's
    # torch_exporter); anything with __dlpack__ takes the public one.
    import torch

    class Only:  # __dlpack__ and nothing else
        def __init__(self, t):
            self.t = t

        def __dlpack__(self, **kw):
            return self.t.__dlpack__(**kw)

    t = torch.arange(2 * 3 * 5, dtype=torch.int32).reshape(2, 3, 5).permute(2, 0, 1)[1:]
    fast, public = _core.array_view(t, "t"), _core.array_view(Only(t), "t")
    assert fast.protocol in ("torch", "dlpack") and public.protocol == "dlpack"
    for f in ("data", "shape", "strides", "dtype", "device", "readonly", "extent_bytes", "contiguous"):
        assert getattr(fast, f) == getattr(public, f), f
    assert fast.data == t.data_ptr() and fast.strides == list(t.stride())
    with pytest.raises(ValueError, match="^t: .*require gradient"):
        _core.array_view(torch.zeros(2, requires_grad=True), "t")
