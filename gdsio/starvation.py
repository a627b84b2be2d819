"""Is training waiting for data? The replay test, beside the loader's meter.

Two measures, both honest about their clocks:

* ``Loader.stats()``: per batch, how long the consumer was blocked in
  ``next()`` and how long the batch took to produce; the data-wait share is
  the blocked time over the wall time of the loop. GPU utilisation figures
  only say a kernel was running; time blocked in ``next()`` is what the
  model actually lost.
* ``measure(step_fn, loader)``: runs the training step on the real loader,
  then on one batch replayed from memory (the "caching strategy": the step
  alone, with free data, is the upper bound), and compares.

>>> report = gdsio.starvation.measure(train_step, loader, steps=50)
>>> print(report)       # input-bound: the step alone runs at 2.1x ...
"""

from __future__ import annotations

import dataclasses
import inspect
import time
from typing import Any, Callable

import torch

from .data.meter import LoaderStats

__all__ = ["LoaderStats", "Report", "measure", "step_caller"]


def __dir__() -> list[str]:
    # dir() and tab completion show the API (and the dunders), not what was imported to build it (np, torch, Any).
    return sorted({*__all__, *(n for n in globals() if n.startswith("__") and n.endswith("__"))})

# ---- the replay test ----------------------------------------------------------------


@dataclasses.dataclass
class Report:
    """The result of ``measure``. Throughputs in samples per second."""

    steps: int
    batch_size: int
    real_samples_per_s: float
    upper_samples_per_s: float
    data_wait_share: float
    verdict: str
    clock: str  # "cuda-events", "host (no GPU: host clocks only)" or "given clock"
    loader_stats: LoaderStats | None = None

    @property
    def input_bound(self) -> bool:
        return self.verdict.startswith("input-bound")

    def __str__(self) -> str:
        return (
            f"real: {self.real_samples_per_s:.1f} samples/s, replayed batch (upper bound): "
            f"{self.upper_samples_per_s:.1f} samples/s, data wait {100 * self.data_wait_share:.1f}% "
            f"[{self.steps} steps, clock: {self.clock}]\n{self.verdict}"
        )


def _timer(device: Any) -> tuple[Callable[[], Any], Callable[[Any, Any], float], str]:
    """(mark, seconds between two marks, clock name). On a GPU the marks are
    CUDA events on the current stream, so the time is the device's own."""
    if device is not None and torch.device(device).type == "cuda":
        dev = torch.device(device)

        def mark() -> Any:
            # On the loader's device (the current device may be another GPU).
            ev = torch.cuda.Event(enable_timing=True)
            ev.record(torch.cuda.current_stream(dev))
            return ev

        def between(a: Any, b: Any) -> float:
            b.synchronize()
            return a.elapsed_time(b) / 1e3

        return mark, between, "cuda-events"
    return time.perf_counter, lambda a, b: b - a, "host (no GPU: host clocks only)"


def _first(batch: Any) -> Any:
    return batch[0] if isinstance(batch, (tuple, list)) else batch


def _clone(batch: Any) -> Any:
    if isinstance(batch, (tuple, list)):
        return type(batch)(_clone(b) for b in batch)
    return batch.clone() if hasattr(batch, "clone") else batch


_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def step_caller(step_fn: Callable[..., Any]) -> Callable[[Any], Any]:
    """How ``measure`` calls `step_fn`, decided once from its signature (never
    by catching a TypeError, which could come from inside the step): a step
    that needs two or more positional arguments gets the batch unpacked,
    ``step_fn(images, labels)``, as a DataLoader loop writes it; any other
    (one argument, ``*args``, or no inspectable signature) gets
    ``step_fn(batch)``. Raises TypeError for a step that cannot take a batch
    either way, and, at the call, for a batch whose parts do not fit it."""
    if not callable(step_fn):
        raise TypeError(f"step_fn must be callable, got {type(step_fn).__name__}")
    try:
        sig = inspect.signature(step_fn)
    except (TypeError, ValueError):  # some builtins and C callables have no signature
        return step_fn
    params = list(sig.parameters.values())
    positional = [p for p in params if p.kind in _POSITIONAL]
    required = [p for p in positional if p.default is p.empty]
    varargs = any(p.kind == p.VAR_POSITIONAL for p in params)
    kw_required = [p.name for p in params if p.kind == p.KEYWORD_ONLY and p.default is p.empty]
    forms = "step_fn(batch) or step_fn(images, labels)"
    if kw_required:
        raise TypeError(f"step_fn{sig} has required keyword-only argument(s) {kw_required}; measure calls {forms}")
    if not positional and not varargs:
        raise TypeError(f"step_fn{sig} takes no positional argument; measure calls {forms}")
    if len(required) < 2:
        return step_fn
    low, high = len(required), (None if varargs else len(positional))

    def unpacked(batch: Any) -> Any:
        n = len(batch) if isinstance(batch, (tuple, list)) else None
        if n is None or n < low or (high is not None and n > high):
            what = f"a {type(batch).__name__}" if n is None else f"batches of {n} parts"
            raise TypeError(f"step_fn{sig} takes a batch's {low} parts, as step_fn(images, labels), but the loader "
                            f"yields {what}; give it one argument to get the whole batch")
        return step_fn(*batch)

    return unpacked


def measure(step_fn: Callable[..., Any], loader: Any, *, steps: int = 50, warmup: int = 5,
            threshold: float = 0.9, clock: Callable[[], float] | None = None) -> Report:
    """Is training waiting for data? Runs the training step on `loader`'s
    batches, then on one batch replayed from memory (the step alone, with
    free data: the upper bound), and compares.

    Args:
        step_fn: the training step. Taking two or more positional arguments it
            is called ``step_fn(images, labels)`` (the batch unpacked, as a
            DataLoader loop writes it); taking one, ``step_fn(batch)``. Decided
            once from its signature (see ``step_caller``).
        loader: an iterable of batches, a ``gdsio.Loader`` or a torch
            DataLoader; passes repeat as needed (a gdsio.Loader's epoch advances).
            Its ``device`` attribute, when it has one on a GPU, selects CUDA-event timing.
        steps: timed steps on each side (>= 1).
        warmup: untimed steps first (>= 0).
        threshold: input-bound when the real loop reaches less than this share
            of the replayed throughput.
        clock: a function returning seconds that times everything instead of
            the default clocks (``time.perf_counter``; CUDA events for a loader
            on a GPU): a controlled clock makes the verdict a function of its
            inputs, as in tests, or a clock of the caller's own choosing.

    Returns:
        Report: real and replayed samples/s, the data-wait share, the verdict
        (``input-bound: ...`` or ``compute-bound: ...``), the clock used and
        the loader's stats.

    Raises:
        ValueError: `steps` < 1 or `warmup` < 0, or the loader yields no batch.
        TypeError: `step_fn` cannot take a batch in either form; `clock` is not callable.

    Example:
        >>> def step(images, labels):
        ...     loss = F.cross_entropy(model(images), labels); loss.backward(); opt.step(); opt.zero_grad()
        >>> print(gdsio.starvation.measure(step, loader, steps=100))
    """
    if steps < 1 or warmup < 0:
        raise ValueError(f"steps must be >= 1 and warmup >= 0; got steps={steps}, warmup={warmup}")
    step_fn = step_caller(step_fn)
    if clock is None:
        mark, between, clock_name = _timer(getattr(loader, "device", None))
        host = time.perf_counter
    else:
        if not callable(clock):
            raise TypeError(f"clock must be a function returning seconds, got {type(clock).__name__}")
        mark, between, clock_name, host = clock, (lambda a, b: b - a), "given clock", clock

    def batches() -> Any:
        while True:
            n = 0
            one_pass = iter(loader)
            try:
                for b in one_pass:
                    n += 1
                    yield b
            finally:
                # Stops the loader's threads now, not at garbage collection.
                getattr(one_pass, "close", lambda: None)()
            if n == 0:
                raise ValueError("the loader yields no batch")

    it = batches()
    last = None
    for _ in range(warmup):
        last = next(it)
        step_fn(last)
    wait = 0.0
    samples = 0
    biggest = last
    t_start = mark()
    h_start = host()
    for _ in range(steps):
        t0 = host()
        last = next(it)
        wait += host() - t0
        step_fn(last)
        n = int(_first(last).shape[0])
        samples += n  # an epoch's short last batch counts as what it is
        if biggest is None or n > int(_first(biggest).shape[0]):
            biggest = last
    real = between(t_start, mark())
    h_real = host() - h_start
    it.close()
    batch_size = int(_first(biggest).shape[0])
    cached = _clone(biggest)  # a full batch replayed, never a short last one
    del last, biggest
    step_fn(cached)  # one untimed replay: the step's own warm-up (allocator, autotuning)
    t_start = mark()
    for _ in range(steps):
        step_fn(cached)
    upper = between(t_start, mark())
    real_tp = samples / real if real > 0 else float("inf")
    upper_tp = steps * batch_size / upper if upper > 0 else float("inf")
    share = wait / h_real if h_real > 0 else 0.0
    ratio = real_tp / upper_tp if upper_tp > 0 else 1.0
    if ratio < threshold:
        verdict = (f"input-bound: the loader delivers {real_tp:.0f} samples/s, the step alone runs at "
                   f"{upper_tp:.0f} ({upper_tp / real_tp:.2f}x); the step waited for data "
                   f"{100 * share:.0f}% of the time")
    else:
        verdict = (f"compute-bound: the real loop runs at {100 * ratio:.0f}% of the replayed batch's speed; "
                   f"data wait {100 * share:.1f}%")
    stats = loader.stats() if hasattr(loader, "stats") else None
    return Report(steps, batch_size, real_tp, upper_tp, share, verdict, clock_name, stats)
