"""gdsio.data.ray.Loader(local_share="auto")'s controller (gdsio.data.ray.steer)
fed synthetic costs: the share it chooses is the planner's balance point
(gdsio.data.offload_plan.best_split, the one home of that model), reached
after MEASURED counted batches of each side, refined as costs move, clamped to
[0, 1], blind to each side's STARTUP first batches, and the waits kept as a guard. No
Ray, no clock: every figure is given."""

from __future__ import annotations

import pytest

from gdsio.data.offload_plan import best_split, offload_plan
from gdsio.data.ray.steer import (AUTO_START, AUTO_STEP, CLIP, GUARD_MAX, GUARD_STEP, MEASURED, STARTUP, AutoShare,
                                  Gauges, Window)

MAKE, RECEIVE, BUDGET, NODE_S = 0.050, 0.010, 1.0, 0.060  # CPU s a batch made / received here; cores; s a batch there


def balance(make=MAKE, receive=RECEIVE, budget=BUDGET, remote=1 / NODE_S):
    total, here = best_split(budget, make, receive, remote)
    return here / total


def window(side, first=False, make=MAKE, receive=RECEIVE, budget=BUDGET, node="a", seconds=NODE_S, wait=0.0):
    """One batch handed over, costs consistent with the model's inputs: a local batch made here (its CPU over
    the producer's busy time is `budget`), a remote one taken in here and made on `node` in `seconds`."""
    made, received = (1, 0) if side == "local" else (0, 1)
    cpu = made * make + received * receive
    return Window(side, wait_s=wait, wall_s=0.1, first=first, timed=True, cpu_s=cpu, receive_cpu_s=received * receive,
                  made=made, received=received, busy_s=cpu / budget, node=node if side == "remote" else None,
                  seconds=seconds if side == "remote" else 0.0)


def startup(auto, side, **costs):
    """A side's STARTUP start-up batches, the first marked first, all with absurd costs: none may count."""
    for k in range(STARTUP):
        auto.observe(window(side, first=k == 0, **dict(costs, make=50.0, seconds=99.0, receive=9.0)))


def started(auto, **costs):
    """Each side's start-up batches (absurd costs), then the sides in turn until the model has its figures."""
    for k in range(STARTUP):
        auto.observe(window("local", first=k == 0, **dict(costs, make=50.0)))
        auto.observe(window("remote", first=k == 0, **dict(costs, seconds=99.0)))
    shares = []
    for _ in range(MEASURED):
        shares.append(auto.observe(window("local", **costs)))
        shares.append(auto.observe(window("remote", **costs)))
    return shares


def test_the_share_is_the_planners_balance_point_after_measured_batches_of_each_side():
    auto = AutoShare(actors=1, cores=4)
    shares = started(auto)
    want = balance()
    assert 0.2 < want < 0.8  # a point inside, not a bound
    assert shares[:-1] == [AUTO_START] * (2 * MEASURED - 1)  # not before both sides have MEASURED counted batches
    assert shares[-1] == pytest.approx(want) and auto.model == pytest.approx(want)
    # 2 * (STARTUP + MEASURED) batches: 17% into a pass of 48 (bench/bench_ray.py --pinned --images 3072); the
    # share is AUTO_START until then (the start-up's costs sent the first point to 0.06-0.16 when it came sooner).
    assert 2 * (STARTUP + MEASURED) <= 8
    for _ in range(20):  # more of the same: it stays there
        assert auto.observe(window("local")) == pytest.approx(want)
        assert auto.observe(window("remote")) == pytest.approx(want)


def test_the_balance_point_is_where_both_sides_run_out_together():
    s = balance()
    local_rate = BUDGET / (s * MAKE + (1 - s) * RECEIVE)  # batches a second this node's cores allow at share s
    remote_rate = (1 / NODE_S) / (1 - s)  # batches a second the CPU node's (1 - s) allows
    assert local_rate == pytest.approx(remote_rate)


def test_the_planner_and_the_controller_share_one_formula():
    # offload_plan's local_share is best_split's ratio over its own inputs (ms, per second budgets).
    p = offload_plan(ms_per_image=0.8, steps_per_s=1000, batch_size=64, local_cores=1, node_cores=1,
                     gpu_node_price=1, cpu_node_price=1, receive_ms_per_image=0.25, remote_ms_per_image=0.9,
                     cpu_nodes=1)
    total, here = best_split(1000.0, 0.8, 0.25, 1000.0 / 0.9)
    assert p.local_share == pytest.approx(here / total)
    auto = AutoShare(actors=1, cores=1)
    started(auto, make=0.8 * 64e-3, receive=0.25 * 64e-3, seconds=0.9 * 64e-3, budget=1.0)
    assert auto.share == pytest.approx(p.local_share)


def test_first_batches_of_each_side_are_ignored():
    auto = AutoShare(actors=1, cores=4)
    # Firsts with absurd costs and long waits: neither a cost nor a wait.
    assert auto.observe(window("remote", first=True, seconds=99.0, receive=9.0, wait=9.0)) == AUTO_START
    assert auto.observe(window("local", first=True, make=99.0, wait=9.0)) == AUTO_START
    for _ in range(STARTUP - 1):  # the rest of the start-up: costs, not counted
        auto.observe(window("remote", seconds=99.0, receive=9.0))
        auto.observe(window("local", make=99.0))
    assert auto.measured == {"local": 0, "remote": 0}
    for _ in range(MEASURED):
        auto.observe(window("local"))
        auto.observe(window("remote"))
    assert auto.share == pytest.approx(balance())
    # A new pass: its producer's first batch is a start-up again (the pool's is not: it goes on).
    auto.begin_pass()
    auto.observe(window("local", first=True, make=99.0, wait=9.0))
    assert auto.share == pytest.approx(balance())


def test_windows_before_both_sides_started_do_not_count():
    auto = AutoShare(actors=1, cores=4)
    auto.observe(window("local", first=True))
    for _ in range(5):  # the pool is starting: local batches only, their CPU mixed with the pool's start
        auto.observe(window("local", make=1.0))
    assert auto.measured == {"local": 0, "remote": 0}
    startup(auto, "remote")
    for _ in range(MEASURED):
        auto.observe(window("local"))
        auto.observe(window("remote"))
    assert auto.share == pytest.approx(balance())


def test_a_batch_made_here_costs_the_cpu_of_the_windows_before_it_too():
    # At a share of 0.5 the sides take turns: the producer works through the remote batch's window too and
    # finishes its batch in the next one; the feed takes in batches in windows where none is handed over.
    auto = AutoShare(actors=1, cores=1)
    startup(auto, "local")
    startup(auto, "remote")
    half = MAKE / 2
    for _ in range(10):
        auto.observe(Window("remote", wall_s=0.03, timed=True, cpu_s=half + RECEIVE / 2, receive_cpu_s=RECEIVE / 2,
                            made=0, received=1, busy_s=0.03, node="a", seconds=NODE_S))
        auto.observe(Window("local", wall_s=0.03, timed=True, cpu_s=half + RECEIVE / 2, receive_cpu_s=RECEIVE / 2,
                            made=1, received=0, busy_s=0.03))
    # (Within 5%: the moving sums weigh the last window, which finished the batch, a little more.) Counting only
    # the windows that finished one gave half of it.
    assert auto._make.value() == pytest.approx(MAKE, rel=0.05) and auto._receive.value() == pytest.approx(RECEIVE, rel=0.05)


def test_a_burst_of_cpu_moves_the_costs_by_at_most_clip_times_a_batch():
    auto = AutoShare(actors=1, cores=4)
    started(auto)
    point = auto.share
    # A window with ten batches' CPU and none finished, then one with a batch and 20 batches' receiving.
    auto.observe(window("local", make=10 * MAKE, wait=0.0))
    auto.observe(Window("remote", wall_s=0.1, timed=True, cpu_s=20 * RECEIVE, receive_cpu_s=20 * RECEIVE, made=0,
                        received=1, busy_s=0.1, node="a", seconds=NODE_S))
    # Each counted CLIP (2) batches' worth: about (2 + 2) / 3 of the figure after MEASURED (2) batches a side;
    # unclipped, (2 + 10) / 3 and (2 + 20) / 3.
    assert CLIP == 2.0 and MEASURED == 2
    assert auto._make.value() < 1.5 * MAKE and auto._receive.value() < 1.5 * RECEIVE
    assert abs(auto.share - point) < 0.1


def test_a_stall_before_the_models_point_is_not_counted():
    auto = AutoShare(actors=1, cores=4)
    startup(auto, "local")
    startup(auto, "remote")
    # The pool's next batch stalls (the consumer waits 90% of the window) with a burst of receiving CPU.
    auto.observe(window("remote", receive=20 * RECEIVE, wait=0.09))
    assert auto.measured["remote"] == 1 and auto._receive.value() is None
    for _ in range(MEASURED):
        auto.observe(window("local"))
        auto.observe(window("remote"))
    assert auto.share == pytest.approx(balance())  # the stall's burst left out (its wait's step undone by the model)


def test_it_follows_costs_that_move_as_a_moving_average():
    auto = AutoShare(actors=1, cores=4)
    started(auto)
    before = auto.share
    slow = dict(seconds=4 * NODE_S)  # the CPU node slows down 4x: more is made here
    got = [auto.observe(window(side, **slow)) for _ in range(60) for side in ("local", "remote")]
    want = balance(remote=1 / (4 * NODE_S))
    assert want > before
    assert before < got[1] < want  # a step toward it, not a jump
    assert all(a <= b + 1e-12 for a, b in zip(got, got[1:]))  # monotone on the way
    assert got[-1] == pytest.approx(want, abs=0.01)


def test_per_node_rates_make_the_pool_rate():
    auto = AutoShare(actors=2, cores=4)
    startup(auto, "local")
    startup(auto, "remote")
    for _ in range(MEASURED):  # two nodes, one actor each, one twice as slow as the other
        auto.observe(window("local"))
        auto.observe(window("remote", node="a", seconds=NODE_S))
        auto.observe(window("remote", node="b", seconds=2 * NODE_S))
    assert auto.remote_rate() == pytest.approx(1 / NODE_S + 1 / (2 * NODE_S))
    assert auto.share == pytest.approx(balance(remote=1 / NODE_S + 1 / (2 * NODE_S)))


def test_the_share_is_clamped_to_zero_and_one():
    # Receiving costs more than making: the model makes everything here (1.0), and a wait for a remote batch
    # does not take it past 1.
    auto = AutoShare(actors=1, cores=4)
    started(auto, receive=1.5 * MAKE)
    assert auto.model == 1.0 and auto.share == 1.0
    assert auto.observe(window("remote", receive=1.5 * MAKE, wait=0.1)) == 1.0
    # Before the model: the wait-driven steps stop at the bounds.
    low = AutoShare(actors=1, cores=4, share=0.02)
    low.observe(window("local", first=True))
    assert low.observe(window("local", wait=0.1)) == 0.0  # waited for a local batch: less here, not below 0
    high = AutoShare(actors=1, cores=4, share=0.98)
    high.observe(window("remote", first=True))
    assert high.observe(window("remote", wait=0.1)) == 1.0
    # A very fast CPU node and free receiving: little is made here, never a negative share.
    fast = AutoShare(actors=8, cores=1)
    started(fast, receive=0.0, seconds=NODE_S / 100)
    assert 0.0 <= fast.share < 0.05


def test_waits_are_a_guard_around_the_models_point():
    auto = AutoShare(actors=1, cores=4)
    started(auto)
    point = auto.share
    # The consumer keeps waiting for remote batches: the share moves toward here, at most GUARD_MAX from the point.
    got = [auto.observe(window("remote", wait=0.1)) for _ in range(100)]
    assert got[0] == pytest.approx(point + GUARD_STEP)
    assert max(got) <= point + GUARD_MAX + 1e-12 and got[-1] > point + GUARD_STEP
    # No more waits: back to the model's point.
    for _ in range(200):
        auto.observe(window("local"))
    assert auto.share == pytest.approx(point, abs=1e-6)


def test_before_the_model_the_waits_step_the_share():
    auto = AutoShare(actors=1, cores=4)
    auto.observe(window("local", first=True))
    auto.observe(window("remote", first=True))
    assert auto.observe(window("remote", wait=0.1)) == pytest.approx(AUTO_START + AUTO_STEP)  # waited for there
    assert auto.observe(window("local", wait=0.1)) == pytest.approx(AUTO_START)  # waited for here
    assert auto.observe(window("local", wait=0.001)) == pytest.approx(AUTO_START)  # a wait too short to count


def test_no_remote_batch_leaves_the_share_to_the_guard():
    # No CPU node ever delivers (none placed yet, or all busy): no remote rate, no model; nothing breaks.
    auto = AutoShare(actors=1, cores=4)
    auto.observe(window("local", first=True))
    for _ in range(10):
        assert auto.observe(window("local")) == AUTO_START
    assert auto.model is None and auto.remote_rate() is None


def test_losing_every_node_drops_their_figures_until_a_new_pool_is_measured():
    auto = AutoShare(actors=1, cores=4)
    started(auto)
    kept = auto.share
    auto.lost_nodes()  # the pass makes the rest here; the share stays where it was for a later pool
    assert auto.model is None and auto.remote_rate() is None and auto.share == kept
    for _ in range(5):
        assert auto.observe(window("local")) == kept
    # A new pool on a slower node: its first batches are a start-up, then MEASURED batches set the new point.
    startup(auto, "remote")
    slow = dict(seconds=3 * NODE_S)
    for _ in range(MEASURED):
        auto.observe(window("local", **slow))
        auto.observe(window("remote", **slow))
    assert auto.share == pytest.approx(balance(remote=1 / (3 * NODE_S)))


def test_gauges_become_windows():
    auto = AutoShare(actors=1, cores=4)
    g = dict(feed=7, local_queued=2, remote_queued=1, producing=True)
    auto.step("local", True, 0.5, 0.5, Gauges(cpu_s=1.0, feed_cpu_s=0.2, blocked_s=0.0, **g))
    seen = []
    auto.observe = seen.append  # the window step() makes
    # A remote batch handed over; meanwhile one more made here (queued 2 -> 3) and one more taken in (1 -> 1).
    auto.step("remote", False, 0.0, 0.25, Gauges(cpu_s=1.3, feed_cpu_s=0.25, blocked_s=0.05,
                                                 **dict(g, local_queued=3)), "n1", 0.06)
    w = seen[-1]
    assert (w.side, w.first, w.timed, w.node, w.seconds) == ("remote", False, True, "n1", 0.06)
    assert w.cpu_s == pytest.approx(0.3) and w.receive_cpu_s == pytest.approx(0.05)
    assert (w.made, w.received) == (1, 1) and w.busy_s == pytest.approx(0.2)
    # A new feed (another pool): its clock is not comparable with the last one's.
    auto.step("local", False, 0.0, 0.25, Gauges(cpu_s=1.4, feed_cpu_s=0.01, blocked_s=0.05, **dict(g, feed=8)))
    assert seen[-1].receive_cpu_s is None and seen[-1].made == 0  # one queued handed over (3 -> 2), none new
    # A new pass: nothing to compare with.
    auto.begin_pass()
    auto.step("local", True, 0.3, 0.3, Gauges(cpu_s=2.0, feed_cpu_s=0.3, blocked_s=0.0, **g))
    assert not seen[-1].timed and seen[-1].first


def test_a_side_that_is_neither_is_refused():
    with pytest.raises(ValueError, match="side must be"):
        AutoShare(actors=1, cores=1).observe(Window("elsewhere"))
