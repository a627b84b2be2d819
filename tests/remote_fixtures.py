"""Fixtures of the remote-object tests (imported by those test modules):
every test runs under the loopback guard, with a clean AWS configuration,
and fails if it leaves a thread running or a socket open."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from remote_servers import LeakCheck, LoopbackGuard, MotoS3, Nginx, RangeServer, self_signed_cert


@pytest.fixture(autouse=True)
def no_leaks():
    """Set up first, torn down last: after the servers, clients and pools of
    the test are closed, no thread or file descriptor of its own may remain."""
    check = LeakCheck()
    yield
    threads, fds = check.leaks()
    assert not threads and not fds, f"left behind: threads {threads}, file descriptors {fds}"


@pytest.fixture(autouse=True)
def loopback_only(no_leaks):
    """Fails the test if anything in it connected to an address off loopback."""
    with LoopbackGuard() as guard:
        yield guard
    assert not guard.violations, f"connections off loopback: {guard.violations}"


@pytest.fixture(autouse=True)
def aws_clean(no_leaks, monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """No AWS_* variable of the machine, no shared config files, no instance metadata."""
    import os

    for k in list(os.environ):
        if k.startswith("AWS_"):
            monkeypatch.delenv(k)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    from gdsio.io import http

    http.drop_pools()
    yield
    http.drop_pools()
    if "botocore" in sys.modules:
        from gdsio.io import s3

        s3.forget()


@pytest.fixture
def server(no_leaks):
    s = RangeServer()
    yield s
    s.close()


@pytest.fixture
def tls_server(no_leaks, aws_clean, monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """The ranged server over https with a self-signed certificate for 127.0.0.1, trusted through
    AWS_CA_BUNDLE (which gdsio's https connections honour)."""
    cert, key = self_signed_cert(tmp_path)
    monkeypatch.setenv("AWS_CA_BUNDLE", cert)
    s = RangeServer(tls=(cert, key))
    yield s
    s.close()


@pytest.fixture
def nginx(no_leaks, tmp_path: Path):
    root = tmp_path / "www"
    root.mkdir()
    try:
        n = Nginx(root, tmp_path / "nginx")
    except FileNotFoundError as e:  # a machine without Debian's nginx: the tests against our own server still run
        pytest.skip(str(e))
    yield n
    n.close()


@pytest.fixture(scope="module")
def moto_server():
    """One moto server per test module: stopped (with its threads and memory) before other modules run."""
    m = MotoS3()
    yield m
    m.close()


@pytest.fixture
def moto(moto_server: MotoS3, monkeypatch: pytest.MonkeyPatch, aws_clean):
    """moto's S3 on 127.0.0.1, reset, with the AWS_* variables pointing at it."""
    from moto import settings as moto_settings

    moto_server.reset()
    for k, v in moto_server.env().items():
        monkeypatch.setenv(k, v)
    yield moto_server
    moto_settings.INITIAL_NO_AUTH_ACTION_COUNT = float("inf")
    moto_server.close_clients()
    from gdsio.io import s3

    s3.forget()
