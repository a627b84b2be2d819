"""http(s):// objects: ranged GETs against servers on 127.0.0.1 (a Python
ranged server with faults on demand, nginx), into host memory and through
the staging ring's host stand-in; errors, retries, timeouts, and URLs with
credentials that no message may show."""

from __future__ import annotations

import errno
import os

import numpy as np
import pytest
import torch
from remote_fixtures import aws_clean, loopback_only, nginx, no_leaks, server, tls_server  # noqa: F401
from remote_servers import RangeServer

import gdsio
from gdsio import _core
from gdsio.io import http, remote


def _data(n: int, seed: int = 0) -> bytes:
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()


@pytest.mark.parametrize("chunk,conc", [(4096, 1), (64 << 10, 3), (1 << 20, 8)])
def test_read_whole_and_ranges(server, chunk, conc):
    data = _data(300_001)
    url = server.put("a/b.bin", data)
    with gdsio.settings(remote_chunk_bytes=chunk, remote_concurrency=conc):
        t, st = gdsio.read(url, device="cpu", return_stats=True)
        assert bytes(t.numpy()) == data
        assert st.backend == "http" and st.nbytes == len(data) and st.path == url
        n_chunks = -(-len(data) // chunk)
        assert st.chunks == n_chunks and st.requests == n_chunks and st.retries == 0
        assert st.threads == min(conc, n_chunks)
        buf = np.zeros(5000, np.uint8)
        st = gdsio.read_into(url, buf, offset=123_457)
        assert bytes(buf) == data[123_457:128_457] and st.backend == "http"
        t = gdsio.read(url, device="cpu", offset=299_000)
        assert bytes(t.numpy()) == data[299_000:]


def test_file_pread_and_read_batch(server):
    data = _data(200_000, 1)
    url = server.put("x.bin", data)
    with gdsio.File(url) as f:
        assert f.size() == len(data) and f.kind == "http" and f.path == url
        a, b, c = (np.zeros(n, np.uint8) for n in (10, 70_000, 3))
        st = f.read_batch([(a, 10, 0), (b, 70_000, 100_000), (c, 3, 199_997)])
        assert bytes(a) == data[:10] and bytes(b) == data[100_000:170_000] and bytes(c) == data[-3:]
        assert st.nbytes == 70_013 and st.backend == "http"
        out = torch.zeros(4096, dtype=torch.uint8)
        futs = [f.pread(out, 1024, file_offset=k * 1024, out_offset=k * 1024) for k in range(4)]
        assert all(fu.result().backend == "http" for fu in futs)
        assert bytes(out.numpy()) == data[:4096]
        with pytest.raises(ValueError, match="beyond the end"):
            f.read_into(out, 10, file_offset=len(data) + 1)
    with pytest.raises(ValueError, match="closed"):
        f.read_into(out, 10)


def test_empty_object(server):
    url = server.put("empty", b"")
    t = gdsio.read(url, device="cpu")
    assert t.numel() == 0


def test_404_403_name_the_url(server):
    with pytest.raises(FileNotFoundError) as e:
        gdsio.read(server.url("missing.bin"), device="cpu")
    assert e.value.errno == errno.ENOENT and e.value.filename == server.url("missing.bin")
    server.put("private/p.bin", b"123")
    with pytest.raises(PermissionError) as e:
        gdsio.File(server.url("private/p.bin"))
    assert "403" in str(e.value) and e.value.filename == server.url("private/p.bin")


def test_503_for_a_while_is_retried(server):
    data = _data(50_000)
    url = server.put("r.bin", data)
    server.faults.status_503 = 3
    with gdsio.settings(remote_chunk_bytes=16384, remote_concurrency=1, remote_retries=4):
        t, st = gdsio.read(url, device="cpu", return_stats=True)
    assert bytes(t.numpy()) == data
    assert st.retries == 3 and st.requests == st.chunks + 3


def test_503_past_the_retries_fails(server):
    url = server.put("r.bin", _data(1000))
    f = gdsio.File(url)
    server.faults.status_503 = 100
    with gdsio.settings(remote_retries=2), pytest.raises(OSError, match=r"HTTP 503 \(SlowDown\)") as e:
        f.read_into(np.zeros(1000, np.uint8))
    assert "3 tries" in str(e.value) and e.value.filename == url
    f.close()


def test_dropped_connections_resume_where_they_stopped(server):
    data = _data(100_000, 3)
    url = server.put("d.bin", data)
    server.faults.drop = 2  # two answers cut after half their body
    with gdsio.settings(remote_chunk_bytes=40960, remote_concurrency=1):
        t, st = gdsio.read(url, device="cpu", return_stats=True)
    assert bytes(t.numpy()) == data and st.retries == 2
    # The retries asked for the rest of their range only.
    starts = [int(r.split("=")[1].split("-")[0]) for r in server.ranges if r]
    assert 20480 in starts, server.ranges


def test_object_rewritten_mid_read_is_an_oserror(server):
    url = server.put("m.bin", _data(100_000))
    server.faults.mutate_after = 2  # the third GET sees a new version
    with gdsio.settings(remote_chunk_bytes=16384, remote_concurrency=1), pytest.raises(OSError) as e:
        gdsio.read(url, device="cpu")
    assert e.value.errno == errno.ESTALE and "changed" in str(e.value) and e.value.filename == url
    assert all("If-Match" in h for h in server.headers_seen)


def test_server_that_ignores_range(server):
    data = _data(10_000)
    url = server.put("i.bin", data)
    server.faults.ignore_range = True
    with gdsio.settings(remote_chunk_bytes=1 << 20):  # one GET of the whole object: a 200 is the answer
        assert bytes(gdsio.read(url, device="cpu").numpy()) == data
    with pytest.raises(OSError, match="ignores Range"):
        gdsio.read(url, device="cpu", offset=10)


def test_head_refused_falls_back_to_a_one_byte_get(server):
    data = _data(3000)
    url = server.put("h.bin", data)
    server.faults.no_head = True
    assert bytes(gdsio.read(url, device="cpu").numpy()) == data
    assert server.ranges[0] == "bytes=0-0"


def test_slow_server_times_out(server):
    url = server.put("s.bin", _data(1000))
    f = gdsio.File(url)
    server.faults.stall = 1.0
    with gdsio.settings(remote_timeout=0.2, remote_retries=1), pytest.raises(TimeoutError) as e:
        f.read_into(np.zeros(1000, np.uint8))
    assert "timed out" in str(e.value) and "2 tries" in str(e.value) and e.value.filename == url
    server.faults.stall = 0.0
    f.close()


def test_no_credentials_in_messages_or_stats(server):
    server.put("c.bin", _data(100))
    url = f"http://alice:hunter2@127.0.0.1:{server.port}/c.bin?X-Amz-Signature=s3cr3t&X-Amz-Credential=AKIDX"
    with gdsio.File(url) as f:
        st = f.read_into(np.zeros(100, np.uint8))
        shown = [f.path, repr(f._reader), str(st), repr(st)]
    assert server.headers_seen[-1]["Authorization"].startswith("Basic ")
    server.faults.status_503 = 100
    with gdsio.settings(remote_retries=0), pytest.raises(OSError) as e:
        gdsio.read(url, device="cpu")
    shown += [str(e.value), repr(e.value)]
    missing = url.replace("c.bin", "nope.bin")
    server.faults.status_503 = 0
    with pytest.raises(FileNotFoundError) as e:
        gdsio.read(missing, device="cpu")
    shown += [str(e.value), repr(e.value)]
    for text in shown:
        assert "hunter2" not in text and "alice" not in text and "s3cr3t" not in text and "AKIDX" not in text, text
    assert f"http://127.0.0.1:{server.port}/c.bin?…" in shown[0]


def test_pipeline_through_the_staging_ring_host_engine(server):
    """The GPU path's pipeline with the host stand-in for the copy engine: the
    bytes arrive, no slot is refilled while its copy is queued, and GETs ran
    while earlier copies were still queued (overlap)."""
    data = _data(1 << 20, 7)
    url = server.put("p.bin", data)
    rings = []

    def ring(nbytes: int):
        r = _core.StagingRing(3, nbytes, host_engine=True, copy_delay_us=30000)
        rings.append(r)
        return r

    out = np.zeros(len(data), np.uint8)
    with gdsio.settings(remote_chunk_bytes=32768, remote_concurrency=2, staging_buffers=3) as s, \
            gdsio.File(url) as f:
        d = remote.fetch(f._reader, [out], [(0, len(data), 0)], to_gpu=True, device=0, stream=0,
                         settings=s, ring=ring)
    assert bytes(out) == data
    assert d.backend == "http" and d.chunks == 32 and len(rings) == 2
    reps = [r.report() for r in rings]
    assert sum(r.copies for r in reps) == 32
    assert all(r.reuse_violations == 0 for r in reps)
    assert max(r.max_queued for r in reps) >= 2  # a GET finished while an earlier copy was still queued
    assert sum(r.waits for r in reps) > 0  # and the ring waited for a slot rather than overwrite it


def test_staging_ring_refuses_misuse():
    r = _core.StagingRing(2, 4096, host_engine=True)
    k = r.next()
    with pytest.raises(ValueError, match="4097 bytes from a 4096-byte slot"):
        r.copy(k, np.zeros(8192, np.uint8), 0, 4097)
    with pytest.raises(ValueError, match="no staging slot 5"):
        r.buffer(5)
    r.close()
    with pytest.raises(ValueError, match="closed"):
        r.next()
    with pytest.raises(ValueError, match="2 to 64 slots"):
        _core.StagingRing(1, 4096, host_engine=True)


def test_backend_choice_for_urls(server):
    url = server.put("b.bin", _data(100))
    buf = np.zeros(100, np.uint8)
    assert gdsio.read_into(url, buf, backend="http").backend == "http"
    with pytest.raises(ValueError, match="does not read http sources.*'http'"):
        gdsio.read_into(url, buf, backend="posix")
    with pytest.raises(ValueError, match="reads into GPU memory"):
        gdsio.read_into(url, buf, backend="pinned")
    with pytest.raises(ValueError, match="does not read local sources"):
        gdsio.read_into(__file__, buf, backend="http")
    if gdsio.io.kvikio.kvikio_unusable_reason():
        with pytest.raises(gdsio.BackendUnavailable, match="kvikio"):
            gdsio.read_into(url, buf, backend="kvikio")  # kvikio on a URL is kvikio-remote
    names = [b.name for b in gdsio.backends()]
    assert names[-3:] == ["s3", "http", "kvikio-remote"]


def test_remote_settings_validate(monkeypatch):
    with pytest.raises(ValueError, match="remote_chunk_bytes"):
        with gdsio.settings(remote_chunk_bytes=1000):
            pass
    with pytest.raises(ValueError, match="remote_timeout"):
        with gdsio.settings(remote_timeout=0):
            pass
    with gdsio.settings(remote_chunk_bytes="2M", remote_timeout=5) as s:
        assert s.remote_chunk_bytes == 2 << 20 and s.remote_timeout == 5.0
    monkeypatch.setenv("GDSIO_REMOTE_CONCURRENCY", "3")
    monkeypatch.setenv("GDSIO_REMOTE_RETRIES", "0")
    s = gdsio.config.current()
    assert s.remote_concurrency == 3 and s.remote_retries == 0
    monkeypatch.setenv("GDSIO_REMOTE_CONCURRENCY", "lots")
    with pytest.raises(ValueError, match="GDSIO_REMOTE_CONCURRENCY"):
        gdsio.config.current()


def test_gpu_destination_without_cuda_says_why(server):
    url = server.put("g.bin", _data(100))
    if gdsio.platform.nvidia.cuda_unusable_reason():
        with pytest.raises(gdsio.BackendUnavailable, match="device=\"cpu\"|CUDA|cuda"):
            gdsio.read(url, device="cuda")


def test_nginx_ranges_and_sizes(nginx):
    data = _data((8 << 20) + 12345, 9)
    (nginx.root / "big.bin").write_bytes(data)
    (nginx.root / "dir").mkdir()
    url = nginx.url("big.bin")
    with gdsio.settings(remote_chunk_bytes="1M", remote_concurrency=4):
        t, st = gdsio.read(url, device="cpu", return_stats=True)
        assert bytes(t.numpy()) == data and st.requests == st.chunks == 9
        with gdsio.File(url) as f:
            out = np.zeros(3 << 20, np.uint8)
            f.read_into(out, file_offset=(5 << 20) + 1)
            assert bytes(out) == data[(5 << 20) + 1 : (8 << 20) + 1]
    with pytest.raises(FileNotFoundError):
        gdsio.File(nginx.url("nope.bin"))
    # nginx checks If-Match itself: a file replaced after open is a 412.
    f = gdsio.File(url)
    os.utime(nginx.root / "big.bin", (1, 1))
    with pytest.raises(OSError) as e:
        f.read_into(np.zeros(10, np.uint8))
    assert e.value.errno == errno.ESTALE
    f.close()


def test_leak_check_sees_what_a_test_leaves_behind():
    """The guard every remote test runs under does catch a socket, a file and a thread left behind."""
    import socket
    import threading

    from remote_servers import LeakCheck

    check = LeakCheck(grace=0.1)
    stop = threading.Event()
    t = threading.Thread(target=stop.wait, name="left-running")
    t.start()
    s, f = socket.socket(), open(__file__, "rb")
    try:
        threads, fds = check.leaks()
        assert threads == ["left-running"]
        assert any("socket:" in x for x in fds) and any(x.endswith("test_remote_http.py") for x in fds), fds
    finally:
        s.close()
        f.close()
        stop.set()
        t.join()
    assert check.leaks() == ([], [])


def test_a_forked_child_never_shares_its_parents_connections(server):
    """A DataLoader worker forked after the parent read a URL starts with no
    kept-alive connection of the parent's, and both read their bytes right."""
    import hashlib
    import textwrap

    from conftest import run_python

    data = _data(300_000, 11)
    url = server.put("f.bin", data)
    code = textwrap.dedent(f"""
        import hashlib, os
        import gdsio
        from gdsio.io import http
        want = {hashlib.sha256(data).hexdigest()!r}
        def ok():
            with gdsio.settings(remote_chunk_bytes=65536, remote_concurrency=4):
                return hashlib.sha256(bytes(gdsio.read({url!r}, device="cpu").numpy())).hexdigest() == want
        assert ok() and http._pools, "the parent keeps its connections"
        pid = os.fork()
        if pid == 0:
            os._exit(0 if not http._pools and ok() else 3)
        _, status = os.waitpid(pid, 0)
        print("child", os.waitstatus_to_exitcode(status), "parent", ok())
        http.drop_pools()
    """)
    r = run_python(code)
    assert r.stdout.strip() == "child 0 parent True", r.stdout + r.stderr


def _npy_bytes(a: np.ndarray) -> bytes:
    import io

    b = io.BytesIO()
    np.save(b, a)
    return b.getvalue()


def test_disk_cache_keeps_remote_objects_as_local_files(server, tmp_path):
    arrays = [np.arange(k * 100, k * 100 + 300, dtype=np.int32).reshape(3, 100) for k in range(4)]
    urls = [server.put(f"d/{k}.npy", _npy_bytes(a)) for k, a in enumerate(arrays)]
    folder = tmp_path / "cache"
    cache = gdsio.Cache(where="disk", path=folder, bytes="1M")
    assert isinstance(cache, gdsio.data.disk_cache.DiskCache) and isinstance(cache, gdsio.Cache)

    def epoch(c):
        loader = gdsio.Loader(urls, batch_size=4, device="cpu", threads=2, cache=c)
        (x, _), = list(loader)
        return x, loader.stats()

    x, st = epoch(cache)
    assert torch.equal(x, torch.from_numpy(np.stack(arrays))) and st.io_backends == {"posix": 4}, st.io_backends
    assert cache.stats()["fetched"] == 4 and len(os.listdir(folder)) == 4
    for f in os.listdir(folder):  # whole objects at offset 0 of files of their own: O_DIRECT- and cuFile-readable
        assert os.path.getsize(folder / f) in {len(_npy_bytes(a)) for a in arrays}
    gets, heads = server.gets, server.heads
    x2, _ = epoch(cache)  # later epochs: local reads only, not one request
    assert torch.equal(x2, x) and (server.gets, server.heads) == (gets, heads) and cache.stats()["hits"] == 4
    # A new process's cache over the same folder finds the files after one HEAD each, and no GET.
    again = gdsio.Cache(where="disk", path=folder, bytes="1M")
    x3, _ = epoch(again)
    assert torch.equal(x3, x) and server.gets == gets and server.heads == heads + 4 and again.stats()["found"] == 4
    # A rewritten object has another ETag: it is fetched again, never served stale.
    arrays[1] = arrays[1] * 7
    server.put("d/1.npy", _npy_bytes(arrays[1]))
    fresh = gdsio.Cache(where="disk", path=folder, bytes="1M")
    x4, _ = epoch(fresh)
    assert torch.equal(x4[1], torch.from_numpy(arrays[1])) and fresh.stats()["fetched"] == 1
    fresh.clear()  # deletes the files of the objects it knows; the stale version's file is not one of them
    assert len(os.listdir(folder)) == 1 and len(fresh) == 0


def test_disk_cache_budget_and_mistakes(server, tmp_path):
    big, small = server.put("big.bin", _data(10_000)), server.put("small.bin", _data(100))
    cache = gdsio.Cache(where="disk", path=tmp_path / "c", bytes=8192)
    assert cache.local_path(small) != small and cache.stats()["bytes_used"] == 4096
    assert cache.local_path(big) == big and cache.stats()["rejected"] == 1  # past the budget: read from the store
    assert cache.local_path(str(tmp_path)) == str(tmp_path)  # local paths pass through
    with open(cache.local_path(small), "rb") as f:
        assert f.read() == _data(100)
    with pytest.raises(FileNotFoundError) as e:
        cache.local_path(server.url("missing.bin"))
    assert e.value.filename == server.url("missing.bin") and len(os.listdir(tmp_path / "c")) == 1
    with pytest.raises(ValueError, match="needs path="):
        gdsio.Cache(where="disk", bytes="1G")
    with pytest.raises(ValueError, match="path= is for Cache\\(where='disk'\\)"):
        gdsio.Cache(bytes="1G", where="cpu", path=tmp_path)
    with pytest.raises(ValueError, match="local folder"):
        gdsio.Cache(where="disk", path="s3://b/p", bytes="1G")
    with pytest.raises(ValueError, match="bytes must be"):
        gdsio.Cache(where="disk", path=tmp_path, bytes=-1)


def test_another_librarys_message_is_redacted():
    """What kvikio-remote (libcurl) says about a presigned URL is shown without its query or user."""
    from gdsio.io.urls import redact

    url = "https://alice:pw@h:8443/k.bin?X-Amz-Signature=s3cr3t&X-Amz-Credential=AKIDX"
    text = redact(f"curl: (22) The requested URL returned error: 403 for {url} 'x?token=t0k'", url)
    assert text == "curl: (22) The requested URL returned error: 403 for https://h:8443/k.bin?… 'x?…'"


def test_read_many_names_a_url_it_cannot_take(tmp_path):
    local = tmp_path / "a.bin"
    local.write_bytes(b"abc")
    with pytest.raises(ValueError, match=r"read_many reads local files; http://127\.0\.0\.1:9/x\.bin is a URL"):
        gdsio.read_many([local, "http://127.0.0.1:9/x.bin"])


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_redirects_are_followed_and_remembered_per_file(server, status):
    """A HEAD answered by a redirect is followed (absolute and relative Locations), never read as an
    empty object; the File's GETs go to where the redirects led, and another File asks again."""
    data = _data(70_000, 4)
    server.put("real/x.bin", data)
    server.redirect("b/hop.bin", "../real/x.bin", status)  # relative: resolved against the request's URL
    url = server.redirect("a.bin", server.url("b/hop.bin"), status)
    with gdsio.settings(remote_chunk_bytes=16384, remote_concurrency=2), gdsio.File(url) as f:
        assert f.size() == len(data) and f.path == url
        out = np.zeros(len(data), np.uint8)
        f.read_into(out)
        assert bytes(out) == data
    assert server.paths.count("/a.bin") == 1 and server.paths.count("/b/hop.bin") == 1
    assert server.paths.count("/real/x.bin") == 1 + 5  # the HEAD, then every chunk's GET went straight there
    assert bytes(gdsio.read(url, device="cpu").numpy()) == data
    assert server.paths.count("/a.bin") == 2  # a File of its own follows the redirects again


def test_a_remembered_redirect_that_expired_is_followed_again(server):
    """Where a redirect led may stop answering (a presigned URL expires): the redirects are followed once more."""
    data = _data(20_000, 14)
    server.put("v1/o.bin", data)
    url = server.redirect("o.bin", "/v1/o.bin?X-Amz-Expires=60")
    with gdsio.File(url) as f:
        del server.objects["/v1/o.bin"]
        server.put("v2/o.bin", data)
        server.redirect("o.bin", "/v2/o.bin")
        out = np.zeros(len(data), np.uint8)
        f.read_into(out)
        assert bytes(out) == data
        f.read_into(out)
    assert server.paths[2:] == ["/v1/o.bin?X-Amz-Expires=60", "/o.bin", "/v2/o.bin", "/v2/o.bin"], server.paths


def test_a_presigned_url_a_redirect_led_to_is_read_with_gets(server):
    """A redirect to a presigned URL that refuses HEAD (403: its signature is for GET): the size comes from a
    one-byte GET there, as for a presigned URL given directly."""
    data = _data(3000, 15)
    server.put("cdn/o.bin", data)
    url = server.redirect("o.bin", "/cdn/o.bin?X-Amz-Signature=abc")
    server.faults.no_head, server.faults.no_head_status = True, 403
    assert bytes(gdsio.read(url, device="cpu").numpy()) == data
    assert server.paths == ["/o.bin", "/cdn/o.bin?X-Amz-Signature=abc", "/cdn/o.bin?X-Amz-Signature=abc",
                            "/cdn/o.bin?X-Amz-Signature=abc"]  # HEAD, HEAD (403), the one-byte GET, the GET


def test_a_redirect_of_the_gets_only_is_followed(server):
    data = _data(50_000, 5)
    url = server.put("g.bin", data)
    server.put("mirror/g.bin", data)
    server.redirect("g.bin", "/mirror/g.bin", 307, methods=("GET",))
    with gdsio.settings(remote_chunk_bytes=16384, remote_concurrency=1):
        t, st = gdsio.read(url, device="cpu", return_stats=True)
    assert bytes(t.numpy()) == data
    assert server.paths.count("/g.bin") == 2 and server.paths.count("/mirror/g.bin") == 4  # HEAD, 1 GET; 4 GETs
    assert st.requests == 5 and st.retries == 0


def test_redirect_loops_and_too_many_hops_are_oserrors(server):
    data = _data(1000, 6)
    server.put("h10", data)
    for k in range(10):
        server.redirect(f"h{k}", f"/h{k + 1}")
    assert bytes(gdsio.read(server.url("h0"), device="cpu").numpy()) == data  # 10 hops: followed
    server.redirect("h10", "/h11")
    server.put("h11", data)
    with pytest.raises(OSError, match=r"more than 10 redirects") as e:
        gdsio.File(server.url("h0"))
    assert e.value.filename == server.url("h0")
    loop = server.redirect("loop", "/loop", 301)
    with pytest.raises(OSError, match=r"more than 10 redirects.*loop") as e:
        gdsio.read(loop, device="cpu")
    assert e.value.filename == loop and e.value.errno == errno.ELOOP
    # The same on the GETs: the HEAD answers, the GETs go round in circles.
    url = server.put("getloop", data)
    server.redirect("getloop", "/getloop", 302, methods=("GET",))
    with pytest.raises(OSError, match=r"more than 10 redirects") as e:
        gdsio.read(url, device="cpu")
    assert e.value.filename == url


def test_redirects_never_carry_credentials_elsewhere_nor_show_them(server):
    other = RangeServer()
    try:
        data = _data(3000, 8)
        other.put("c.bin", data)
        server.redirect("c.bin", other.url("c.bin") + "?X-Amz-Signature=t0ken")
        url = f"http://alice:hunter2@127.0.0.1:{server.port}/c.bin?X-Amz-Signature=s3cr3t"
        assert bytes(gdsio.read(url, device="cpu").numpy()) == data
        assert other.paths == ["/c.bin?X-Amz-Signature=t0ken"] * 2  # the query of the Location, on HEAD and GET
        assert all("Authorization" not in h for h in other.headers_seen)  # Basic credentials stay with their host
        server.redirect("c.bin", "/c.bin?again=1")  # a loop with a query on every hop
        with pytest.raises(OSError) as e:
            gdsio.read(url, device="cpu")
        assert e.value.filename == f"http://127.0.0.1:{server.port}/c.bin?…"
        for text in (str(e.value), repr(e.value)):
            assert "hunter2" not in text and "alice" not in text and "s3cr3t" not in text and "again" not in text
    finally:
        other.close()


def test_redirects_never_lose_tls_nor_leave_http(server, tls_server):
    data = _data(5000, 9)
    server.put("p.bin", data)
    url = tls_server.redirect("s.bin", server.url("p.bin"), 301)
    with pytest.raises(OSError, match=r"from https to http .*refused") as e:
        gdsio.File(url)
    assert e.value.filename == url and server.paths == []  # not one request went out in the clear
    for where in ("ftp://127.0.0.1/p.bin", "file:///etc/passwd"):
        tls_server.redirect("s.bin", where)
        with pytest.raises(OSError, match=r"redirected to .*, not an http\(s\) URL: refused") as e:
            gdsio.File(url)
        assert e.value.filename == url
    # http to https is followed: the bytes only gain encryption (see gdsio.io.http).
    tls_server.put("t.bin", data)
    up = server.redirect("up.bin", tls_server.url("t.bin"), 308)
    assert bytes(gdsio.read(up, device="cpu").numpy()) == data
    assert tls_server.paths.count("/t.bin") == 2


def test_retry_after_is_honoured(server, monkeypatch):
    """Both forms of Retry-After set the wait before the next try (no real wait: the sleep is recorded)."""
    slept: list[float] = []
    monkeypatch.setattr(http, "_sleep", slept.append)
    data = _data(1000, 10)
    url = server.put("ra.bin", data)
    f = gdsio.File(url)
    server.faults.status_503, server.faults.retry_after = 2, "3"
    out = np.zeros(1000, np.uint8)
    st = f.read_into(out)
    assert bytes(out) == data and st.retries == 2 and slept == [3, 3]
    slept.clear()
    server.faults.status_503, server.faults.fail_status = 1, 429
    server.faults.retry_after = "Wed, 01 Jan 2031 00:00:07 GMT"
    monkeypatch.setattr(http, "_wall_clock", lambda: 1924992000.0)  # 2031-01-01 00:00:00 UTC
    st = f.read_into(out)
    assert st.retries == 1 and slept == [7]
    f.close()


def test_retry_after_past_the_timeout_fails_at_once(server, monkeypatch):
    slept: list[float] = []
    monkeypatch.setattr(http, "_sleep", slept.append)
    url = server.put("rb.bin", _data(1000))
    f = gdsio.File(url)
    server.faults.status_503, server.faults.retry_after = 100, "120"
    gets = server.gets
    with gdsio.settings(remote_timeout=5, remote_retries=4), pytest.raises(OSError) as e:
        f.read_into(np.zeros(1000, np.uint8))
    assert "asked to retry after 120 s" in str(e.value) and "remote_timeout (5 s)" in str(e.value)
    assert e.value.filename == url and slept == [] and server.gets == gets + 1
    f.close()


@pytest.mark.parametrize("compressible", [False, True])
def test_a_server_that_gzips_anyway_is_named(server, compressible):
    data = bytes(20_000) if compressible else _data(20_000, 12)
    url = server.put("z.bin", data)
    server.faults.gzip = True
    with pytest.raises(OSError, match=r"Content-Encoding: gzip although Accept-Encoding: identity") as e:
        gdsio.read(url, device="cpu")
    assert e.value.filename == url and e.value.errno == errno.EIO
    assert all(h.get("Accept-Encoding") == "identity" for h in server.headers_seen)


def test_a_body_cut_short_is_retried_then_named(server):
    data = _data(40_000, 13)
    url = server.put("t.bin", data)
    server.faults.truncate, server.faults.truncate_by = 1, 1000
    with gdsio.settings(remote_chunk_bytes=1 << 20):
        t, st = gdsio.read(url, device="cpu", return_stats=True)
    assert bytes(t.numpy()) == data and st.retries == 1  # transient: the next try asked for the rest
    assert server.ranges[-1] == "bytes=39000-39999"
    server.faults.truncate, server.faults.truncate_by = 100, 30_000
    with gdsio.settings(remote_retries=1), pytest.raises(OSError) as e:
        gdsio.read(url, device="cpu")
    assert "GET failed after 2 tries: truncated body: 0 of 30000 bytes received" in str(e.value), str(e.value)
    assert e.value.filename == url
