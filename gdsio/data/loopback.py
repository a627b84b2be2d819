"""A Ray cluster on 127.0.0.1 made of ``ray start`` processes, each node in a
session of its own, optionally pinned to cores: what ``gdsio offload-plan
--measure`` and ``bench/bench_ray.py --pinned`` run the offload on.

Each node's processes (raylet, GCS, object store, the workers the raylet
starts) are found by their session id, so they are timed from /proc
(user + system CPU, children reaped included) and ended by process id, never
by name: ``ray stop`` would end every Ray process of the machine, other users'
clusters included. Every socket of those processes (and of the drivers named)
is checked to be on loopback; :meth:`LoopbackCluster.check_loopback` raises
otherwise. Linux only (/proc). No Ray import here: the nodes are processes.
"""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Iterable, Sequence

__all__ = ["LoopbackCluster", "LoopbackError", "RAY_LOOPBACK_ENV", "SessionMeter", "check_loopback", "cpu_seconds",
           "process_sockets", "session_pids", "wait_for_nodes"]

# Before ray is imported, in every process of the cluster and its drivers: Ray
# rewrites 127.0.0.1 to the machine's address otherwise (ray/_private/services.py),
# and sends usage reports off the machine. The authentication mode is said, the same
# for every process: unset, `ray start --head` turns token authentication on when
# some earlier cluster left ~/.ray/auth_token, and the nodes started here
# (ray._private.node.Node, as ray.cluster_utils does) would then be refused.
RAY_LOOPBACK_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0",
                    "RAY_DATA_USAGE_DISABLED": "1", "RAY_AUTH_MODE": "disabled"}

# A CPU node joining the head: what ray.cluster_utils.Cluster.add_node does, in a
# process of its own. `ray start --address` refuses to join with
# RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0, and with 1 Ray moves 127.0.0.1 to the machine's address.
_NODE = """\
import json, sys
from ray._private.node import Node
from ray._private.parameter import RayParams
params = RayParams(**json.loads(sys.argv[1]))
params.dashboard_agent_listen_port = None  # a free one: the head's agent holds the default
Node(params, head=False, shutdown_at_exit=False, spawn_reaper=False)  # its processes outlive this one
"""

# Runs argv[2:] with its CPU affinity set to the cores in argv[1] (taskset -c's job,
# without needing util-linux); children inherit the affinity.
_PIN = "import os, sys; os.sched_setaffinity(0, {int(c) for c in sys.argv[1].split(',')}); os.execvp(sys.argv[2], sys.argv[2:])"


class LoopbackError(RuntimeError):
    """A process of the cluster (or a driver) has a socket off loopback, or a
    node could not start: the cluster is not used."""


def _stat_fields(pid: int | str) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
    except (OSError, IndexError):
        return None


def session_pids(sessions: Iterable[int]) -> list[int]:
    """The live processes whose session id is one of `sessions`."""
    want = set(sessions)
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            f = _stat_fields(name)
            if f is not None and int(f[3]) in want and f[0] != "Z":
                out.append(int(name))
    return out


def cpu_seconds(pids: Iterable[int]) -> float:
    """User + system CPU seconds of `pids`, with their reaped children's
    (/proc/PID/stat utime, stime, cutime, cstime), now. A process that exits
    unreaped (or reaped by a parent ignoring SIGCHLD) takes its time with it:
    to time a session over a while, :class:`SessionMeter`."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        f = _stat_fields(pid)
        if f is not None:
            total += sum(int(x) for x in f[11:15])
    return total / tick


def _own_cpu(pid: int | str) -> float | None:
    f = _stat_fields(pid)
    return None if f is None else (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


class SessionMeter:
    """CPU seconds (user + system) spent by the processes of `sessions`
    since :meth:`start`, each process read from /proc/PID/stat every
    `every` seconds by a thread of its own, so a process that exits
    meanwhile (a Ray worker ended, whose time its parent may never reap)
    counts what it had spent at its last reading: at most `every` seconds
    of each such process are missed. Processes born after the start count
    from zero.
    """

    def __init__(self, sessions: Iterable[int], every: float = 0.1) -> None:
        self.sessions = list(sessions)
        self.every = every
        self.own = 0.0
        self._first: dict[int, float] = {}
        self._last: dict[int, float] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gdsio-session-meter", daemon=True)

    def _sample(self, first: bool = False) -> None:
        got = {pid: cpu for pid in session_pids(self.sessions) if (cpu := _own_cpu(pid)) is not None}
        with self._lock:
            for pid, cpu in got.items():
                if pid not in self._first:
                    self._first[pid] = cpu if first else 0.0
                self._last[pid] = max(cpu, self._last.get(pid, 0.0))

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            t = time.thread_time()
            self._sample()
            self.own += time.thread_time() - t

    def start(self) -> "SessionMeter":
        self._sample(first=True)
        self._thread.start()
        return self

    def seconds(self) -> float:
        """CPU seconds since the start, read now (its reading counted in ``own``)."""
        t = time.thread_time()
        self._sample()
        self.own += time.thread_time() - t
        with self._lock:
            return sum(self._last[p] - self._first[p] for p in self._last)

    def stop(self) -> float:
        """Ends the thread; the CPU seconds since the start."""
        total = self.seconds()
        self._stop.set()
        self._thread.join()
        return total


def _address(hexaddr: str) -> str:
    """'0100007F:1F90' (or the IPv6 form) of /proc/net/* -> '127.0.0.1'."""
    host = bytes.fromhex(hexaddr.split(":")[0])
    if len(host) == 4:
        return str(ipaddress.IPv4Address(host[::-1]))
    words = b"".join(host[i: i + 4][::-1] for i in range(0, 16, 4))  # four little-endian 32-bit words
    return str(ipaddress.IPv6Address(words))


def _loopback(addr: str) -> bool:
    a = ipaddress.ip_address(addr)
    if isinstance(a, ipaddress.IPv6Address) and a.ipv4_mapped is not None:
        a = a.ipv4_mapped
    return a.is_loopback


def _plain(addr: str) -> str:
    """'::ffff:7f00:1' (an IPv4 address on an IPv6 socket) -> '127.0.0.1'; others as they are."""
    a = ipaddress.ip_address(addr)
    return str(a.ipv4_mapped) if isinstance(a, ipaddress.IPv6Address) and a.ipv4_mapped is not None else addr


def process_sockets(pids: Iterable[int]) -> list[dict[str, Any]]:
    """Every TCP and UDP socket of `pids`: pid, kind ("tcp LISTEN", "tcp 01", "udp ..."), local and remote address."""
    inodes: dict[str, int] = {}
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
                if link.startswith("socket:["):
                    inodes[link[8:-1]] = pid
        except OSError:
            continue  # gone meanwhile
    out = []
    for kind in ("tcp", "tcp6", "udp", "udp6"):
        try:
            with open(f"/proc/net/{kind}") as f:
                lines = f.readlines()[1:]
        except OSError:
            continue  # no IPv6 here
        for line in lines:
            cols = line.split()
            if cols[9] in inodes:
                state = "LISTEN" if kind.startswith("tcp") and cols[3] == "0A" else cols[3]
                out.append({"pid": inodes[cols[9]], "kind": f"{kind} {state}", "local": _address(cols[1]),
                            "remote": _address(cols[2])})
    return out


def _off_loopback(s: dict[str, Any]) -> bool:
    # A listening or unconnected socket's remote address is the wildcard; any other must be loopback too.
    return not _loopback(s["local"]) or (s["remote"] not in ("0.0.0.0", "::") and not _loopback(s["remote"]))


def check_loopback(pids: Iterable[int]) -> dict[str, Any]:
    """Every TCP and UDP socket of `pids` is on loopback; returns what was
    checked (processes, sockets, listening ones and their addresses).

    Raises:
        LoopbackError: a socket off loopback (listed).
    """
    pids = list(pids)
    socks = process_sockets(pids)
    outside = [s for s in socks if _off_loopback(s)]
    if outside:
        raise LoopbackError(f"sockets off loopback, the cluster is not used: {outside}")
    listening = sorted({_plain(s["local"]) for s in socks if "LISTEN" in s["kind"] or s["kind"].startswith("udp")})
    return {"processes": len(pids), "sockets": len(socks),
            "listening": sum("LISTEN" in s["kind"] for s in socks), "listening_addresses": listening}


def _free_ports(n: int) -> list[int]:
    """`n` distinct free ports of 127.0.0.1: each socket is held until all are bound (a port asked for alone is
    free again once its socket closes, and the next ask may be given it: a head's GCS and dashboard once were)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def ray_executable() -> str:
    """The ``ray`` command of this interpreter's environment (beside sys.executable), else the one on PATH."""
    here = os.path.join(os.path.dirname(sys.executable), "ray")
    found = here if os.access(here, os.X_OK) else shutil.which("ray")
    if found is None:
        raise LoopbackError("the 'ray' command was not found beside this Python or on PATH (pip install 'gdsio[ray]')")
    return found


class LoopbackCluster:
    """A Ray head and CPU nodes on 127.0.0.1, each started by ``ray start`` in
    a session of its own (optionally pinned to cores), timed and ended by
    session. Use as a context manager: leaving it ends every process of its
    sessions (SIGTERM, then SIGKILL after `grace` seconds) and removes its
    temporary directory.

    Args:
        head_cpus: the CPUs the head advertises (labelled ``gdsio-role=trainer``).
        head_cores: cores the head's processes are pinned to (None: not pinned).
        object_store_bytes: each node's object store.
        env: extra environment of every node (e.g. ``PYTHONPATH`` naming the
            gdsio the workers must import).
        timeout: seconds a ``ray start`` may take.
    """

    def __init__(self, *, head_cpus: int = 1, head_cores: Sequence[int] | None = None,
                 object_store_bytes: int = 256 << 20, env: dict[str, str] | None = None,
                 timeout: float = 120.0, grace: float = 10.0) -> None:
        self.tmp = tempfile.mkdtemp(prefix="gdsio-lb-", dir="/tmp")  # short: Ray's unix sockets live under it
        self.port = 0
        self.head_session: int | None = None
        self.node_sessions: list[int] = []
        self.head_cpus, self.head_cores = head_cpus, head_cores
        self.object_store_bytes = object_store_bytes
        self.timeout, self.grace = timeout, grace
        self.env = dict(os.environ, **RAY_LOOPBACK_ENV, RAY_TMPDIR=self.tmp, **(env or {}))
        self.ray = ray_executable()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _start(self, argv: list[str], cores: Sequence[int] | None) -> int:
        if cores is not None:
            argv = [sys.executable, "-c", _PIN, ",".join(str(c) for c in cores), *argv]
        log = open(os.path.join(self.tmp, f"ray-start-{len(self.node_sessions) + (self.head_session is not None)}.log"),
                   "w")
        with log:
            p = subprocess.Popen(argv, env=self.env, cwd=self.tmp, stdin=subprocess.DEVNULL, stdout=log,
                                 stderr=subprocess.STDOUT, start_new_session=True)
            try:
                rc = p.wait(self.timeout)
            except subprocess.TimeoutExpired:
                rc = None
        if rc != 0:
            self._end([p.pid])
            with open(log.name) as f:
                tail = f.read()[-2000:]
            raise LoopbackError(f"{' '.join(argv[:3])} ... {'timed out' if rc is None else f'exited {rc}'}: {tail}")
        return p.pid  # the session id of everything it started (Ray's processes do not call setsid)

    def start_head(self) -> str:
        """Starts the head (GCS, raylet, object store); returns its address."""
        self.port, dashboard, agent = _free_ports(3)
        self.head_session = self._start(
            [self.ray, "start", "--head", "--node-ip-address=127.0.0.1", f"--port={self.port}",
             f"--num-cpus={self.head_cpus}", f"--object-store-memory={self.object_store_bytes}",
             "--include-dashboard=false", "--dashboard-host=127.0.0.1", f"--dashboard-port={dashboard}",
             f"--dashboard-agent-listen-port={agent}", "--disable-usage-stats",
             "--labels=gdsio-role=trainer", f"--temp-dir={self.tmp}"], self.head_cores)
        return self.address

    def add_node(self, *, cpus: int = 1, cores: Sequence[int] | None = None,
                 labels: dict[str, str] | None = None) -> int:
        """Starts a CPU node (labelled ``gdsio-role=preprocess`` unless
        `labels` say otherwise) joining the head; returns its session id."""
        if self.head_session is None:
            raise RuntimeError("start_head() first")
        params = {"gcs_address": self.address, "node_ip_address": "127.0.0.1", "num_cpus": cpus, "num_gpus": 0,
                  "labels": labels or {"gdsio-role": "preprocess"}, "object_store_memory": self.object_store_bytes,
                  "include_log_monitor": False, "node_manager_port": 0, "min_worker_port": 0, "max_worker_port": 0,
                  "temp_dir": self.tmp}
        sid = self._start([sys.executable, "-c", _NODE, json.dumps(params)], cores)
        self.node_sessions.append(sid)
        return sid

    def head_pids(self) -> list[int]:
        return session_pids([self.head_session]) if self.head_session is not None else []

    def node_pids(self) -> list[int]:
        return session_pids(self.node_sessions)

    def check_loopback(self, drivers: Iterable[int] = ()) -> dict[str, Any]:
        """Every socket of the cluster's processes and of `drivers` is on
        loopback; returns what was checked (processes, listening addresses).

        Raises:
            LoopbackError: a socket off loopback (listed).
        """
        return check_loopback(self.head_pids() + self.node_pids() + list(drivers))

    @staticmethod
    def affinity(pids: Iterable[int]) -> list[str]:
        """The distinct ``Cpus_allowed_list`` of `pids` (/proc/PID/status)."""
        out = set()
        for pid in pids:
            try:
                with open(f"/proc/{pid}/status") as f:
                    for line in f:
                        if line.startswith("Cpus_allowed_list:"):
                            out.add(line.split()[1])
            except OSError:
                pass
        return sorted(out)

    def _end(self, sessions: list[int]) -> list[int]:
        """SIGTERM then SIGKILL to every process of `sessions`, by pid; the pids still there after."""
        for sig, wait in ((signal.SIGTERM, self.grace), (signal.SIGKILL, 5.0)):
            pids = session_pids(sessions)
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + wait
            while pids and time.monotonic() < deadline:
                time.sleep(0.1)
                pids = session_pids(sessions)
            if not pids:
                return []
        return session_pids(sessions)

    def close(self) -> list[int]:
        """Ends every process of the cluster's sessions; returns any left (none expected)."""
        sessions = ([self.head_session] if self.head_session is not None else []) + self.node_sessions
        left = self._end(sessions) if sessions else []
        shutil.rmtree(self.tmp, ignore_errors=True)
        self.head_session, self.node_sessions = None, []
        return left

    def __enter__(self) -> "LoopbackCluster":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def wait_for_nodes(ray: Any, count: int, labels: dict[str, str], timeout: float) -> int:
    """Waits (at most `timeout` seconds) until `count` live nodes of the
    connected cluster carry `labels`; `ray` is the imported module. Returns
    how many live nodes carry them then (more than `count` where more joined).

    Raises:
        TimeoutError: fewer are live by then (the count is named).
    """
    deadline = time.monotonic() + timeout
    while True:
        live = [n for n in ray.nodes() if n.get("Alive")
                and all((n.get("Labels") or {}).get(k) == v for k, v in labels.items())]
        if len(live) >= count:
            return len(live)
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(live)} of {count} nodes labelled {labels} live after {timeout:g} s")
        time.sleep(0.2)
