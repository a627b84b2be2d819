"""Shared fixtures; GPU tests (marker `gpu`) are skipped here, centrally, when
no CUDA device is visible, and Ray tests (marker `ray`) when Ray Data is not
installed. Tests themselves never call pytest.skip."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

# Before any test imports ray: without it Ray rewrites 127.0.0.1 to the
# machine's own address (ray/_private/services.py, resolve_ip_for_localhost)
# and its processes listen there; tests talk only to loopback.
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
# And no usage reports: Ray's own (to its servers) and Ray Data's poller of a
# Prometheus on localhost:9090 (a thread that outlives the cluster).
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
os.environ["RAY_DATA_USAGE_DISABLED"] = "1"

import numpy as np
import pytest
from gpu_gate import gate_gpu_items, gate_ray_items


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gate_gpu_items(items)
    gate_ray_items(items)


def run_python(code: str) -> "subprocess.CompletedProcess[str]":
    """Runs `code` in a fresh interpreter that imports the same gdsio as this one."""
    import sys

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    return subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True, env=env, cwd="/")


def in_time(fn, seconds: float = 10.0):
    """fn() in a daemon thread; fails the test (instead of hanging it) if it
    blocks for longer than ``seconds``; re-raises what fn raised."""
    import threading

    out: dict = {}

    def run() -> None:
        try:
            out["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed to the test
            out["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"{fn} blocked for {seconds} s"
    if "error" in out:
        raise out["error"]
    return out.get("value")


def in_threads(work, n: int = 4) -> None:
    """Runs work() in n threads at once and re-raises the first exception one raised."""
    import threading

    errors: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except BaseException as e:  # noqa: BLE001 - re-raised below, in the test's thread
            errors.append(e)

    threads = [threading.Thread(target=run) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def os_threads() -> int:
    return len(os.listdir("/proc/self/task"))


@pytest.fixture
def make_file(tmp_path: Path):
    """make_file(nbytes, name=...) -> (path, numpy bytes): a file of random bytes."""
    rng = np.random.default_rng(1234)

    def make(nbytes: int, name: str = "data.bin") -> tuple[str, np.ndarray]:
        data = rng.integers(0, 256, size=nbytes, dtype=np.uint8)
        p = tmp_path / name
        data.tofile(p)
        return str(p), data

    return make


@pytest.fixture
def no_leaks():
    """Fails the test if it leaves file descriptors open; yields a checker
    that can be called mid-test too."""
    import gdsio  # noqa: F401 - imported before the count, so its own files are not counted

    before = open_fds()

    def check() -> None:
        leaked = open_fds() - before
        # A descriptor number can be reused; compare what they point to.
        real = [os.readlink(f"/proc/self/fd/{fd}") for fd in leaked if os.path.exists(f"/proc/self/fd/{fd}")]
        # What CUDA, cuFile and kvikio open once per process on first use is not a leak.
        cuda_own = ("/dev/nvidia", "anon_inode:[eventfd]", "anon_inode:[eventpoll]", "anon_inode:[timerfd]")
        real = [r for r in real if not r.startswith(cuda_own) and not os.path.basename(r).startswith("cufile")]
        assert not real, f"leaked file descriptors: {real}"

    yield check
    check()


def cpu_jpeg() -> str:
    """The first CPU JPEG decoder of this build, the name results give: libjpeg-turbo
    linked into the extension (found at build time), else libjpeg-turbo through simplejpeg."""
    from gdsio import _core

    return "libjpeg-turbo" if _core.jpeg_cpu_available() else "simplejpeg"


def resumed_after(make_loader, k: int = 2):
    """A loader resumed from the state another one saved after k batches of
    an epoch: (the resumed loader, the images of the rest of its epoch)."""
    first = make_loader()
    it = iter(first)
    for _ in range(k):
        next(it)
    state = first.state_dict()
    del it
    again = make_loader()
    again.load_state_dict(state)
    return again, [x for x, _ in again]


def batches(loader):
    """A loader's (images, labels) batches, cloned: a loader may reuse its buffers."""
    return [(x.clone(), y.clone()) for x, y in loader]


def same_batches(a, b) -> None:
    """Asserts two lists of (images, labels) batches are equal, batch by batch."""
    import torch

    assert len(a) == len(b)
    for (xa, ya), (xb, yb) in zip(a, b):
        assert torch.equal(xa, xb) and torch.equal(ya, yb)
