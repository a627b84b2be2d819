"""The pinned pipeline's ordering logic, run against the host stand-in for
the CUDA copy engine: one FIFO copy thread (as one stream), a delay per copy
so reads really overlap copies, and a check that no staging buffer is
overwritten while its copy is still queued. The real engine is tested on a
GPU (test_gpu_io.py)."""

from __future__ import annotations

import numpy as np
import pytest

from gdsio import _core


def run(path, out, reqs, **kw):
    f = _core.File(path)
    try:
        opts = dict(threads=4, chunk_bytes=64 << 10, staging_buffers=2, direct_io=False, copy_delay_us=0)
        opts.update(kw)
        return _core.staged_read_host_engine(f, out, list(reqs), **opts)
    finally:
        f.close()


@pytest.mark.parametrize("threads", [1, 2, 4])
@pytest.mark.parametrize("staging", [2, 3, 5])
@pytest.mark.parametrize("direct_io", [False, True], ids=["buffered", "odirect"])
def test_bytes_and_no_slot_reuse_before_copy(make_file, threads, staging, direct_io):
    path, data = make_file((2 << 20) + 777)
    out = np.zeros(data.size, np.uint8)
    res, rep = run(path, out, [(0, data.size, 0)], threads=threads, staging_buffers=staging,
                   direct_io=direct_io, copy_delay_us=200)
    assert np.array_equal(out, data)
    assert rep.reuse_violations == 0
    assert rep.copies == res.chunks == -(-data.size // (64 << 10))
    assert res.threads == threads


def test_reads_overlap_copies(make_file):
    """With slow copies, readers run ahead: several copies are queued at once
    (no wait after each chunk), and readers block only when they come back to
    a staging buffer whose copy has not run yet."""
    path, data = make_file(4 << 20)
    out = np.zeros(data.size, np.uint8)
    _, rep = run(path, out, [(0, data.size, 0)], threads=2, staging_buffers=3, copy_delay_us=2000)
    assert np.array_equal(out, data)
    assert rep.max_queued >= 4  # up to threads * staging_buffers in flight
    assert rep.max_queued <= 2 * 3
    assert rep.waits > 0  # ... and the ring bound holds them back
    assert rep.reuse_violations == 0


def test_unaligned_requests_and_batches(make_file):
    path, data = make_file(1 << 20)
    out = np.zeros(1 << 20, np.uint8)
    reqs = [(0, 1, 0), (1, 4095, 1), (5000, 70001, 12345), (200000, 300000, 600001), (600000, 0, 5)]
    _, rep = run(path, out, reqs, threads=3, staging_buffers=2, copy_delay_us=50, direct_io=True)
    for o, n, fo in reqs:
        assert np.array_equal(out[o : o + n], data[fo : fo + n])
    assert rep.reuse_violations == 0


def test_error_midway_waits_for_queued_copies(make_file):
    """A read that fails (past the end of the file) must not return while
    copies into the destination are still queued."""
    path, data = make_file(1 << 20)
    out = np.zeros(2 << 20, np.uint8)
    with pytest.raises(OSError, match="ended early"):
        run(path, out, [(0, 2 << 20, 0)], threads=2, copy_delay_us=500)
    snapshot = out.copy()
    import time

    time.sleep(0.05)
    assert np.array_equal(out, snapshot)  # nothing landed after the error was raised
