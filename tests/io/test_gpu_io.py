"""GPU reads, byte for byte against the host read. Marker `gpu`: skipped
centrally (conftest.py) where no CUDA device is visible; run on a GPU machine
by bench/device_check.sh."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

import gdsio
from gdsio import _core
from gdsio.io.kvikio import kvikio_unusable_reason
from gdsio.platform import gds

pytestmark = pytest.mark.gpu

SIZES = [1, 4095, 4096, 4097, (1 << 20) + 3, (64 << 20) + 1]


def cufile_usable() -> bool:
    return bool(gds.cufile_state(0)["driver_open"])


def gpu_backends() -> list[str]:
    out = ["auto", "pinned"]
    if cufile_usable():
        out.append("cufile")
    if importlib.util.find_spec("kvikio") is not None:  # installed: whether it imports is decided in the test
        out.append("kvikio")
    return out


def cufile_refusal(directory) -> str:
    """Why cuFile refuses to register a file in `directory`, or "". The device
    check's VM is such a place: its driver opens in compat mode, but
    cuFileHandleRegister fails for every file (its log: the block device's
    udev attributes cannot be read). gdsio then raises BackendUnavailable
    naming the file (test_an_unregistrable_file_is_a_clear_error)."""
    probe = Path(directory) / "cufile-probe.bin"
    probe.write_bytes(b"x")
    try:
        gdsio.read(str(probe), device="cuda", backend="cufile")
    except gdsio.BackendUnavailable as e:
        if "cuFileHandleRegister" in str(e):
            return str(e)
        raise
    finally:
        probe.unlink()
    return ""


def skip_unusable(backend: str, path: str | None = None) -> None:
    """Skips a kvikio case where kvikio is installed but cannot run (the
    backends' own decision: it is imported, e.g. libkvikio without
    librapids_logger.so fails there), and a cufile case where cuFile cannot
    register files beside `path`, instead of failing with BackendUnavailable."""
    if backend == "kvikio":
        why = kvikio_unusable_reason()
        if why:
            pytest.skip(f"the kvikio backend cannot run here: {why}")
    if backend == "cufile" and path is not None:
        why = cufile_refusal(Path(path).parent)
        if why:
            pytest.skip(f"cuFile cannot register files on this file system: {why}")


HAS_CUPY = importlib.util.find_spec("cupy") is not None


@pytest.fixture(params=["torch"] + (["cupy"] if HAS_CUPY else []))
def gpu_buffer(request):
    import torch

    def make(n: int):
        if request.param == "torch":
            return torch.empty(n, dtype=torch.uint8, device="cuda")
        import cupy

        return cupy.empty(n, dtype=cupy.uint8)

    make.kind = request.param
    return make


def to_host(buf) -> np.ndarray:
    if hasattr(buf, "cpu"):
        return buf.cpu().numpy()
    return buf.get()


@pytest.mark.parametrize("nbytes", SIZES)
@pytest.mark.parametrize("backend", gpu_backends())
def test_backend_matches_host_read(make_file, nbytes, backend, gpu_buffer, no_leaks):
    path, data = make_file(nbytes)
    skip_unusable(backend, path)
    host = gdsio.read(path, device="cpu").numpy()
    assert np.array_equal(host, data)
    buf = gpu_buffer(nbytes)
    with gdsio.settings(chunk_bytes=1 << 20, threads=4):
        st = gdsio.read_into(path, buf, backend=backend)
    assert np.array_equal(to_host(buf), host)
    expected = {"auto": {"gds", "pinned"}, "pinned": {"pinned"}, "cufile": {"gds", "cufile-compat"},
                "kvikio": {"kvikio"}}[backend]
    assert st.backend in expected
    if backend == "auto" and st.backend == "pinned":
        assert st.reason.startswith("gds skipped: ")


@pytest.mark.parametrize("direct_io", [False, True], ids=["buffered", "odirect"])
@pytest.mark.parametrize("offset", [0, 1, 4095, 4096, 12345])
def test_pinned_unaligned_offsets(make_file, offset, direct_io):
    path, data = make_file((3 << 20) + 5)
    with gdsio.settings(direct_io=direct_io, chunk_bytes=1 << 20, staging_buffers=2, threads=3):
        t, st = gdsio.read(path, offset=offset, device="cuda", backend="pinned", return_stats=True)
    assert st.backend == "pinned" and st.direct_io == direct_io
    assert np.array_equal(t.cpu().numpy(), data[offset:])


@pytest.mark.parametrize("backend", [b for b in gpu_backends() if b != "auto"])
def test_non_default_stream_is_honoured(make_file, backend):
    import torch

    path, data = make_file(32 << 20)
    skip_unusable(backend, path)
    s = torch.cuda.Stream()
    buf = torch.empty(data.size, dtype=torch.uint8, device="cuda")
    with torch.cuda.stream(s):
        # Work queued before the read on the same stream must finish first:
        # the fill would otherwise overwrite the bytes read. cuFile and kvikio
        # write outside stream order, so they synchronise the stream first.
        buf.fill_(0)
        torch.cuda._sleep(50_000_000)
        buf.fill_(1)
        st = gdsio.read_into(path, buf, backend=backend)
        assert st.backend in (backend, "gds", "cufile-compat")
        total = buf.sum(dtype=torch.int64)
    s.synchronize()
    assert total.item() == int(data.sum(dtype=np.int64))
    # An explicit stream works too: a handle, or the torch.cuda.Stream itself.
    for stream in (torch.cuda.Stream().cuda_stream, torch.cuda.Stream()):
        out = torch.empty_like(buf)
        gdsio.read_into(path, out, stream=stream, backend=backend)
        assert torch.equal(out, buf)


def test_pread_orders_on_the_callers_stream(make_file):
    import torch

    path, data = make_file(8 << 20)
    s = torch.cuda.Stream()
    buf = torch.empty(data.size, dtype=torch.uint8, device="cuda")
    with gdsio.File(path) as f, torch.cuda.stream(s):
        buf.fill_(7)
        torch.cuda._sleep(50_000_000)
        buf.fill_(1)
        fut = f.pread(buf, backend="pinned")  # runs on a worker thread, ordered on s
        fut.result()
        total = buf.sum(dtype=torch.int64)
    s.synchronize()
    assert total.item() == int(data.sum(dtype=np.int64))


@pytest.mark.skipif(not HAS_CUPY, reason="cupy (the [cupy] extra) is not installed")
def test_cupy_stream(make_file):
    import cupy

    path, data = make_file(5 << 20)
    with cupy.cuda.Stream(non_blocking=True):
        a = cupy.empty(data.size, dtype=cupy.uint8)
        gdsio.read_into(path, a)
    assert np.array_equal(a.get(), data)


def test_read_batch_gpu(make_file):
    import torch

    path, data = make_file(8 << 20)
    outs = [torch.empty(100003, dtype=torch.uint8, device="cuda") for _ in range(40)]
    backends = ["pinned"] + (["cufile"] if cufile_usable() and not cufile_refusal(Path(path).parent) else [])
    for b in backends:
        with gdsio.File(path) as f:
            st = f.read_batch([(o, 100003, i * 200000 + 3) for i, o in enumerate(outs)], backend=b)
        assert st.nbytes == 40 * 100003
        for i, o in enumerate(outs):
            assert np.array_equal(o.cpu().numpy(), data[i * 200000 + 3 : i * 200000 + 3 + 100003]), (b, i)


def test_registered_buffer(make_file):
    import torch

    if not cufile_usable():
        with pytest.raises(gdsio.BackendUnavailable):
            gdsio.register_buffer(torch.empty(4096, dtype=torch.uint8, device="cuda"))
        return
    path, data = make_file(4 << 20)
    skip_unusable("cufile", path)
    buf = torch.empty(data.size, dtype=torch.uint8, device="cuda")
    with gdsio.register_buffer(buf) as reg:
        for off in (0, 4096, 12345):
            gdsio.read_into(path, buf[: data.size - off], offset=off, backend="cufile")
            assert np.array_equal(buf[: data.size - off].cpu().numpy(), data[off:])
        assert reg.registered or reg.reason
    assert _core.cufile_registered_buffers() == 0


def test_an_unregistrable_file_is_a_clear_error(make_file):
    """Where cuFile refuses a file, the error names the file, cuFile's error and
    where cuFile's log is, and an explicit backend="cufile" does not fall back."""
    if not cufile_usable():
        pytest.skip("cuFile's driver does not open here")
    path, _ = make_file(4096)
    why = cufile_refusal(Path(path).parent)
    if not why:
        pytest.skip("cuFile registers files here")
    assert path.rsplit("/", 1)[0] in why and "CUfileOpError" in why and "cufile.log" in why
    with pytest.raises(gdsio.BackendUnavailable, match="cuFileHandleRegister failed for"):
        gdsio.read(path, device="cuda", backend="cufile")
    t, st = gdsio.read(path, device="cuda", return_stats=True)  # auto: another path, and it says so
    assert st.backend != "cufile-compat" and st.backend != "gds" and t.numel() == 4096


def test_wrong_device_memory_is_refused(make_file):
    import torch

    path, _ = make_file(4096)
    f = _core.File(path)
    host = np.zeros(4096, np.uint8)
    try:
        with pytest.raises(ValueError, match="dst: is on cpu; the pinned engine reads into CUDA memory"):
            _core.read(f, _core.Engine.pinned, host, [(0, 4096, 0)], threads=1, chunk_bytes=4096,
                       staging_buffers=2, direct_io=False)
    finally:
        f.close()
    with pytest.raises(ValueError, match="reads into host memory"):
        gdsio.read_into(path, torch.empty(4096, dtype=torch.uint8, device="cuda"), backend="posix")


def test_staging_pool_is_reused_and_bounded(make_file):
    path, _ = make_file(16 << 20)
    gdsio._core.release_staging()
    with gdsio.settings(threads=2, staging_buffers=3, chunk_bytes=1 << 20):
        for _ in range(5):
            gdsio.read(path, device="cuda", backend="pinned")
    st = _core.staging_pool_stats()
    assert st.in_use_buffers == 0
    assert 0 < st.cached_buffers <= 6
    assert st.cached_bytes <= st.limit_bytes
    _core.release_staging()
    assert _core.staging_pool_stats().cached_bytes == 0


def test_kernel_probe_and_info():
    assert _core.kernel_probe(0) == ""  # this build carries code for this GPU
    info = gdsio.info()
    assert info["auto"]["gpu"] in ("gds", "pinned")
    names = {b["name"]: b for b in info["backends"]}
    assert names["pinned"]["usable"]
