"""The ``gdsio`` command takes what the library takes: s3:// and http(s)://
sources (``gdsio bench URL``, ``gdsio demo s3://bucket/prefix/``), against
the loopback servers; and a remote failure is said as the library says it
(a 404, a missing bucket, a refused connection), in one line, exit 2.

The command runs in a fresh process (the servers' request logs stay in this
one); GDSIO_REMOTE_RETRIES=0 so a refused connection is not retried."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from remote_fixtures import aws_clean, loopback_only, moto, moto_server, no_leaks, server  # noqa: F401
from remote_servers import free_port

from gdsio.tools import bench
from gdsio.tools.cli import EXIT_USAGE

pytest.importorskip("botocore", reason="the s3 tests need botocore (pip install 'gdsio[s3]')")
pytest.importorskip("moto", reason="the s3 tests need moto's server (pip install 'moto[server]')")


def _gdsio(*argv: str, cwd: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p), "GDSIO_REMOTE_RETRIES": "0"}
    return subprocess.run([sys.executable, "-P", "-m", "gdsio", *argv], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=300)


def _error_line(p: subprocess.CompletedProcess[str], command: str) -> str:
    assert p.returncode == EXIT_USAGE, (p.returncode, p.stdout, p.stderr)
    assert "Traceback" not in p.stderr and len(p.stderr.splitlines()) == 1, p.stderr
    assert p.stderr.startswith(f"gdsio {command}: error: "), p.stderr
    return p.stderr


def test_bench_times_an_http_object(server, tmp_path):
    data = os.urandom(300_000)
    url = server.put("shard.bin", data)
    out = tmp_path / "r.json"
    p = _gdsio("bench", url, "--repeat", "1", "--json", str(out))
    assert p.returncode == 0, p.stderr
    assert "--sizes" not in p.stderr
    doc = json.loads(out.read_text())
    assert doc["files"] == [{"path": url, "size": len(data), "generated": False}]
    assert doc["config"]["source"] == "url"
    rows = {r["path"]: r for r in doc["results"]}
    skipped = {s["path"]: s["reason"] for s in doc["skipped"]}
    assert set(rows) | set(skipped) == set(bench.REMOTE_PATHS)
    for name in ("remote-serial", "gdsio-remote-host"):  # host memory: they run anywhere
        r = rows[name]
        assert r["status"] == "ok" and r["backend"] == "http" and r["gbps"] > 0 and r["ratio_to"] == "remote-serial"
    ceilings = {c["name"]: c for c in doc["ceilings"]}
    assert ceilings["page-cache"]["status"] == "skipped" and "remote object" in ceilings["page-cache"]["reason"]
    assert "vs remote-serial" in p.stdout


def test_bench_times_the_objects_under_an_s3_prefix(moto, tmp_path):
    c = moto.client()
    c.create_bucket(Bucket="bkt")
    for key, n in (("shards/a.bin", 70_000), ("shards/b.bin", 50_000), ("shards/deeper/c.bin", 9), ("other", 5)):
        c.put_object(Bucket="bkt", Key=key, Body=os.urandom(n))
    out = tmp_path / "r.json"
    p = _gdsio("bench", "s3://bkt/shards/", "--repeat", "1", "--paths", "gdsio-remote-host", "--json", str(out))
    assert p.returncode == 0, p.stderr
    doc = json.loads(out.read_text())
    assert [(f["path"], f["size"]) for f in doc["files"]] == [("s3://bkt/shards/b.bin", 50_000),
                                                              ("s3://bkt/shards/a.bin", 70_000)]
    assert [(r["status"], r["backend"]) for r in doc["results"]] == [("ok", "s3"), ("ok", "s3")]


def test_demo_loads_an_imagefolder_of_s3_objects(moto, tmp_path):
    from gdsio.tools.demo import write_jpeg_folder

    n = write_jpeg_folder(str(tmp_path), classes=2, per_class=3, size=(64, 48))
    c = moto.client()
    c.create_bucket(Bucket="bkt")
    for root, _, names in os.walk(tmp_path):
        for name in names:
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                c.put_object(Bucket="bkt", Key="train/" + os.path.relpath(path, tmp_path), Body=f.read())
    p = _gdsio("demo", "s3://bkt/train/", "--device", "cpu", "--no-train", "--batch-size", "2")
    assert p.returncode == 0, p.stderr
    assert f"gdsio.Loader: {n} images" in p.stdout and f"I/O: s3 ({n} reads)" in p.stdout, p.stdout


def test_remote_failures_are_said_as_the_library_says_them(server, moto):
    """Not "no such file or directory" for every URL: what failed, where."""
    missing = server.url("missing.bin")
    closed = f"http://127.0.0.1:{free_port()}/shard.bin"
    moto.client().create_bucket(Bucket="bkt")
    cases = [
        (["bench", missing], f"{missing}: no such object: HTTP 404"),
        (["bench", closed], "Connection refused"),
        (["bench", "s3://no-such-bucket/shards/"], "s3://no-such-bucket/shards/: cannot list: no such bucket"),
        (["bench", "s3://no-such-bucket/shard.bin"], "no such bucket"),
        (["bench", "s3://bkt/nothing/"], "s3://bkt/nothing/: no such object, nor non-empty objects"),
        (["demo", "s3://no-such-bucket/train/", "--device", "cpu"], "s3://no-such-bucket/train/: cannot list: no such bucket"),
        (["demo", closed, "--device", "cpu", "--no-train"], "Connection refused"),
    ]
    for argv, message in cases:
        assert message in _error_line(_gdsio(*argv), argv[0]), argv


def test_url_mistakes_are_said_before_any_request(server):
    url = server.put("shard.bin", b"x" * 8192)
    for argv, message in [
        (["bench", url, "--cold"], "--cold evicts local files from the page cache"),
        (["bench", url, "--paths", "naive"], "--paths: naive do not read s3:// and http(s):// objects"),
        (["bench", "--sizes", "64K", "--paths", "gdsio-remote"], "--paths: gdsio-remote do not read local files"),
        (["doctor", url], "is a remote object: doctor checks GPUDirect Storage"),
    ]:
        p = _gdsio(*argv)
        assert message in _error_line(p, argv[0]), argv
        assert p.stdout == "", p.stdout
    assert server.gets == 0
