"""The starvation meter: loader.stats() and gdsio.starvation.measure, on the
CPU. Every figure a test asserts comes from a controlled clock (the steps and
the loader declare their costs on it), so no verdict depends on the machine's
speed or load; real timing is the benchmarks' business."""

from __future__ import annotations

import threading
import types

import numpy as np
import pytest
import torch

import gdsio.data.loader
from gdsio import starvation
from gdsio.data import Loader
from gdsio.data.meter import LoaderStats, Meter


@pytest.fixture
def folder(tmp_path):
    for i in range(24):
        np.save(tmp_path / f"{i:02d}.npy", np.full((3, 8, 8), i, np.float32))
    return tmp_path


class FakeClock:
    """A clock that moves only when told: the verdicts become functions of the
    steps' and the loader's declared costs, whatever the machine's load."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class Clocked:
    """A loader whose every batch costs `per_batch` seconds of the fake clock,
    spent inside next() (where a real loader's wait is); stats and device are
    the wrapped loader's."""

    def __init__(self, loader, clock: FakeClock, per_batch: float) -> None:
        self.loader, self.clock, self.per_batch = loader, clock, per_batch
        self.device = loader.device

    def __iter__(self):
        one_pass = iter(self.loader)
        try:
            for batch in one_pass:
                self.clock.advance(self.per_batch)
                yield batch
        finally:
            one_pass.close()

    def stats(self):
        return self.loader.stats()


def test_stats_time_the_wait_in_next_and_the_loop(folder, monkeypatch):
    """The loader's meter takes the consumer's wait around next() and its loop
    time between batches from its clock: with a clock that ticks one second a
    reading, n batches wait n seconds over 2n - 1 of loop time."""
    ticks = iter(range(1000))
    fake = types.SimpleNamespace(perf_counter=lambda: float(next(ticks)))
    monkeypatch.setattr(gdsio.data.loader, "time", fake)
    loader = Loader(folder, 4, device="cpu", prefetch=2)
    n = sum(1 for _ in loader)
    s = loader.stats()
    assert n == 6 and (s.batches, s.samples) == (6, 24)
    assert (s.data_wait_s, s.seconds) == (6.0, 11.0) and s.data_wait_share == 6 / 11
    assert s.produce_ms > 0


def test_measure_input_bound(folder):
    clock = FakeClock()
    loader = Loader(folder, 4, device="cpu", prefetch=1)
    before = threading.active_count()

    def step(batch):
        clock.advance(0.01)
        return batch[0].sum()

    r = starvation.measure(step, Clocked(loader, clock, 0.05), steps=8, warmup=1, clock=clock)
    assert r.input_bound and r.verdict.startswith("input-bound")
    assert r.real_samples_per_s == pytest.approx(4 / 0.06) and r.upper_samples_per_s == pytest.approx(4 / 0.01)
    assert r.data_wait_share == pytest.approx(0.05 / 0.06)
    assert r.batch_size == 4 and r.steps == 8 and r.clock == "given clock"
    assert isinstance(r.loader_stats, LoaderStats) and r.loader_stats.batches >= 9
    assert "input-bound" in str(r) and "6.00x" in r.verdict
    assert threading.active_count() == before  # the loader's threads are stopped, not left to GC


def test_measure_compute_bound(folder):
    clock = FakeClock()
    loader = Loader(folder, 4, device="cpu", prefetch=4)

    def step(batch):
        clock.advance(0.15)
        return batch[0].sum()

    r = starvation.measure(step, Clocked(loader, clock, 0.0), steps=10, warmup=3, clock=clock)  # 13 steps > 6 batches
    assert not r.input_bound and r.verdict.startswith("compute-bound"), str(r)
    assert r.data_wait_share == 0.0 and r.real_samples_per_s == pytest.approx(r.upper_samples_per_s)
    assert loader.epoch >= 1  # passes repeat


def test_measure_on_host_clocks_by_default(folder):
    """Without a clock, a CPU loader is timed on the host's; the figures are
    whatever the machine made of them (never asserted)."""
    r = starvation.measure(lambda b: b[0].sum(), Loader(folder, 4, device="cpu"), steps=2, warmup=1)
    assert r.clock.startswith("host") and "host clocks only" in str(r)
    assert r.real_samples_per_s > 0 and r.upper_samples_per_s > 0 and 0.0 <= r.data_wait_share <= 1.0


def test_measure_counts_short_batches_and_replays_a_full_one(folder):
    """24 samples in batches of 5: every epoch ends with a batch of 4. The real
    rate counts the samples that came; the replay takes a full batch."""
    clock = FakeClock()
    loader = Loader(folder, 5, device="cpu", prefetch=4)
    seen = []

    def step(batch):
        seen.append(int(batch[0].shape[0]))
        clock.advance(0.01)

    r = starvation.measure(step, loader, steps=5, warmup=0, clock=clock)  # the 5th timed batch is the short one
    assert seen[:5] == [5, 5, 5, 5, 4] and set(seen[5:]) == {5}
    assert r.batch_size == 5
    # 24 samples in 5 x 10 ms, against 25 replayed: the real rate is below the replayed one by the short batch.
    assert r.real_samples_per_s == pytest.approx(24 / 0.05) and r.upper_samples_per_s == pytest.approx(25 / 0.05)


def test_measure_arguments(folder):
    loader = Loader(folder, 4, device="cpu")
    with pytest.raises(ValueError, match="steps must be >= 1"):
        starvation.measure(lambda b: None, loader, steps=0)
    with pytest.raises(TypeError, match="clock must be a function returning seconds"):
        starvation.measure(lambda b: None, loader, steps=1, clock=1.5)


def test_meter_sums_and_bounds():
    m = Meter()
    for e in range(1200):
        m.begin_pass(e, 0)
    m.consumed(0.5, 2.0, 10)
    m.consumed(0.5, 2.0, 6)
    m.read("posix", 100)
    m.read("pinned", 50)
    m.read("posix", 1)
    m.decoded("pillow", 3)
    m.produced(0.2, cache_hits=2, skipped=1, gpu_events=None)
    s = m.snapshot()
    assert len(s.passes) == 1000 and s.passes[-1]["epoch"] == 1199  # bounded: memory stays flat
    assert (s.batches, s.samples, s.seconds, s.data_wait_s) == (2, 16, 4.0, 1.0)
    assert s.data_wait_share == 0.25 and s.samples_per_s == 4.0 and s.bytes_per_s == 151 / 4
    assert s.io_backends == {"posix": 2, "pinned": 1} and s.decode_backends == {"pillow": 3}
    assert s.produce_ms == pytest.approx(200.0) and s.cache_hits == 2 and s.skipped == 1
    assert s.passes[-1]["bytes_read"] == 151 and s.passes[-1]["samples"] == 16
    m.reset()
    assert m.snapshot().batches == 0


def test_measure_takes_both_step_forms(folder):
    """step_fn(batch) and step_fn(images, labels), the DataLoader habit."""
    seen = {}

    def whole(batch):
        seen.setdefault("whole", type(batch).__name__)
        images, labels = batch
        return images.sum()

    def parts(images, labels):
        seen.setdefault("parts", (tuple(images.shape), labels.dtype))
        return images.sum()

    for fn in (whole, parts):
        r = starvation.measure(fn, Loader(folder, 4, device="cpu"), steps=2, warmup=1)
        assert r.steps == 2 and r.batch_size == 4
    assert seen == {"whole": "tuple", "parts": ((4, 3, 8, 8), torch.int64)}


def test_step_form_is_decided_from_the_signature():
    batch = (torch.zeros(2, 1), torch.zeros(2, dtype=torch.int64))
    calls = []

    class Model:
        def step(self, images, labels):
            calls.append("method")

    forms = {
        "one": (lambda b: calls.append("one")),
        "defaulted second": (lambda images, labels=None: calls.append(("defaulted", labels))),
        "varargs": (lambda *a: calls.append(("varargs", len(a)))),
        "method": Model().step,
        "three with varargs": (lambda a, b, *rest: calls.append(("rest", len(rest)))),
    }
    for fn in forms.values():
        starvation.step_caller(fn)(batch)
    assert calls == ["one", ("defaulted", None), ("varargs", 1), "method", ("rest", 0)]


def test_a_typeerror_inside_the_step_is_the_steps_own():
    """The form is not guessed by catching TypeError: one raised inside the step
    reaches the caller unchanged, after one call."""
    calls = []

    def step(images, labels):
        calls.append(1)
        raise TypeError("inside the step")

    with pytest.raises(TypeError, match="^inside the step$"):
        starvation.step_caller(step)((torch.zeros(1), torch.zeros(1)))
    assert calls == [1]


def test_steps_that_fit_no_form_are_refused_clearly(folder):
    with pytest.raises(TypeError, match=r"step_fn\(\) takes no positional argument; measure calls step_fn\(batch\) "
                                        r"or step_fn\(images, labels\)"):
        starvation.measure(lambda: None, Loader(folder, 4, device="cpu"), steps=1)
    with pytest.raises(TypeError, match="required keyword-only argument"):
        starvation.step_caller(lambda batch, *, scaler: None)
    with pytest.raises(TypeError, match="step_fn must be callable"):
        starvation.step_caller("train")
    three = starvation.step_caller(lambda images, labels, weights: None)
    with pytest.raises(TypeError, match=r"takes a batch's 3 parts, .* the loader yields batches of 2 parts"):
        three((torch.zeros(1), torch.zeros(1)))
    with pytest.raises(TypeError, match="the loader yields a Tensor"):
        starvation.step_caller(lambda images, labels: None)(torch.zeros(1))
