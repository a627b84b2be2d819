"""Small files: read_many (one C++ call for many paths), read()'s one-call
path for small files to the CPU and read_into's for host buffers of a chunk
or less; bytes, stats and errors."""

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


def _general(p, out, **kw):
    """read_into through the general path (File.read_into), for comparison."""
    with gdsio.File(p) as f:
        return f.read_into(out, **kw)


def test_read_into_one_call_path_equals_the_general_path(files, tmp_path, monkeypatch):
    """A contiguous CPU tensor or writable numpy array of a chunk or less, from
    the start of a local file: one C++ call, the same bytes and stats fields as
    the general path; a file too short, an empty buffer and every other
    destination or argument go the general path, with its errors."""
    from gdsio import _core
    from gdsio.io import api

    calls = []

    def counted(*a):
        calls.append(a[2])
        return _core.read_file_into(*a)

    monkeypatch.setattr(api, "_core", type("C", (), {"read_file_into": staticmethod(counted)}))
    for p in files[1:]:
        n = os.path.getsize(p)
        int32 = torch.empty(max(n // 4, 1), dtype=torch.int32)[: n // 4]
        for out in (torch.empty(n, dtype=torch.uint8), np.empty(n, np.uint8), int32):
            nbytes = out.numel() * out.element_size() if isinstance(out, torch.Tensor) else out.nbytes
            if nbytes == 0:
                continue
            st = gdsio.read_into(p, out)
            raw = out.numpy().tobytes() if isinstance(out, torch.Tensor) else out.tobytes()
            assert raw == content(p)[:nbytes]
            ref = _general(p, np.empty(nbytes, np.uint8))
            assert (st.backend, st.nbytes, st.threads, st.chunks, st.path, st.device, st.reason, st.direct_io) == (
                ref.backend, ref.nbytes, ref.threads, ref.chunks, ref.path, ref.device, ref.reason, ref.direct_io)
            assert calls[-1] == nbytes  # the one-call path read it
    big = files[5]  # 3 MiB: more than a chunk of 1 MiB goes to the chunked path
    with gdsio.settings(chunk_bytes=1 << 20, threads=2):
        st = gdsio.read_into(big, torch.empty(3 << 20, dtype=torch.uint8))
    assert st.chunks == 3 and calls[-1] != 3 << 20
    with pytest.raises(ValueError, match=r"holds 17 bytes \(4079 too many\)"):
        gdsio.read_into(files[6], np.empty(4096, np.uint8))
    with pytest.raises(ValueError, match="requires grad"):
        gdsio.read_into(files[3], torch.zeros(1024, requires_grad=True))
    with pytest.raises(ValueError, match="C-contiguous"):
        gdsio.read_into(files[3], np.zeros(8192, np.uint8)[::2])
    ro = np.zeros(4096, np.uint8)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        gdsio.read_into(files[3], ro)
    with pytest.raises(IsADirectoryError, match="is a directory"):
        gdsio.read_into(str(tmp_path), np.empty(16, np.uint8))
    with pytest.raises(FileNotFoundError):
        gdsio.read_into(str(tmp_path / "nope"), np.empty(16, np.uint8))
    # an offset, a size, a backend or a path object: the general path, the same bytes
    out = np.empty(100, np.uint8)
    gdsio.read_into(files[4], out, offset=7)
    assert out.tobytes() == content(files[4])[7:107]
    st = gdsio.read_into(type(tmp_path)(files[4]), out, backend="posix", size=50)
    assert st.nbytes == 50 and out[:50].tobytes() == content(files[4])[:50]


def test_read_ranges_merges_adjacent_runs_and_reads_what_slicing_gives(tmp_path, monkeypatch):
    """gdsio.io.many.read_ranges, the one home of ranged batch reads (record
    files, shard members, read_many): ranges adjacent in their file and in the
    buffer become one request; the bytes equal Python's slicing of each file."""
    from gdsio import _core
    from gdsio.io import many

    a, b = tmp_path / "a.bin", tmp_path / "b.bin"
    a.write_bytes(bytes(range(256)) * 4)
    b.write_bytes(bytes(range(255, -1, -1)) * 4)
    # (path, offset, size): a run of three in a, a gap in a, b, then a again.
    ranges = [(a, 0, 10), (a, 10, 5), (a, 15, 1), (a, 100, 7), (b, 7, 3), (a, 107, 2), (b, 0, 0)]
    paths, offs, sizes = [str(p) for p, _, _ in ranges], [o for _, o, _ in ranges], [n for _, _, n in ranges]
    sent = []
    real = _core.read_paths
    monkeypatch.setattr(_core, "read_paths", lambda buf, reads, threads: sent.append(reads) or real(buf, reads, threads=threads))
    buf = np.zeros(sum(sizes), np.uint8)
    assert many.read_ranges(buf, paths, offs, sizes) == sum(sizes)
    want = b"".join(p.read_bytes()[o:o + n] for p, o, n in ranges)
    assert buf.tobytes() == want
    # a's first run is one request; a at 100 and at 107 are adjacent in the file but not in the buffer.
    assert [(r[0], r[2], r[3]) for r in sent[0]] == [(str(a), 16, 0), (str(a), 7, 100), (str(b), 3, 7), (str(a), 2, 107),
                                                    (str(b), 0, 0)]
    # Explicit destinations: adjacent in the file, placed apart in the buffer: two requests.
    out = torch.zeros(20, dtype=torch.uint8)
    many.read_ranges(out, [str(a)] * 2, [0, 4], [4, 4], [0, 12])
    assert bytes(out[:4].tolist()) == a.read_bytes()[:4] and bytes(out[12:16].tolist()) == a.read_bytes()[4:8]
    assert len(sent[-1]) == 2 and not out[4:12].any()
    with pytest.raises(ValueError, match="one of each per range"):
        many.read_ranges(buf, paths[:2], offs, sizes)
    with pytest.raises(FileNotFoundError, match="nope.bin"):
        many.read_ranges(buf, [str(tmp_path / "nope.bin")], [0], [1])
    with pytest.raises(ValueError):
        many.read_ranges(np.zeros(3, np.uint8), [str(a)], [0], [4])  # past the end of the buffer
