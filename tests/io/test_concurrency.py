"""Many threads reading at once: different files, one file, and one File."""

from __future__ import annotations

import concurrent.futures

import numpy as np

import gdsio


def test_eight_threads_different_files(make_file, no_leaks):
    files = [make_file((1 << 20) + i * 4099, name=f"f{i}.bin") for i in range(8)]

    def work(i):
        path, data = files[i]
        for direct in (False, True):
            with gdsio.settings(direct_io=direct, chunk_bytes=64 << 10, threads=3):
                t = gdsio.read(path, device="cpu", offset=i, size=data.size - i)
            assert np.array_equal(t.numpy(), data[i:])
        return i

    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        assert sorted(ex.map(work, range(8))) == list(range(8))


def test_eight_threads_one_file(make_file, no_leaks):
    path, data = make_file(4 << 20)
    rng = np.random.default_rng(7)
    ranges = [(int(o), int(n)) for o, n in zip(rng.integers(0, 2 << 20, 64), rng.integers(1, 2 << 20, 64))]

    def work(r):
        off, n = r
        out = np.empty(n, np.uint8)
        with gdsio.settings(chunk_bytes=128 << 10, threads=2):
            gdsio.read_into(path, out, offset=off)
        return np.array_equal(out, data[off : off + n])

    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        assert all(ex.map(work, ranges))


def test_shared_file_object(make_file, no_leaks):
    path, data = make_file(2 << 20)
    outs = [np.empty(100000, np.uint8) for _ in range(16)]
    with gdsio.File(path) as f:
        with concurrent.futures.ThreadPoolExecutor(8) as ex:
            list(ex.map(lambda i: f.read_into(outs[i], file_offset=i * 100000), range(16)))
        futs = [f.pread(outs[i], file_offset=i * 7) for i in range(16)]
        concurrent.futures.wait(futs)
    for i, fu in enumerate(futs):
        assert fu.result().nbytes == 100000
        assert np.array_equal(outs[i], data[i * 7 : i * 7 + 100000])
