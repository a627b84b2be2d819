"""Stream and event ordering on the CPU (issue 28, item 1).

tests/kernels/ordering_tests.cpp runs gdsio's pinned staging pipeline and the
remote readers' staging ring into device memory (csrc/io, compiled as they
are under AddressSanitizer and UndefinedBehaviorSanitizer) on the emulated
runtime, whose streams are queues run by worker threads. In the lazy mode a
queued copy runs only once something waits for it, so a missing wait shows
deterministically: the host refills a pinned slot before the copy out of it
ran, the copy carries the new bytes, and the emulator reports the rewrite.
The scenarios also run eagerly (each operation as soon as it is queued, after
a delay), as a device would. Planted mutations (a wait removed from the
source text, built beside the rest) must make their scenario fail.

The hand-over of a batch to the consumer's stream lives in Python
(gdsio/data/loader.py); tests/kernels/stream_model.py models the same lazy
streams for it, and a loader.py without ``cur.wait_event(ready)`` must fail.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from kernels import emulate as E

_WHY = E.sanitizer_unavailable("asan")
needs_asan = pytest.mark.skipif(_WHY is not None, reason=f"the ordering checks cannot be built here: {_WHY}")

SCENARIOS = [
    "emulator-defers-copies-until-waited",
    "emulator-orders-streams-by-events",
    "emulator-legacy-stream-is-implicitly-ordered",
    "pinned-pipeline",
    "pinned-pipeline-direct",
    "pinned-pipeline-legacy-stream",
    "remote-ring-into-gpu-memory",
    "remote-ring-into-gpu-memory-legacy-stream",
    "remote-ring-failed-worker-waits-before-release",
]
BOUNDED = "emulator-bounds-every-wait"  # aborts by design: a wait that cannot finish
# What gdsio's code must also survive when every operation runs as soon as it is queued.
EAGER = [n for n in SCENARIOS if not n.startswith("emulator-")]


@pytest.fixture(scope="module")
def work():
    # On the checkout's file system: pinned-pipeline-direct needs O_DIRECT (a tmpfs refuses it).
    w = E.ROOT / "build" / "kernels-emu" / "ordering-work"
    w.mkdir(parents=True, exist_ok=True)
    return w


@pytest.fixture(scope="module")
def lazy(work):
    return E.run_ordering(work)[1]


@pytest.fixture(scope="module")
def eager(work):
    return E.run_ordering(work, EAGER, eager_delay_us=300)[1]


def _passed(r: E.Run, name: str, mode: str) -> None:
    assert r.returncode == 0, r.output[-6000:]
    m = re.search(rf"^ordering {re.escape(name)} \({mode} streams\): (\d+) checks, 0 failed$", r.output, re.MULTILINE)
    assert m and int(m[1]) >= 3, r.output[-3000:]


@needs_asan
def test_every_scenario_is_run(lazy):
    assert sorted(lazy) == sorted(SCENARIOS + [BOUNDED])


@needs_asan
@pytest.mark.parametrize("name", SCENARIOS)
def test_scenario(lazy, name):
    _passed(lazy[name], name, "lazy")


@needs_asan
@pytest.mark.parametrize("name", EAGER)
def test_scenario_with_eager_streams(eager, name):
    _passed(eager[name], name, "eager")


@needs_asan
def test_a_wait_that_cannot_finish_fails_loudly(lazy):
    r = lazy[BOUNDED]
    assert r.returncode != 0 and "did not finish within 0.5 s" in r.output, r.output[-3000:]
    assert "running: the launch of spin" in r.output, r.output[-3000:]


@needs_asan
@pytest.mark.parametrize("m", E.ORDERING_MUTATIONS, ids=lambda m: m.name)
def test_planted_mutation_is_caught(m, work):
    caught, why, _ = E.check_ordering_mutation(m, work)
    assert caught, f"{m.name}: not caught by {m.scenario}: {why}"


# ---- the hand-over to the consumer's stream (Python) ----------------------------------------------------

_MODEL = E.HERE / "stream_model.py"
_WAIT = "cur.wait_event(ready)"


def _handover(mutated: bool) -> subprocess.CompletedProcess[str]:
    code = (
        "import pathlib, sys\n"
        f"sys.path.insert(0, {str(E.HERE)!r})\n"
        "import gdsio.data.loader as L\n"
        "src = pathlib.Path(L.__file__).read_text()\n"
        f"assert src.count({_WAIT!r}) == 1, 'the hand-over moved: update the mutation'\n"
        f"if {mutated}:\n"
        f"    exec(compile(src.replace({_WAIT!r}, 'pass  # removed'), L.__file__, 'exec'), L.__dict__)\n"
        "import stream_model\n"
        "stream_model.handover_check()\n"
    )
    # The gdsio this test imports (the installed package under the README's `python -P`), not the source
    # tree's (no compiled extension there): this process's path, -P, and a neutral working directory.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    return subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True, timeout=120,
                          cwd="/", env=env)


def test_consumer_stream_waits_for_the_batch():
    r = _handover(mutated=False)
    assert r.returncode == 0, r.stderr[-3000:]


def test_planted_mutation_consumer_stream_not_waiting_is_caught():
    r = _handover(mutated=True)
    assert r.returncode != 0 and "did not wait for the batch's ready event" in r.stderr, r.stderr[-3000:]
