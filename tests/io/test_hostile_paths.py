"""Paths that are not plain regular files, and names that are not UTF-8: every
reader refuses what is not a regular file without blocking, never returns
wrong bytes, and takes str, bytes and os.PathLike wherever Python's open does."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import gdsio
from conftest import in_time



@pytest.fixture
def fifo(tmp_path):
    p = tmp_path / "pipe.npy"
    os.mkfifo(p)
    return p


READERS = {
    "read": lambda p: gdsio.read(p, device="cpu"),
    "read_into": lambda p: gdsio.read_into(p, np.empty(16, np.uint8)),
    "File": lambda p: gdsio.File(p),
    "load_npy": lambda p: gdsio.load_npy(p, device="cpu"),
    "load_safetensors": lambda p: gdsio.load_safetensors(p, device="cpu"),
    "read_many": lambda p: gdsio.read_many([p]),
}


@pytest.mark.parametrize("name", list(READERS))
def test_a_fifo_is_refused_without_blocking(fifo, name):
    with pytest.raises(OSError, match=r"is a FIFO \(named pipe\), not a regular file") as e:
        in_time(lambda: READERS[name](fifo))
    assert str(fifo) in str(e.value)


@pytest.mark.parametrize("path", ["/proc/self/status", "/proc/cpuinfo", "/sys/kernel/mm/transparent_hugepage/enabled"])
def test_pseudo_files_are_refused_not_read_as_empty(path):
    if not os.path.exists(path):
        pytest.skip(f"{path} is not on this machine")
    for read in (lambda: gdsio.read(path, device="cpu"), lambda: gdsio.read_many([path])):
        with pytest.raises(OSError, match="is a pseudo-file of (procfs|sysfs)") as e:
            read()
        assert path in str(e.value)


def test_a_character_device_is_refused():
    with pytest.raises(OSError, match="is a character device, not a regular file"):
        in_time(lambda: gdsio.read("/dev/zero", device="cpu"))


@pytest.mark.parametrize("name", ["read", "File", "read_many"])
def test_a_nul_in_the_path_is_refused_as_open_refuses_it(tmp_path, name):
    real = tmp_path / "a.bin"
    real.write_bytes(b"abc")
    with pytest.raises(ValueError, match="embedded null byte"):
        open(str(real) + "\x00.npy", "rb")
    with pytest.raises(ValueError, match="embedded null byte"):
        READERS[name](str(real) + "\x00.npy")


def test_names_that_are_not_utf8(tmp_path):
    raw = os.fsencode(tmp_path) + b"/caf\xe9.bin"  # Latin-1 bytes: not UTF-8
    with open(raw, "wb") as f:
        f.write(bytes(range(200)))
    (listed,) = os.listdir(tmp_path)  # str with a surrogate escape, as os.listdir gives it
    path = os.path.join(tmp_path, listed)
    for p in (path, raw, Path(path)):
        t, st = gdsio.read(p, device="cpu", return_stats=True)
        assert t.numpy().tobytes() == bytes(range(200))
        assert st.path == path
    with gdsio.File(raw) as f:
        assert f.path == path and f.size() == 200
    for blob in gdsio.read_many([path, raw, Path(path)]):
        assert blob.numpy().tobytes() == bytes(range(200))
    missing = path.replace(".bin", ".npy")
    with pytest.raises(FileNotFoundError) as e:
        gdsio.read(missing, device="cpu")
    assert e.value.filename == missing


def test_a_path_of_another_type_is_a_type_error():
    with pytest.raises(TypeError, match="path must be str, bytes or os.PathLike"):
        gdsio.read(3, device="cpu")


def test_a_dropped_file_never_waits_in_its_finalizer(tmp_path):
    """A File whose pread raised, dropped in a reference cycle, is freed by the
    cyclic GC, which may run inside another thread's start: its finalizer must
    not join the pread workers (that deadlocked the process)."""
    code = f"""
import gc, threading, numpy as np, gdsio
path = {str(tmp_path / 'f.bin')!r}
open(path, 'wb').write(bytes(4096))
gc.set_threshold(1, 1, 1)                         # so the GC runs inside thread starts
for i in range(2000):
    f = gdsio.File(path)
    fut = f.pread(np.empty(16, np.uint8), 64)   # more than fits: the future raises
    try:
        fut.result()
    except ValueError:
        pass
    f.cycle = f                                   # only the cyclic GC frees it
    del f, fut
    t = threading.Thread(target=lambda: None)
    t.start(); t.join()
print("done")
"""
    p = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True, timeout=120)  # the old finalizer hung here within seconds
    assert p.returncode == 0 and p.stdout.strip() == "done", p.stderr


def test_dropping_a_file_with_reads_in_flight_frees_it(tmp_path):
    path = tmp_path / "g.bin"
    path.write_bytes(bytes(1 << 20))
    f = gdsio.File(path)
    futs = [f.pread(np.empty(1 << 16, np.uint8), 1 << 16, file_offset=i << 16) for i in range(8)]
    del f
    gc.collect()
    assert all(fut.result().nbytes == 1 << 16 for fut in futs)
