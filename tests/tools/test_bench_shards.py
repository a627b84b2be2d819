"""bench/bench_shards.py smoke-run at tiny sizes (so it cannot rot), and its
latency proxy (bench/latency_proxy.py) on its own: every request counted and
delayed, bytes passed through unchanged, loopback only. No timing is
asserted: the proxy's delay is checked through the sleep it calls."""

from __future__ import annotations

import http.client
import importlib.util
import json
import os
import shutil
import subprocess
import sys

import pytest
from remote_servers import LeakCheck, LoopbackGuard, RangeServer

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "bench")


@pytest.fixture(scope="module")
def proxy_mod():
    if not os.path.isfile(os.path.join(BENCH, "latency_proxy.py")):
        pytest.skip("bench/ is not beside tests/ (an sdist without it)")
    spec = importlib.util.spec_from_file_location("gdsio_bench_latency_proxy", os.path.join(BENCH, "latency_proxy.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def upstream():
    check = LeakCheck()
    with LoopbackGuard() as guard:
        s = RangeServer()
        yield s
        s.close()
    assert not guard.violations
    threads, fds = check.leaks()
    assert not threads and not fds, f"left behind: threads {threads}, file descriptors {fds}"


def _get(conn: http.client.HTTPConnection, path: str, method: str = "GET",
         headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    conn.request(method, path, headers=headers or {})
    r = conn.getresponse()
    return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()


def test_proxy_counts_and_delays_every_request_and_passes_bytes_unchanged(proxy_mod, upstream):
    data = os.urandom(3 << 20)  # several of the proxy's 1 MiB pieces (64 KiB when paced)
    upstream.put("bucket/obj.bin", data)
    waits: list[float] = []

    async def sleep(seconds: float) -> None:  # stands in for asyncio.sleep: the delay asked, no wall clock
        waits.append(seconds)

    with proxy_mod.LatencyProxy(upstream.base, delay=0.02, sleep=sleep) as p:
        conn = http.client.HTTPConnection("127.0.0.1", p.port, timeout=30)
        try:
            status, _, body = _get(conn, "/bucket/obj.bin")
            assert status == 200 and body == data
            status, h, body = _get(conn, "/bucket/obj.bin", headers={"Range": "bytes=100-70099"})
            assert status == 206 and body == data[100:70100] and h["content-range"] == f"bytes 100-70099/{len(data)}"
            status, h, body = _get(conn, "/bucket/obj.bin", "HEAD")  # a Content-Length and no body
            assert status == 200 and body == b"" and int(h["content-length"]) == len(data)
            status, _, body = _get(conn, "/bucket/missing")
            assert status == 404 and body == b""
            status, _, body = _get(conn, proxy_mod.STATS_PATH)  # the proxy's own: not forwarded, not delayed
            assert status == 200
        finally:
            conn.close()
        stats = json.loads(body)
        assert stats["requests"] == 4 and stats["methods"] == {"GET": 3, "HEAD": 1}
        assert stats["connections"] == 1  # kept alive: one client connection for all five
        assert waits == [0.02] * 4
        assert upstream.gets == 3 and upstream.heads == 1 and upstream.ranges == ["", "bytes=100-70099", ""]
        assert stats["bytes_down"] > len(data) + 70000 and stats["bytes_up"] > 0


def test_proxy_paces_with_a_bandwidth_cap_and_closes_cleanly(proxy_mod, upstream):
    data = os.urandom(1 << 20)
    upstream.put("obj", data)
    with proxy_mod.LatencyProxy(upstream.base, delay=0.0, bandwidth=2e9) as p:
        for _ in range(3):  # a connection each
            conn = http.client.HTTPConnection("127.0.0.1", p.port, timeout=30)
            try:
                assert _get(conn, "/obj")[2] == data
            finally:
                conn.close()
        assert p.stats()["requests"] == 3 and p.stats()["connections"] == 3
    assert proxy_mod.parse_rate("1G") == 1e9 and proxy_mod.parse_rate("250k") == 250e3


def test_proxy_listens_and_forwards_on_loopback_only(proxy_mod, upstream):
    with proxy_mod.LatencyProxy(upstream.base, delay=0.0) as p:
        assert p.listening() and all(addr == "127.0.0.1" for addr, _ in p.listening())
        assert p.base == f"http://127.0.0.1:{p.port}"
    for kwargs in ({"host": "0.0.0.0"}, {"host": "::"}, {"host": "localhost.invalid"}):
        with pytest.raises(ValueError, match="host must be a loopback address"):
            proxy_mod.LatencyProxy(upstream.base, **kwargs)
    for url in ("http://0.0.0.0:80", "http://example.invalid:80", "https://127.0.0.1:443", "http://127.0.0.1"):
        with pytest.raises(ValueError, match="upstream"):
            proxy_mod.LatencyProxy(url)
    with pytest.raises(ValueError, match="delay"):
        proxy_mod.LatencyProxy(upstream.base, delay=-1)


def smoke_run(name: str, tmp_path) -> tuple[dict, str]:
    """bench/`name` --smoke with the gdsio under test: its report's figures and text (skips without the
    bench's servers)."""
    script = os.path.join(BENCH, name)
    if not os.path.isfile(script):
        pytest.skip("bench/ is not beside tests/ (an sdist without it)")
    pytest.importorskip("moto.server", reason="the bench runs moto's S3 server (pip install 'moto[server]')")
    pytest.importorskip("boto3", reason="the bench uploads with boto3")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}  # the gdsio under test
    cmd = [sys.executable, "-P", script, "--smoke", "--out-dir", str(tmp_path), "--name", "smoke",
           "--cache", str(tmp_path / "cache")]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, cwd=str(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads((tmp_path / "smoke.json").read_text()), (tmp_path / "smoke.md").read_text()


def test_bench_shards_smoke(tmp_path):
    doc, md = smoke_run("bench_shards.py", tmp_path)
    assert doc["command"].startswith("python bench/bench_shards.py --smoke") and doc["commit"]["head"]
    assert doc["machine"]["cpus"] and len(doc["load_start"]) == 3
    assert {s["process"] for s in doc["listening"]} >= {"moto", "proxy"}
    if shutil.which("nginx") or os.path.exists("/usr/sbin/nginx"):  # the -http pair: nginx and its own proxy
        assert {s["process"] for s in doc["listening"]} >= {"nginx", "proxy-http"}
        assert doc["http_servers"].startswith("nginx, proxy http://127.0.0.1:")
    assert all(s["address"] == "127.0.0.1" and s["loopback"] for s in doc["listening"])
    rows = {row["row"]: row for row in doc["rows"]}
    for name in ("gdsio-folder-local", "gdsio-shards-local", "gdsio-objects-s3", "gdsio-shards-s3-global",
                 "gdsio-shards-s3-window", "gdsio-shards-local-window", "webdataset-s3", "webdataset-s3-pil", "litdata-s3", "mosaic-streaming-s3",
                 "first-batch-100-gdsio-global", "first-batch-100-webdataset", "gdsio-shards-http-window",
                 "webdataset-http"):
        assert name in rows and name in md, name
    for row in rows.values():
        assert row["status"] in ("ok", "skipped"), row  # a row that fails is a defect; skipped ones say why
        if row["status"] == "skipped":
            assert row["reason"] and row["reason"] in md
        else:
            assert row["images"] > 0 and row["images_per_s"] > 0 and row["cpu_s"] >= 0
    for name in ("gdsio-folder-local", "gdsio-shards-local", "gdsio-objects-s3", "gdsio-shards-local-window"):
        assert rows[name]["status"] == "ok", rows[name]
    if rows["gdsio-shards-s3-window"]["status"] == "ok" and rows["webdataset-s3"]["status"] == "ok":
        assert any(g.startswith("(the ceiling of the like-for-like goal)") for g in doc["goals"]), doc["goals"]
    if rows["gdsio-shards-http-window"]["status"] == "ok" and rows["webdataset-http"]["status"] == "ok":
        assert any(g.startswith("the same goal over nginx") for g in doc["goals"]), doc["goals"]
        assert rows["gdsio-shards-http-window"]["server"] == "nginx" and rows["webdataset-http"]["vs_webdataset"] == 1
    assert any(n.startswith(f"moto {doc['machine']['peers']['moto']} answers a ranged GET") for n in doc["notes"])
    assert rows["gdsio-objects-s3"]["requests"] >= rows["gdsio-objects-s3"]["images"]  # one GET an image at least
    assert doc["data"]["images"] == 48 and doc["proxy"]["requests"] > 0 and doc["proxy"]["delay_s"] == 0.001
    eq = doc["equal"]
    assert eq["local shards vs local ImageFolder, first batch (shuffle=True, seed)"] is True
    assert eq["s3 ImageFolder of objects vs local ImageFolder, first batch"] is True
    for name, row in rows.items():  # every row that ran: its first batch is the ImageFolder's same samples
        if row["status"] == "ok" and name != "webdataset-s3-pil":
            assert eq[f"{name}: first batch vs the same samples as local ImageFolder files"] is True, name
    if rows["webdataset-s3-pil"]["status"] == "ok":  # PIL's decode and resize: the same samples, pixels near
        near = eq["webdataset-s3-pil: first batch vs the same samples through gdsio (PIL's decode and resize)"]
        assert near.startswith("same samples and labels"), near
        assert rows["webdataset-s3-pil"]["vs_webdataset"] > 0 and "not the goal's measure" in md
        if name.startswith("gdsio-shards-s3-global") and row["status"] == "ok":
            assert eq[f"{name} vs the s3 ImageFolder of objects, first batch"] is True
    if rows["webdataset-s3"]["status"] == "ok":
        assert rows["webdataset-s3"]["images"] == 48 and rows["webdataset-s3"]["requests"] >= doc["data"]["shards"]
    elif shutil.which("curl"):
        pytest.importorskip("webdataset")
        pytest.fail(f"webdataset row: {rows['webdataset-s3']}")


def test_bench_early_reads_smoke(tmp_path):
    if not (shutil.which("nginx") or os.path.exists("/usr/sbin/nginx")):
        pytest.skip("nginx is not installed (apt-get install -y nginx; .ci/run does it)")
    doc, md = smoke_run("early_reads.py", tmp_path)
    passes = doc["passes"]
    assert [(x["store"], x["early"]) for x in passes] == [("moto", True), ("moto", False), ("nginx", True),
                                                          ("nginx", False)]
    for x in passes:  # the same images each way; the first batch (8) read alone only where asked
        assert x["images"] == 48 and x["early_reads"] == (8 if x["early"] else 0) and x["requests"] > 0
    assert len(doc["medians"]) == 4 and "| nginx | on |" in md
