"""Where CUDA cannot be used, every public entry point that defaults to or
accepts a CUDA device says so the same way: one type (gdsio.BackendUnavailable),
one cause, one hint (device="cpu"). Runs on every machine: the cause is
simulated where a GPU is present, and taken as it is where none is."""

from __future__ import annotations

import types

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

import gdsio
from gdsio import _core
from gdsio.platform import nvidia

CAUSE = "no NVIDIA driver is installed (libcuda.so.1 not found)"
HINT = 'pass device="cpu" to use the CPU'


@pytest.fixture
def files(tmp_path):
    save_file({"w": torch.arange(6, dtype=torch.float32)}, str(tmp_path / "model.safetensors"))
    np.save(tmp_path / "features.npy", np.arange(12, dtype=np.float32).reshape(3, 4))
    (tmp_path / "shard.bin").write_bytes(bytes(range(64)))
    pgm = b"P5 2 2 255\n" + bytes([0, 64, 128, 255])
    (tmp_path / "cat.pgm").write_bytes(pgm)
    for c in ("a", "b"):
        (tmp_path / "train" / c).mkdir(parents=True)
        for i in range(2):
            np.save(tmp_path / "train" / c / f"{i}.npy", np.zeros((1, 2, 2), np.uint8))
    return tmp_path


@pytest.fixture
def no_cuda(monkeypatch):
    """CUDA unusable for gdsio as on a machine without a driver (the real state here)."""
    monkeypatch.setattr(nvidia, "cuda_unusable_reason", lambda: CAUSE)


def _entry_points(d):
    p = str(d)
    return {
        "read": (lambda: gdsio.read(f"{p}/shard.bin"), f"cannot read '{p}/shard.bin' into cuda"),
        "read cuda:0": (lambda: gdsio.read(f"{p}/shard.bin", device="cuda:0"), f"cannot read '{p}/shard.bin' into cuda:0"),
        "load_safetensors": (lambda: gdsio.load_safetensors(f"{p}/model.safetensors"),
                             f"cannot load '{p}/model.safetensors' into cuda"),
        "load_safetensors keys": (lambda: gdsio.load_safetensors(f"{p}/model.safetensors", keys=["w"]),
                                  f"cannot load '{p}/model.safetensors' into cuda"),
        "load_npy": (lambda: gdsio.load_npy(f"{p}/features.npy"), f"cannot load '{p}/features.npy' into cuda"),
        "image.read": (lambda: gdsio.image.read(f"{p}/cat.pgm"), "cannot decode on cuda"),
        "image.decode": (lambda: gdsio.image.decode((d / "cat.pgm").read_bytes(), device="cuda"), "cannot decode on cuda"),
        "image.decode int": (lambda: gdsio.image.decode((d / "cat.pgm").read_bytes(), device=0), "cannot decode on cuda:0"),
        "Loader": (lambda: gdsio.Loader(f"{p}/train", 2), "cannot load batches into cuda"),
    }


def _check(call, what, hint=HINT):
    with pytest.raises(gdsio.BackendUnavailable) as ei:
        call()
    msg = str(ei.value)
    assert msg == f"{what}: {CAUSE}; {hint}"


@pytest.mark.parametrize("name", list(_entry_points(".")))
def test_every_device_entry_point_says_the_same(files, no_cuda, name):
    call, what = _entry_points(files)[name]
    _check(call, what)


def test_cache_on_the_gpu_says_the_same_with_its_own_argument(no_cuda):
    for where in ("cuda", "cuda:0", "pinned"):
        _check(lambda: gdsio.Cache(bytes="1M", where=where), f"Cache(where={where!r}) needs CUDA",
               'pass where="cpu" to use the CPU')
    with pytest.raises(ValueError, match="where must be 'cuda', 'cuda:N', 'pinned', 'cpu' or 'disk'; got 'cuda:x'"):
        gdsio.Cache(bytes="1M", where="cuda:x")


def test_cpu_only_torch_is_the_cause_when_gdsio_could_run(files, monkeypatch):
    """gdsio's CUDA fine, torch a CPU build: torch's raw AssertionError never surfaces."""
    monkeypatch.setattr(nvidia, "cuda_unusable_reason", lambda: None)
    monkeypatch.setattr(torch.version, "cuda", None)
    with pytest.raises(gdsio.BackendUnavailable, match=rf"features.npy' into cuda: torch .* is a CPU-only build; {HINT}"):
        gdsio.load_npy(files / "features.npy")


def test_the_real_state_here_reads_cleanly(files):
    """On this machine as it is: where CUDA is unusable, the entry points raise
    the one message with the real cause (no AssertionError from torch)."""
    why = nvidia.cuda_unusable_reason() or nvidia.torch_cuda_unusable_reason()
    if why is None:
        return  # a GPU machine: the simulated tests above cover the message
    for call, what in _entry_points(files).values():
        with pytest.raises(gdsio.BackendUnavailable) as ei:
            call()
        assert str(ei.value) == f"{what}: {why}; {HINT}"


def test_no_driver_is_one_cause(monkeypatch):
    """Without a driver every CUDA call fails with cudaErrorInsufficientDriver,
    a consequence: the reason names the missing driver alone."""
    monkeypatch.setattr(_core, "built_with_cuda", True)
    monkeypatch.setattr(_core, "cuda_status", lambda: types.SimpleNamespace(
        device_count=0, runtime_version=13000, driver_version=0,
        error="cudaErrorInsufficientDriver: CUDA driver version is insufficient for CUDA runtime version"))
    assert nvidia.cuda_unusable_reason() == CAUSE


def test_core_and_test_gate_say_one_cause_without_a_driver():
    st = _core.cuda_status()
    if not _core.built_with_cuda or st.driver_version != 0:
        return  # a driver is installed (or no CUDA build): nothing to say about its absence
    assert st.error == CAUSE
    import gpu_gate

    assert gpu_gate._gpu_unusable_reason() == CAUSE
    assert "cudaError" not in gpu_gate._gpu_unusable_reason()
