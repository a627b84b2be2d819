"""The build says what it is: with CUDA (and for which architectures) or
without, in which case GPU calls raise a clear error."""

from __future__ import annotations

import numpy as np
import pytest

import gdsio
from gdsio import _core


def test_build_flavour(make_file):
    path, _ = make_file(4096)
    if _core.built_with_cuda:
        archs = _core.cuda_architectures.split(",")
        assert archs and all(a.split("-")[0].isdigit() for a in archs)
        assert gdsio.info()["built_with_cuda"] is True
    else:
        assert _core.cuda_architectures == ""
        with pytest.raises(gdsio.BackendUnavailable, match="built without CUDA"):
            gdsio.read(path, device="cuda")
        assert "built without CUDA" in _core.kernel_probe(0)
    # Host reads work in both flavours.
    assert gdsio.read(path, device="cpu").numel() == 4096


def test_import_is_light():
    """Importing gdsio starts no thread of its own (numpy's BLAS may start
    some), loads neither torch nor libcufile/libcuda."""
    code = (
        "import os, sys, numpy; n = len(os.listdir('/proc/self/task')); import gdsio; "
        "maps = open('/proc/self/maps').read(); "
        "print(len(os.listdir('/proc/self/task')) - n, 'torch' in sys.modules, "
        "'libcufile' in maps, 'libcuda.so' in maps)"
    )
    from conftest import run_python

    r = run_python(code)
    assert r.returncode == 0, r.stderr
    out = r.stdout.split()
    assert out == ["0", "False", "False", "False"], out


def test_host_read_needs_no_gpu(make_file):
    path, data = make_file(1 << 16)
    out = np.empty(data.size, np.uint8)
    assert gdsio.read_into(path, out).backend == "posix"
    assert np.array_equal(out, data)


def test_gpu_calls_of_the_v2_ops_say_how_the_build_was_made():
    """pad and the colour ops on a device: a CPU-only build says so."""
    import torch

    if _core.built_with_cuda:
        return  # their GPU behaviour: tests/transforms/test_transforms_v2_gpu.py
    from boundary.fakes import on_device  # host memory described as device 0's

    a = on_device(torch.zeros((3, 4, 5), dtype=torch.uint8))
    out = on_device(torch.empty((3, 4, 5), dtype=torch.uint8))
    ws = on_device(torch.empty(64, dtype=torch.uint8))
    calls = [
        lambda: _core.tf_pad(a, out, left=0, top=0, right=0, bottom=0, mode="edge", fill=[0]),
        lambda: _core.tf_color([a], [out], np.array([[1, 0, 0, 0]], np.int32), np.ones((1, 4)), workspace=ws),
    ]
    for call in calls:
        with pytest.raises(gdsio.BackendUnavailable, match="built without CUDA"):
            call()
