"""gdsio.data.loopback: sessions found, timed and ended by id; sockets read
from /proc and judged loopback or not. The Ray cluster itself is run by
tests/tools/test_bench_ray_pinned.py and the offload-plan measurement test."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import pytest

from gdsio.data import loopback
from gdsio.data.loopback import LoopbackCluster, LoopbackError, cpu_seconds, process_sockets, session_pids

SPIN = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\ntime.sleep(60)"


def _session(code: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", f"import subprocess, sys\n"
                             f"subprocess.Popen([sys.executable, '-c', {code!r}])\n{code}"],
                            start_new_session=True)


def test_a_session_is_found_timed_and_ended_by_id():
    p = _session(SPIN)  # a process and its child, both in p's session
    try:
        deadline = time.monotonic() + 30
        while (len(session_pids([p.pid])) < 2 or cpu_seconds(session_pids([p.pid])) < 0.5) \
                and time.monotonic() < deadline:
            time.sleep(0.05)
        pids = session_pids([p.pid])
        assert p.pid in pids and len(pids) == 2
        assert cpu_seconds(pids) >= 0.5  # both spun 0.3 s of CPU
        c = LoopbackCluster.__new__(LoopbackCluster)  # only its way of ending sessions
        c.grace = 5.0
        assert c._end([p.pid]) == []
        assert session_pids([p.pid]) == []
    finally:
        if p.poll() is None:
            p.kill()
        p.wait(10)


def test_sockets_are_read_from_proc_and_judged():
    import os

    with socket.socket() as lo:  # a real socket on loopback only: a test listens nowhere else
        lo.bind(("127.0.0.1", 0))
        lo.listen()
        mine = [s for s in process_sockets([os.getpid()]) if "LISTEN" in s["kind"] and s["local"] == "127.0.0.1"]
    assert mine and not loopback._off_loopback(mine[0])
    wildcard = {"pid": 1, "kind": "tcp LISTEN", "local": "0.0.0.0", "remote": "0.0.0.0"}  # every interface
    assert loopback._off_loopback(wildcard)
    assert loopback._address("0100007F:1F90") == "127.0.0.1"
    assert loopback._plain("::ffff:7f00:1") == "127.0.0.1" and loopback._plain("::1") == "::1"


def test_a_socket_off_loopback_refuses_the_cluster(monkeypatch):
    c = LoopbackCluster.__new__(LoopbackCluster)
    c.head_session, c.node_sessions = None, []
    monkeypatch.setattr(loopback, "process_sockets", lambda pids: [
        {"pid": 1, "kind": "tcp LISTEN", "local": "127.0.0.1", "remote": "0.0.0.0"},
        {"pid": 2, "kind": "tcp6 LISTEN", "local": "::", "remote": "::"}])  # every interface
    with pytest.raises(LoopbackError, match="'local': '::'"):
        c.check_loopback([1])


def test_the_heads_ports_are_distinct_where_the_os_gives_a_closed_port_again(monkeypatch):
    """The head's GCS, dashboard and agent ports: asked for one at a time, each asker's socket closed, the
    kernel may give the same port again (CI once had the GCS and the dashboard on one port). A fake socket
    module gives the lowest port no open fake socket holds: only ports held at once come out distinct."""
    held: set[int] = set()

    class FakeSocket:
        def __init__(self, *a: object) -> None:
            self.port = 0

        def bind(self, addr: tuple[str, int]) -> None:
            assert addr == ("127.0.0.1", 0)
            self.port = min(set(range(40000, 40100)) - held)
            held.add(self.port)

        def getsockname(self) -> tuple[str, int]:
            return ("127.0.0.1", self.port)

        def close(self) -> None:
            held.discard(self.port)

        def __enter__(self) -> "FakeSocket":
            return self

        def __exit__(self, *exc: object) -> None:
            self.close()

    monkeypatch.setattr(loopback.socket, "socket", FakeSocket)
    argv: list[str] = []
    c = LoopbackCluster.__new__(LoopbackCluster)
    c.ray, c.head_cpus, c.head_cores, c.object_store_bytes, c.tmp = "ray", 1, None, 1 << 28, "/tmp/x"
    monkeypatch.setattr(c, "_start", lambda a, cores: argv.extend(a) or 1, raising=False)
    c.start_head()
    ports = [int(x.split("=")[1]) for x in argv
             if x.startswith(("--port=", "--dashboard-port=", "--dashboard-agent-listen-port="))]
    assert len(ports) == 3 and len(set(ports)) == 3, argv
    assert c.port == ports[0] and not held  # every socket closed again


def test_wait_for_nodes_is_bounded():
    class FakeRay:
        @staticmethod
        def nodes():
            return [{"Alive": True, "Labels": {"gdsio-role": "preprocess"}}, {"Alive": False, "Labels": {}}]

    assert loopback.wait_for_nodes(FakeRay, 1, {"gdsio-role": "preprocess"}, timeout=1) == 1  # the live ones
    with pytest.raises(TimeoutError, match="1 of 2 nodes"):
        loopback.wait_for_nodes(FakeRay, 2, {"gdsio-role": "preprocess"}, timeout=0.3)


def test_a_session_meter_counts_a_process_that_exits_unreaped():
    # The leader ignores SIGCHLD (its children are reaped by the kernel, their time given to no one),
    # then starts a child that spins 0.4 s of CPU, idles 1 s (the meter reads it then, however loaded the
    # machine) and exits: /proc's totals lose it, the meter does not.
    leader = ("import signal, subprocess, sys, time\nsignal.signal(signal.SIGCHLD, signal.SIG_IGN)\n"
              "time.sleep(0.5)\n"
              "subprocess.Popen([sys.executable, '-c', 'import time\\nt = time.process_time()\\n"
              "while time.process_time() - t < 0.4: pass\\ntime.sleep(1)'])\ntime.sleep(60)")
    p = subprocess.Popen([sys.executable, "-c", leader], start_new_session=True)
    try:
        meter = loopback.SessionMeter([p.pid], every=0.05).start()
        deadline = time.monotonic() + 30
        while len(session_pids([p.pid])) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)  # the child is born
        while len(session_pids([p.pid])) > 1 and time.monotonic() < deadline:
            time.sleep(0.02)  # and gone
        spent = meter.stop()
        assert spent >= 0.3, spent
        assert cpu_seconds(session_pids([p.pid])) < 0.3  # what the totals of the live processes say
        assert meter.own >= 0
    finally:
        p.kill()
        p.wait(10)
