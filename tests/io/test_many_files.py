"""Small files: read_many (one C++ call for many paths) and read()'s one-call
path for small files to the CPU; bytes, stats and errors."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

import gdsio


def content(p: str) -> bytes:
    with open(p, "rb") as f:
        return f.read()


@pytest.fixture
def files(tmp_path):
    rng = np.random.default_rng(0)
    out = []
    for i, n in enumerate([0, 1, 4095, 4096, 100 << 10, 3 << 20, 17]):
        p = tmp_path / f"f{i}.bin"
        p.write_bytes(rng.integers(0, 256, n, dtype=np.uint8).tobytes())
        out.append(str(p))
    return out


def test_read_many_returns_every_file(files):
    with gdsio.settings(threads=3):
        views, st = gdsio.read_many(files, return_stats=True)
    assert [v.numel() for v in views] == [os.path.getsize(p) for p in files]
    for v, p in zip(views, files):
        assert v.dtype == torch.uint8 and v.device.type == "cpu"
        assert v.numpy().tobytes() == content(p)
    assert (st.backend, st.nbytes, st.chunks, st.threads, st.device) == ("posix", sum(map(os.path.getsize, files)),
                                                                        len(files), 3, "host memory")


def test_read_many_reuses_out(files):
    total = sum(map(os.path.getsize, files))
    buf = torch.zeros(total + 10, dtype=torch.uint8)
    views = gdsio.read_many(files, out=buf)
    assert views[4].untyped_storage().data_ptr() == buf.untyped_storage().data_ptr()
    assert all(v.numpy().tobytes() == content(p) for v, p in zip(views, files))
    with pytest.raises(ValueError, match=f"out holds {total - 1} bytes; these {len(files)} files need {total}"):
        gdsio.read_many(files, out=torch.zeros(total - 1, dtype=torch.uint8))
    with pytest.raises(ValueError, match="out must be a contiguous uint8 CPU tensor"):
        gdsio.read_many(files, out=torch.zeros(total, dtype=torch.int32))
    assert gdsio.read_many([]) == []


def test_read_many_errors_name_the_path(files, tmp_path):
    missing = str(tmp_path / "nope.bin")
    with pytest.raises(FileNotFoundError, match="nope.bin") as e:
        gdsio.read_many(files + [missing])
    assert e.value.filename == missing
    with pytest.raises(IsADirectoryError, match="is a directory"):
        gdsio.read_many([files[0], str(tmp_path)])


def test_read_small_file_path(files, tmp_path):
    for p in files:
        t, st = gdsio.read(p, device="cpu", return_stats=True)
        assert t.numpy().tobytes() == content(p)
        assert (st.backend, st.nbytes, st.path, st.device, st.reason) == ("posix", os.path.getsize(p), p,
                                                                           "host memory", "")
        assert torch.equal(gdsio.read(p, device="cpu"), t)
    # Larger than a chunk: the parallel chunked path reads it (its chunks say so).
    with gdsio.settings(chunk_bytes=4096, threads=2):
        t, st = gdsio.read(files[4], device="cpu", return_stats=True)
    assert st.chunks == 25 and t.numpy().tobytes() == content(files[4])
    with pytest.raises(IsADirectoryError, match="is a directory"):
        gdsio.read(str(tmp_path), device="cpu")
    with pytest.raises(FileNotFoundError):
        gdsio.read(str(tmp_path / "nope"), device="cpu")
    with pytest.raises(ValueError, match="backend must be one of"):
        gdsio.read(files[2], device="cpu", backend="")
