"""bench/bench_remote.py smoke-run at 1 MiB (so it cannot rot): every client
it names reads the same bytes from its own nginx on 127.0.0.1, or says why not."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "bench_remote.py"


@pytest.mark.skipif(not (shutil.which("nginx") or os.path.exists("/usr/sbin/nginx")),
                    reason="nginx is not installed (apt-get install -y nginx; .ci/run does it)")
def test_bench_remote_smoke_1mib(tmp_path):
    out = tmp_path / "r.json"
    r = subprocess.run([sys.executable, "-P", str(SCRIPT), "--size", "1M", "--chunk", "256K", "--concurrency", "2",
                        "--repeat", "1", "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    res = {x["client"]: x for x in json.loads(out.read_text())["results"]}
    assert set(res) == {"gdsio-http", "gdsio-s3", "obstore-http", "obstore-s3", "boto3", "s3torchconnector",
                        "requests", "fsspec-http"}
    for name in ("gdsio-http", "gdsio-s3"):  # ours always run, and say which reader ran
        assert res[name]["gbps"] > 0 and res[name]["note"].startswith(name.split("-")[1] + ":"), res[name]
    for x in res.values():  # a peer either read the right bytes or was skipped with its reason
        assert (x["gbps"] or 0) > 0 or x["skipped"].startswith("not installed"), x
    assert "vs fastest peer" in r.stdout
