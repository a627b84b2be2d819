"""The posix backend, byte for byte, buffered and with O_DIRECT."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import gdsio

SIZES = [0, 1, 4095, 4096, 4097, (1 << 20) + 3, (64 << 20) + 1]
OFFSETS = [0, 1, 4095, 4096, 12345]


@pytest.mark.parametrize("direct_io", [False, True], ids=["buffered", "odirect"])
@pytest.mark.parametrize("nbytes", SIZES)
def test_read_whole_file(make_file, nbytes, direct_io, no_leaks):
    path, data = make_file(nbytes)
    with gdsio.settings(direct_io=direct_io, chunk_bytes=1 << 20):
        t, st = gdsio.read(path, device="cpu", return_stats=True)
    assert t.dtype == torch.uint8 and t.shape == (nbytes,)
    assert np.array_equal(t.numpy(), data)
    assert st.backend == "posix" and st.nbytes == nbytes and st.device == "host memory"
    if nbytes:
        assert st.direct_io == direct_io or st.reason  # a refusal is reported, never silent
        assert st.chunks == -(-nbytes // (1 << 20)) or st.chunks >= 1


@pytest.mark.parametrize("out", [np.empty(0, np.uint8), np.empty((0, 3), np.float32), torch.empty(0, dtype=torch.uint8),
                                 torch.empty(0, dtype=torch.bfloat16), bytearray()],
                         ids=["numpy", "numpy-2d", "torch", "torch-bf16", "bytearray"])
def test_empty_destinations_take_zero_bytes(make_file, out):
    """An empty array is contiguous whatever strides its exporter gives it
    (numpy's DLPack says 0): the core takes it for a read of 0 bytes."""
    path, _ = make_file(100)
    st = gdsio.read_into(path, out, offset=10)
    assert st.backend == "posix" and st.nbytes == 0
    with gdsio.File(path) as f:
        assert f.read_batch([(out, 0, 5), (np.zeros(4, np.uint8), 4, 0)]).nbytes == 4


@pytest.mark.parametrize("direct_io", [False, True], ids=["buffered", "odirect"])
@pytest.mark.parametrize("offset", OFFSETS)
@pytest.mark.parametrize("size", [1, 4095, 4096, 4097, 70000, (2 << 20) + 5])
def test_unaligned_ranges(make_file, offset, size, direct_io):
    path, data = make_file((3 << 20) + 17)
    with gdsio.settings(direct_io=direct_io, chunk_bytes=1 << 20, threads=3):
        t = gdsio.read(path, offset=offset, size=size, device="cpu")
    assert np.array_equal(t.numpy(), data[offset : offset + size])


@pytest.mark.parametrize("direct_io", [False, True], ids=["buffered", "odirect"])
def test_read_into_unaligned_destinations(make_file, direct_io):
    path, data = make_file((1 << 20) + 999)
    raw = np.zeros((1 << 20) + 8192, dtype=np.uint8)
    with gdsio.settings(direct_io=direct_io, chunk_bytes=64 << 10):
        for shift in (0, 1, 7, 4096, 4097):
            out = raw[shift : shift + (1 << 20)]
            st = gdsio.read_into(path, out, offset=999)
            assert st.nbytes == 1 << 20
            assert np.array_equal(out, data[999 : 999 + (1 << 20)])


def test_size_defaults_to_the_buffer(make_file):
    path, data = make_file(10000)
    out = torch.zeros(100, dtype=torch.float32)  # 400 bytes
    st = gdsio.read_into(path, out, offset=16)
    assert st.nbytes == 400
    assert np.array_equal(out.numpy().view(np.uint8), data[16:416])


def test_explicit_size_smaller_than_buffer(make_file):
    path, data = make_file(10000)
    out = np.full(100, 7, dtype=np.uint8)
    gdsio.read_into(path, out, size=10, offset=5)
    assert np.array_equal(out[:10], data[5:15]) and (out[10:] == 7).all()


@pytest.mark.parametrize(
    "make_out",
    [
        lambda n: bytearray(n),
        lambda n: memoryview(bytearray(n)),
        lambda n: np.zeros(n, np.uint8),
        lambda n: np.zeros(n // 4, np.int32),
        lambda n: torch.zeros(n, dtype=torch.uint8),
        lambda n: torch.zeros(n // 2, dtype=torch.bfloat16),
        lambda n: np.zeros((4, n // 4), np.uint8),  # 2-D, contiguous
    ],
    ids=["bytearray", "memoryview", "numpy", "numpy-int32", "torch", "torch-bf16", "numpy-2d"],
)
def test_destination_kinds(make_file, make_out):
    path, data = make_file(4096)
    out = make_out(4096)
    gdsio.read_into(path, out)
    if isinstance(out, torch.Tensor):
        got = out.view(torch.uint8).numpy().tobytes()
    else:
        got = bytes(memoryview(out).cast("B"))
    assert got == data.tobytes()


def test_dlpack_destination(make_file):
    path, data = make_file(256)

    class OnlyDLPack:  # e.g. a JAX or TensorFlow array
        def __init__(self):
            self.t = torch.zeros(256, dtype=torch.uint8)

        def __dlpack__(self, **kw):
            return self.t.__dlpack__(**kw)

        def __dlpack_device__(self):
            return self.t.__dlpack_device__()

    o = OnlyDLPack()
    gdsio.read_into(path, o)
    assert np.array_equal(o.t.numpy(), data)


def test_file_pread_and_batch(make_file, no_leaks):
    path, data = make_file(1 << 20)
    outs = [np.zeros(5000, np.uint8) for _ in range(20)]
    with gdsio.File(path) as f:
        assert f.size() == 1 << 20
        futs = [f.pread(o, 5000, i * 40000) for i, o in enumerate(outs[:10])]
        stats = [fu.result() for fu in futs]
        assert all(s.backend == "posix" and s.nbytes == 5000 for s in stats)
        st = f.read_batch([(o, 5000, i * 40000) for i, o in enumerate(outs[10:], start=10)])
        assert st.nbytes == 50000 and st.chunks >= 10
    for i, o in enumerate(outs):
        assert np.array_equal(o, data[i * 40000 : i * 40000 + 5000]), i
    assert f.closed


def test_out_offset(make_file):
    path, data = make_file(1000)
    out = np.zeros(300, np.uint8)
    with gdsio.File(path) as f:
        f.read_into(out, 100, file_offset=50, out_offset=200)
    assert (out[:200] == 0).all() and np.array_equal(out[200:], data[50:150])


def test_read_batch_four_tuple_and_empty(make_file):
    path, data = make_file(1000)
    out = np.zeros(20, np.uint8)
    with gdsio.File(path) as f:
        f.read_batch([(out, 10, 0, 10), (out, 10, 500, 0)])
        assert f.read_batch([]).nbytes == 0
    assert np.array_equal(out[10:], data[:10]) and np.array_equal(out[:10], data[500:510])
