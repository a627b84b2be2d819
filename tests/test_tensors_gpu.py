"""Tensor files onto the GPU equal the CPU load (marker gpu)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import gdsio

pytestmark = pytest.mark.gpu


def test_safetensors_to_cuda(tmp_path):
    import safetensors.torch as sft

    tensors = {"w": torch.randn(512, 1024), "b": torch.randn(1024).bfloat16(), "i": torch.arange(9, dtype=torch.uint8)}
    p = tmp_path / "m.safetensors"
    sft.save_file(tensors, str(p))
    got, st = gdsio.load_safetensors(p, device="cuda", return_stats=True)
    assert st.backend in ("gds", "pinned")
    for k, v in tensors.items():
        assert got[k].is_cuda and torch.equal(got[k].cpu(), v), k
    part = gdsio.load_safetensors(p, device="cuda:0", keys=["b"])
    assert torch.equal(part["b"].cpu(), tensors["b"])


def test_npy_to_cuda(tmp_path):
    a = np.asfortranarray(np.arange(4096 * 3, dtype=">f4").reshape(64, 192))
    p = tmp_path / "a.npy"
    np.save(p, a)
    t = gdsio.load_npy(p, device="cuda")
    assert t.is_cuda and np.array_equal(t.cpu().numpy(), a)
