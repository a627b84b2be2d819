"""Bad input: each mistake gets a clear exception naming the file and the
problem, and nothing leaks afterwards."""

from __future__ import annotations

import os
import stat

import numpy as np
import pytest
import torch

import gdsio
from gdsio import _core


def test_missing_file(tmp_path, no_leaks):
    p = tmp_path / "nope.bin"
    with pytest.raises(FileNotFoundError, match="nope.bin") as ei:
        gdsio.read(p, device="cpu")
    assert ei.value.filename == str(p)
    with pytest.raises(FileNotFoundError):
        gdsio.read_into(p, np.zeros(4, np.uint8))


def test_directory(tmp_path, no_leaks):
    with pytest.raises(IsADirectoryError, match="is a directory"):
        gdsio.read(tmp_path, device="cpu")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_unreadable(make_file, no_leaks):
    path, _ = make_file(10)
    os.chmod(path, 0)
    with pytest.raises(PermissionError, match="data.bin"):
        gdsio.read(path, device="cpu")


def test_not_a_regular_file(tmp_path, no_leaks):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    # O_RDONLY on a FIFO with no writer would block; gdsio must refuse before reading.
    fd = os.open(fifo, os.O_RDWR)  # keeps open() from blocking
    try:
        with pytest.raises(OSError, match="not a regular file"):
            gdsio.read(fifo, device="cpu")
    finally:
        os.close(fd)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"offset": -1}, "offset must be >= 0"),
        ({"size": -5}, "size must be >= 0"),
        ({"offset": 101}, "offset 101 is beyond the end"),
        ({"offset": 50, "size": 51}, "cannot read 51 bytes at offset 50"),
        ({"size": 101}, "holds 100 bytes"),
    ],
)
def test_bad_ranges(make_file, kwargs, match, no_leaks):
    path, _ = make_file(100)
    with pytest.raises(ValueError, match=match):
        gdsio.read(path, device="cpu", **kwargs)


def test_offset_at_end_reads_nothing(make_file):
    path, _ = make_file(100)
    assert gdsio.read(path, offset=100, device="cpu").numel() == 0


def test_buffer_too_small(make_file, no_leaks):
    path, _ = make_file(100)
    with pytest.raises(ValueError, match="destination too small"):
        gdsio.read_into(path, np.zeros(10, np.uint8), size=11)


def test_read_only_and_non_contiguous(make_file, no_leaks):
    path, _ = make_file(100)
    ro = np.zeros(10, np.uint8)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        gdsio.read_into(path, ro)
    with pytest.raises(ValueError, match="read-only"):
        gdsio.read_into(path, b"0123456789")
    with pytest.raises(ValueError, match="contiguous"):
        gdsio.read_into(path, np.zeros((10, 10), np.uint8)[:, ::2])
    with pytest.raises(ValueError, match="contiguous"):
        gdsio.read_into(path, torch.zeros(10, 10, dtype=torch.uint8).t())
    with pytest.raises(TypeError, match="torch tensor"):
        gdsio.read_into(path, 12345)


def test_wrong_backend_for_destination(make_file, no_leaks):
    path, _ = make_file(100)
    for b in ("pinned", "gds", "cufile"):
        with pytest.raises(ValueError, match="reads into GPU memory, but the destination is host memory"):
            gdsio.read_into(path, np.zeros(10, np.uint8), backend=b)
    with pytest.raises(ValueError, match="backend must be one of"):
        gdsio.read_into(path, np.zeros(10, np.uint8), backend="fast")


def test_gpu_read_without_gpu_is_a_clear_error(make_file, no_leaks):
    if gdsio.platform.nvidia.cuda_unusable_reason() is None:
        return  # this check is about machines without a GPU; test_gpu_io covers the rest
    path, _ = make_file(100)
    with pytest.raises(gdsio.BackendUnavailable, match="cannot read .*data.bin.* into cuda"):
        gdsio.read(path, device="cuda")
    with pytest.raises(ValueError, match="device must be"):
        gdsio.read(path, device="tpu")


def test_file_shrinks_during_read(make_file, no_leaks):
    """The size is checked up front; a file that then shrinks must raise, not
    hand back uninitialised bytes. The core is called directly with a request
    past the end, as the reader threads see it after a truncation."""
    path, _ = make_file(10000)
    out = np.zeros(20000, np.uint8)
    f = _core.File(path)
    try:
        for direct in (False, True):
            for backend in (_core.Engine.posix,):
                with pytest.raises(OSError, match="ended early") as ei:
                    _core.read(f, backend, out, [(0, 20000, 0)], threads=2,
                               chunk_bytes=4096, staging_buffers=2, direct_io=direct)
                assert ei.value.filename == path
            with pytest.raises(OSError, match="ended early"):
                _core.staged_read_host_engine(f, out, [(0, 20000, 0)], threads=2,
                                              chunk_bytes=4096, staging_buffers=2, direct_io=direct)
    finally:
        f.close()


@pytest.mark.parametrize("how", ["gdsio.read", "File.read", "File.read with a size"])
def test_file_shrinking_after_reads_size_is_an_oserror(make_file, monkeypatch, how, no_leaks):
    """read() sizes the file, then reads it: a file that shrinks in between is an
    I/O race (OSError "ended early"), never a caller's ValueError. The shrink is
    made deterministic: the file is truncated right after its size is taken."""
    path, _ = make_file(256 << 10)
    real_size = gdsio.File.size

    def size_then_shrink(self):
        n = real_size(self)
        os.truncate(path, 4096)
        return n

    monkeypatch.setattr(gdsio.File, "size", size_then_shrink)
    with gdsio.settings(chunk_bytes=64 << 10):  # past the one-call path's limit: File.read runs
        with pytest.raises(OSError, match="ended early") as ei:
            if how == "gdsio.read":
                gdsio.read(path, device="cpu")
            else:
                with gdsio.File(path) as f:
                    f.read(device="cpu", size=None if how == "File.read" else 200 << 10)
    assert not isinstance(ei.value, ValueError)


def test_truncate_while_reading(tmp_path, no_leaks):
    """A real truncation racing a slow read: the read either completes with
    the old bytes or raises; it never returns zeros as data."""
    p = tmp_path / "shrinking.bin"
    data = np.random.default_rng(0).integers(1, 256, size=32 << 20, dtype=np.uint8)  # no zero bytes
    data.tofile(p)
    import threading

    out = np.zeros(data.size, np.uint8)
    t = threading.Timer(0.002, lambda: os.truncate(p, 4096))
    t.start()
    try:
        with gdsio.settings(threads=1, chunk_bytes=4096):
            gdsio.read_into(p, out)
        assert np.array_equal(out, data)
    except OSError as e:  # truncated during the read
        assert "ended early" in str(e)
    except ValueError as e:  # truncated before the read began: the size check says so
        assert "holds 4096 bytes" in str(e)
    finally:
        t.join()


def test_closed_file(make_file, no_leaks):
    path, _ = make_file(100)
    f = gdsio.File(path)
    f.close()
    with pytest.raises(ValueError, match="closed"):
        f.read_into(np.zeros(4, np.uint8))
    with pytest.raises(ValueError, match="closed"):
        f.pread(np.zeros(4, np.uint8))


def test_core_option_validation(make_file):
    path, _ = make_file(100)
    f = _core.File(path)
    out = np.zeros(10, np.uint8)
    try:
        with pytest.raises(ValueError, match="chunk_bytes must be a positive multiple of 4096"):
            _core.read(f, _core.Engine.posix, out, [(0, 10, 0)], threads=1, chunk_bytes=1000,
                       staging_buffers=2, direct_io=False)
        with pytest.raises(ValueError, match="staging_buffers must be between 2 and 64"):
            _core.read(f, _core.Engine.posix, out, [(0, 10, 0)], threads=1, chunk_bytes=4096,
                       staging_buffers=1, direct_io=False)
        with pytest.raises(TypeError, match="incompatible function arguments"):  # engines are an enum, not strings
            _core.read(f, "magic", out, [], threads=1, chunk_bytes=4096, staging_buffers=2, direct_io=False)
    finally:
        f.close()


def test_errors_leave_no_threads_behind(make_file):
    """Run in a fresh interpreter, so threads of other tests cannot blur the count."""
    from conftest import run_python

    path, _ = make_file(1 << 20)
    code = f"""
import os, time, numpy as np
from gdsio import _core
def tasks(): return len(os.listdir('/proc/self/task'))
def settled(n):  # a joined thread leaves /proc/self/task a moment after join() returns
    t0 = time.monotonic()
    while tasks() != n and time.monotonic() - t0 < 10:
        time.sleep(0.01)
    return tasks()
out = np.zeros(2 << 20, np.uint8)
f = _core.File({path!r})
base = tasks()
for _ in range(20):
    try:
        _core.read(f, _core.Engine.posix, out, [(0, 2 << 20, 0)], threads=4, chunk_bytes=4096,
                   staging_buffers=2, direct_io=False)
        raise SystemExit("no error")
    except OSError:
        pass
assert _core.pool_threads() == 3, _core.pool_threads()  # the caller is the fourth worker
assert tasks() == base + 3, (tasks(), base)
_core.shutdown_pool()
f.close()
assert settled(base) == base, (tasks(), base)
print("ok")
"""
    r = run_python(code)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_sample_error_pickles_with_its_index_path_and_notes():
    # It crosses processes (a Ray actor on a CPU node, a worker) and must arrive whole.
    import pickle

    from gdsio.errors import SampleError

    e = SampleError("sample 3 ('a/b.jpg'): ValueError: bad", index=3, path="a/b.jpg")
    e.add_note("made on node n1")
    back = pickle.loads(pickle.dumps(e))
    assert type(back) is SampleError and str(back) == str(e)
    assert (back.index, back.path) == (3, "a/b.jpg") and back.__notes__ == ["made on node n1"]


@pytest.mark.parametrize("call", ["read", "read_many", "File", "load_npy", "load_safetensors", "image.read"])
def test_a_missing_file_names_its_path_once(tmp_path, call):
    """As Python's open(): ``[Errno 2] No such file or directory: '<path>'``,
    the path once (in ``filename``), not again inside the message."""
    path = str(tmp_path / f"missing-{call}.bin")
    calls = {
        "read": lambda: gdsio.read(path, device="cpu"),
        "read_many": lambda: gdsio.read_many([path]),
        "File": lambda: gdsio.File(path),
        "load_npy": lambda: gdsio.load_npy(path, device="cpu"),
        "load_safetensors": lambda: gdsio.load_safetensors(path, device="cpu"),
        "image.read": lambda: gdsio.image.read(path, device="cpu"),
    }
    with pytest.raises(FileNotFoundError) as ei:
        calls[call]()
    assert ei.value.filename == path
    assert str(ei.value).count(path) == 1, str(ei.value)
    assert str(ei.value) == f"[Errno 2] No such file or directory: '{path}'"


def test_a_directory_and_a_fifo_name_their_path_once(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path, exc, what in ((str(tmp_path), IsADirectoryError, "is a directory"),
                            (str(fifo), OSError, r"is a FIFO \(named pipe\), not a regular file")):
        with pytest.raises(exc, match=what) as ei:
            gdsio.read(path, device="cpu")
        assert ei.value.filename == path and str(ei.value).count(path) == 1, str(ei.value)


def test_a_sample_errors_words_survive_a_wrapper_that_rewrites_args():
    """Ray Data appends its retry advice to an exception's args on its way out of an
    actor; a SampleError still says what gdsio said, and pickles as such."""
    import pickle

    e = gdsio.SampleError("sample 2 ('a.jpg'): not a JPEG", index=2, path="a.jpg")
    e.args = (e.args[0] + "\nFailed to apply UDF transform after 1/1 attempts.",)
    assert str(e) == "sample 2 ('a.jpg'): not a JPEG"
    back = pickle.loads(pickle.dumps(e))
    assert type(back) is gdsio.SampleError and str(back) == str(e) and (back.index, back.path) == (2, "a.jpg")
