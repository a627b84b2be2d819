from __future__ import annotations

import gc
import os
import threading

import numpy as np
import pytest

import gdsio
from gdsio.config import parse_bytes


def test_defaults_and_env(monkeypatch):
    for k in ("GDSIO_THREADS", "GDSIO_CHUNK_BYTES", "GDSIO_STAGING_BUFFERS", "GDSIO_DIRECT_IO", "GDSIO_BACKEND",
              "GDSIO_HUGE_PAGES"):
        monkeypatch.delenv(k, raising=False)
    s = gdsio.current_settings()
    assert s.chunk_bytes == 4 << 20 and s.staging_buffers >= 2 and s.backend == "auto" and not s.direct_io
    assert s.huge_pages
    monkeypatch.setenv("GDSIO_THREADS", "5")
    monkeypatch.setenv("GDSIO_CHUNK_BYTES", "8MiB")
    monkeypatch.setenv("GDSIO_DIRECT_IO", "on")
    monkeypatch.setenv("GDSIO_BACKEND", "posix")
    monkeypatch.setenv("GDSIO_STAGING_BUFFERS", "4")
    monkeypatch.setenv("GDSIO_HUGE_PAGES", "off")
    s = gdsio.current_settings()
    assert (s.threads, s.chunk_bytes, s.direct_io, s.backend, s.staging_buffers) == (5, 8 << 20, True, "posix", 4)
    assert s.huge_pages is False


@pytest.mark.parametrize(
    "var, value, match",
    [
        ("GDSIO_THREADS", "many", "GDSIO_THREADS='many'"),
        ("GDSIO_THREADS", "0", "'threads' must be between 1 and 256"),
        ("GDSIO_CHUNK_BYTES", "1000", "multiple of 4096"),
        ("GDSIO_DIRECT_IO", "maybe", "GDSIO_DIRECT_IO='maybe'"),
        ("GDSIO_BACKEND", "turbo", "one of auto"),
        ("GDSIO_STAGING_BUFFERS", "1", "between 2 and 64"),
        ("GDSIO_HUGE_PAGES", "lots", "GDSIO_HUGE_PAGES='lots'"),
    ],
)
def test_bad_env_values_name_the_variable(monkeypatch, var, value, match):
    monkeypatch.setenv(var, value)
    with pytest.raises(ValueError, match=match):
        gdsio.current_settings()


def test_context_manager_nests_and_overrides_env(monkeypatch):
    monkeypatch.setenv("GDSIO_THREADS", "3")
    with gdsio.settings(threads=6, chunk_bytes="1M") as s:
        assert s.threads == 6 and s.chunk_bytes == 1 << 20
        with gdsio.settings(threads=2):
            assert gdsio.current_settings().threads == 2
            assert gdsio.current_settings().chunk_bytes == 1 << 20
        assert gdsio.current_settings().threads == 6
    assert gdsio.current_settings().threads == 3


def test_context_is_thread_local():
    seen = []
    with gdsio.settings(threads=7):
        t = threading.Thread(target=lambda: seen.append(gdsio.current_settings().threads))
        t.start()
        t.join()
        assert gdsio.current_settings().threads == 7
    assert seen[0] != 7 or gdsio.Settings().threads == 7


def test_unknown_and_bad_settings():
    with pytest.raises(TypeError, match="unknown setting"):
        with gdsio.settings(thread=2):
            pass
    with pytest.raises(TypeError, match="must be int"):
        gdsio.Settings(threads="2")
    with pytest.raises(TypeError, match="must be bool"):
        gdsio.Settings(direct_io=1)


def test_parse_bytes():
    assert parse_bytes("4096") == 4096
    assert parse_bytes("4k") == 4096 and parse_bytes("4KiB") == 4096
    assert parse_bytes("2G") == 2 << 30 and parse_bytes(" 3 MB ") == 3 << 20
    with pytest.raises(ValueError):
        parse_bytes("lots")


def test_settings_reach_the_read(make_file):
    path, data = make_file(1 << 20)
    out = np.empty(data.size, np.uint8)
    with gdsio.settings(threads=3, chunk_bytes=64 << 10):
        st = gdsio.read_into(path, out)
    assert st.threads == 3 and st.chunks == 16
    with gdsio.settings(backend="posix"):
        assert gdsio.read_into(path, out).backend == "posix"


def test_gds_precheck_without_opening_cufile(tmp_path, monkeypatch):
    """auto decides 'no true GDS' from nvidia-fs and cufile.json alone, so a
    machine without GDS never pays for (or logs from) a cuFile driver open."""
    from gdsio.platform import gds

    cfg = tmp_path / "cufile.json"
    monkeypatch.setenv("CUFILE_ENV_PATH_JSON", str(cfg))
    try:
        cfg.write_text('{ "properties": { "use_pci_p2pdma": false } }')
        gds.gds_impossible_reason.cache_clear()
        if not gds.nvidia_fs_status()["loaded"]:
            assert "nvidia-fs driver is not loaded" in gds.gds_impossible_reason()
        cfg.write_text('{ // P2PDMA on\n "properties": { "use_pci_p2pdma": true } }')
        gds.gds_impossible_reason.cache_clear()
        assert gds.gds_impossible_reason() is None  # only cuFile itself can tell now
    finally:
        gds.gds_impossible_reason.cache_clear()


def test_auto_does_not_call_compat_mode_gds(monkeypatch):
    """With true GDS on the machine but O_DIRECT refused for this file, cuFile
    would serve it in compat mode: auto takes the pinned pipeline and says why."""
    from gdsio.io.backends import choose
    from gdsio.io.buffers import Destination
    from gdsio.io.readers import LocalReader
    from gdsio.platform import gds, nvidia

    class FakeFile(LocalReader):
        def __init__(self, refusal):
            self.path, self.refusal, self.registered = "shard.bin", refusal, 0

        def register_cufile(self, device):
            self.registered += 1

        def direct_io_refusal(self):
            return self.refusal

    monkeypatch.setattr(nvidia, "cuda_unusable_reason", lambda: None)
    monkeypatch.setattr(gds, "gds_impossible_reason", lambda: None)
    monkeypatch.setattr(gds, "cufile_state", lambda dev: {"driver_open": True, "true_gds": True, "reason": ""})
    dest = Destination(1 << 20, 16, "cuda", 0, 0, None)
    backend, why = choose("auto", FakeFile(""), dest)
    assert (backend.name, why) == ("gds", "")
    backend, why = choose("auto", FakeFile("tmpfs does not support O_DIRECT (EINVAL)"), dest)
    assert backend.name == "pinned" and "O_DIRECT is refused for this file (tmpfs" in why and "compat mode" in why
    with pytest.raises(gdsio.BackendUnavailable, match="O_DIRECT is refused"):
        choose("gds", FakeFile("tmpfs does not support O_DIRECT (EINVAL)"), dest)


def test_stream_handles():
    from gdsio.io.buffers import stream_handle

    class TorchLike:
        cuda_stream = 0x7F00

    class CupyLike:
        ptr = 0x7F10

    assert stream_handle(None) == 0 and stream_handle(0x1234) == 0x1234
    assert stream_handle(TorchLike()) == 0x7F00 and stream_handle(CupyLike()) == 0x7F10
    # The legacy and per-thread default streams: the legacy one orders after both.
    assert stream_handle(1) == stream_handle(2) == 0
    with pytest.raises(TypeError, match="stream must be an int"):
        stream_handle("default")


def test_kvikio_gets_host_memory_as_a_buffer():
    """kvikio takes host destinations through the buffer protocol, which a
    torch CPU tensor does not offer: it gets a numpy view of the same bytes."""
    import torch

    from gdsio.io.buffers import resolve
    from gdsio.io.kvikio import uint8_view

    t = torch.zeros(16, dtype=torch.float32)
    v = uint8_view(resolve(t), 4, 8)
    assert isinstance(v, np.ndarray) and v.nbytes == 8
    v[:] = 1
    assert t.view(torch.uint8)[4:12].eq(1).all() and t.view(torch.uint8)[:4].eq(0).all()


def _mappings(t) -> list[tuple[int, int, set[str]]]:
    """(start, end, VmFlags) of the mappings holding tensor t's bytes, from /proc/self/smaps."""
    start = t.data_ptr()
    end = start + t.numel() * t.element_size()
    out, cur = [], None
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                lo, hi = (int(x, 16) for x in head.split("-"))
                cur = (lo, hi, line.split()[1]) if lo < end and start < hi else None
            elif cur is not None and head == "VmFlags:":
                out.append((cur[0], cur[1], set(line.split()[1:]) | {"perm:" + cur[2]}))
    return out


def test_large_host_reads_ask_for_huge_pages(make_file):
    """With huge_pages (the default) the buffer of a 32 MiB read(device="cpu")
    is a mapping of its own, 2 MiB-aligned and advised MADV_HUGEPAGE (whether
    the kernel finds 2 MiB pages then depends on its memory; the advice is what
    gdsio controls). Off, a mapping without the advice."""
    path, data = make_file(32 << 20)
    with gdsio.settings(huge_pages=True):
        t = gdsio.read(path, device="cpu")
    assert np.array_equal(t.numpy(), data) and t.data_ptr() % (2 << 20) == 0
    maps = _mappings(t)
    assert maps[0][0] == t.data_ptr() and maps[-1][1] >= t.data_ptr() + t.numel()  # its own mapping
    assert all("perm:rw-p" in flags for _, _, flags in maps), maps  # private: shared memory gets no THP
    if os.path.isdir("/sys/kernel/mm/transparent_hugepage"):  # a kernel with THP
        assert all("hg" in flags for _, _, flags in maps), maps
    with gdsio.settings(huge_pages=False):
        u = gdsio.read(path, device="cpu")
    assert np.array_equal(u.numpy(), data) and not any("hg" in flags for _, _, flags in _mappings(u))


def test_large_host_buffers_are_reused_once_freed(make_file):
    """A large host buffer goes back to the core's pool when its tensor (and
    every view of it) is freed, and the next large read of about its size
    reuses its pages instead of faulting and zeroing fresh ones; trimming the
    pool unmaps it."""
    path, data = make_file(32 << 20)
    gdsio._core.host_pool_trim()
    t = gdsio.read(path, device="cpu")
    ptr, view = t.data_ptr(), t[5:9]
    del t
    gc.collect()
    assert gdsio._core.host_pool_stats().idle_blocks == 0  # a view still holds it
    del view
    gc.collect()
    st = gdsio._core.host_pool_stats()
    assert st.idle_blocks == 1 and st.idle_bytes == 32 << 20 and st.cap_bytes > 0
    u = gdsio.read(path, device="cpu")
    assert u.data_ptr() == ptr and np.array_equal(u.numpy(), data)
    assert gdsio._core.host_pool_stats().idle_blocks == 0
    w = gdsio.read(path, device="cpu")  # the block is in use: a fresh one
    assert w.data_ptr() != ptr and np.array_equal(w.numpy(), data)
    del u, w
    gc.collect()
    assert gdsio._core.host_pool_trim() == 64 << 20
    with open("/proc/self/maps") as f:
        still = [line for line in f if line.startswith(f"{ptr:x}-")]
    assert not still, still


def test_check_environment_names_the_variable_and_value():
    """Every GDSIO_* variable, checked at once (the gdsio command calls it
    before any work); the library itself checks at its first read."""
    from gdsio.config import check_environment

    assert check_environment({}) == gdsio.config.Settings()
    assert check_environment({"GDSIO_THREADS": "3", "GDSIO_CPU_SIMD": "avx2"}).threads == 3
    for env, match in [({"GDSIO_THREADS": "abc"}, "GDSIO_THREADS='abc': not an int: 'abc'"),
                       ({"GDSIO_REMOTE_TIMEOUT": "soon"}, "GDSIO_REMOTE_TIMEOUT='soon': not a number"),
                       ({"GDSIO_REMOTE_RETRIES": "99"}, r"between 0 and 50, got 99 \(environment: GDSIO_REMOTE_RETRIES='99'\)"),
                       ({"GDSIO_CPU_SIMD": "avx3"}, "GDSIO_CPU_SIMD='avx3': not a SIMD level")]:
        with pytest.raises(ValueError, match=match):
            check_environment(env)
