"""gdsio.data.ray on a real local multi-node Ray cluster (ray.cluster_utils.Cluster):
a trainer node (the head, where this process is the driver) and CPU nodes labelled
for preprocessing. Every Ray process stays on loopback, and a test checks it from
the sockets they hold. Batches are compared with gdsio.Loader(device="cpu") byte
for byte; node ids say where each batch was made; nodes are removed mid-epoch.

Marker ``ray`` (skipped centrally without Ray Data). The tests without the
marker check what holds without ray: the imports stay light, arguments are
checked before any cluster is needed, local_share=1.0 needs no Ray.
"""

from __future__ import annotations

import logging
import os

# Before ray is imported anywhere in this process: without it Ray rewrites
# 127.0.0.1 to the machine's own address (ray/_private/services.py,
# resolve_ip_for_localhost), and its processes would listen there.
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"

import shutil
import sys
import tempfile
import threading
import time

import hypothesis  # noqa: F401 - now, single-threaded: see below
import numpy as np
import pytest
import torch

import gdsio.data as gd
from gdsio.data import loopback
from gdsio.errors import SampleError
from gdsio.tools.demo import write_jpeg_folder

from conftest import in_time, run_python

# hypothesis is imported above so that its pytest plugin does not import (and
# assertion-rewrite) it lazily during a test while Ray's threads run: CPython
# 3.11.7's AST recursion counter is not thread-safe (gh-106905) and once failed
# such an import with "AST constructor recursion depth mismatch".

# Ray 2.60's DataContext() sets its own deprecated fields while it is made, so
# its first use warns whatever the caller does: those warnings (raised in
# ray/data/context.py itself) only.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.data.context")

ROLE = "gdsio-role"
PRE = {ROLE: "preprocess"}
NODE = {"node_ip_address": "127.0.0.1", "object_store_memory": 100 << 20}
SEED = 5
TF = gd.Compose([gd.RandomResizedCrop(24), gd.RandomHorizontalFlip(), gd.ToDtype(torch.float16, scale=True),
                 gd.Normalize(gd.IMAGENET_MEAN, gd.IMAGENET_STD)])
# On 2 busy cores an actor pool takes seconds to start; generous, never reached when all is well.
TIMEOUT = 240.0


class Slow(gd.BatchTransform):
    """The inner transform after a pause: an epoch lasts long enough to lose a node in it."""

    def __init__(self, inner, seconds):
        self.inner, self.seconds = inner, seconds

    def __call__(self, images):
        time.sleep(self.seconds)
        return self.inner(images)


class SlowOn(gd.BatchTransform):
    """The inner transform, after a pause only where it runs on the given Ray node."""

    def __init__(self, inner, node_id, seconds):
        self.inner, self.node_id, self.seconds = inner, node_id, seconds

    def __call__(self, images):
        import ray

        if ray.get_runtime_context().get_node_id() == self.node_id:
            time.sleep(self.seconds)
        return self.inner(images)


class GatedStart(gd.BatchTransform):
    """The inner transform. Unpickled in another process (a Ray actor's start), it waits until the file `gate`
    exists (120 s at most): the actor is not ready before."""

    def __init__(self, inner, gate):
        self.inner, self.gate, self.pid = inner, gate, os.getpid()

    def __setstate__(self, state):
        self.__dict__.update(state)
        if os.getpid() != self.pid:
            deadline = time.monotonic() + 120
            while not os.path.exists(self.gate) and time.monotonic() < deadline:
                time.sleep(0.05)

    def __call__(self, images):
        return self.inner(images)


class RecordNode(gd.BatchTransform):
    """The inner transform, writing the Ray node id it ran on to a file (one line per batch)."""

    def __init__(self, inner, path):
        self.inner, self.path = inner, path

    def __call__(self, images):
        import ray

        with open(self.path, "a") as f:
            f.write(ray.get_runtime_context().get_node_id() + "\n")
        return self.inner(images)


# ---- the cluster ------------------------------------------------------------------------


class _Cluster:
    """The module's cluster; close() is idempotent (the last test calls it, to check what it leaves behind)."""

    def __init__(self, tmp: str) -> None:
        import ray
        from ray.cluster_utils import Cluster

        self.ray, self.tmp = ray, tmp
        self.c = Cluster(initialize_head=True, head_node_args=dict(num_cpus=1, include_dashboard=False,
                                                                   labels={ROLE: "trainer"}, **NODE))
        self.head = self.c.head_node
        self.pre = self.c.add_node(num_cpus=1, labels=PRE, resources={"preprocess": 1}, **NODE)
        # Ray puts the driver's working directory on its workers' sys.path: run from a
        # source checkout's root (the README's test command), they would import its
        # gdsio/ (no compiled extension) instead of the installed package.
        cwd = os.getcwd()
        os.chdir(tmp)
        try:
            self.c.connect()
        finally:
            os.chdir(cwd)
        self.closed = False

    def close(self) -> set[int]:
        """Shuts the cluster down; returns the pids its processes had (this process excluded)."""
        if self.closed:
            return set()
        self.closed = True
        pids = _family_pids() - {os.getpid()}
        self.ray.shutdown()
        self.c.shutdown()
        return pids


@pytest.fixture(scope="module")
def cluster():
    tmp = tempfile.mkdtemp(prefix="gdsio-ray-", dir="/tmp")  # short: Ray's unix sockets live under it
    old_tmp = os.environ.get("RAY_TMPDIR")
    os.environ["RAY_TMPDIR"] = tmp  # sessions, logs and the cluster's address file stay in it
    import ray
    import ray.cloudpickle

    assert ray._private.ray_constants.ENABLE_RAY_CLUSTER is False, "ray was imported before the loopback setting"
    from ray._common.usage.usage_lib import usage_stats_enabled

    assert not usage_stats_enabled(), "Ray would report usage off this machine (RAY_USAGE_STATS_ENABLED=0 unset)"
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # this module's transforms travel to the actors
    ray.data.DataContext.get_current().enable_progress_bars = False
    c = _Cluster(tmp)
    try:
        yield c
    finally:
        c.close()
        ray.cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
        if old_tmp is None:
            os.environ.pop("RAY_TMPDIR", None)
        else:
            os.environ["RAY_TMPDIR"] = old_tmp
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("ray-data") / "train"
    write_jpeg_folder(str(root), classes=2, per_class=9, size=(40, 30))  # 18 JPEGs
    return str(root)


def cpu_batches(source, batch_size, epoch, transform=TF, **kw):
    loader = gd.Loader(source, batch_size, device="cpu", transform=transform, shuffle=True, seed=SEED, **kw)
    loader.set_epoch(epoch)
    return list(loader)


def assert_same(got, want):
    assert len(got) == len(want)
    for k, ((x, y), (wx, wy)) in enumerate(zip(got, want)):
        assert x.dtype == wx.dtype and x.shape == wx.shape, k
        assert x.contiguous().view(torch.uint8).numpy().tobytes() == wx.contiguous().view(torch.uint8).numpy().tobytes(), \
            f"batch {k} differs"
        assert torch.equal(y, wy), k


def ray_loader(source, batch_size, **kw):
    import gdsio.data.ray as gray

    kw.setdefault("resources", PRE)
    kw.setdefault("timeout", TIMEOUT)
    kw.setdefault("shuffle", True)  # as cpu_batches
    return gray.Loader(source, batch_size, device="cpu", transform=kw.pop("transform", TF), seed=SEED, **kw)


# ---- loopback ---------------------------------------------------------------------------


def _family_pids() -> set[int]:
    """This process and every process below it (Cluster starts the nodes' raylets, GCS and workers from here)."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue  # gone meanwhile
            children.setdefault(ppid, []).append(int(name))
    out, todo = set(), [os.getpid()]
    while todo:
        pid = todo.pop()
        out.add(pid)
        todo.extend(children.get(pid, []))
    return out


def ray_sockets() -> list[dict]:
    """Every TCP/UDP socket of this process tree (gdsio.data.loopback's reading of /proc)."""
    return loopback.process_sockets(_family_pids())


def assert_loopback_only():
    listening = [s for s in ray_sockets() if "LISTEN" in s["kind"]]
    assert len(listening) >= 3, f"expected the cluster's servers among {listening}"  # GCS, raylets, object managers
    loopback.check_loopback(_family_pids())  # LoopbackError lists any socket off loopback


@pytest.mark.ray
def test_every_ray_process_stays_on_loopback(cluster):
    nodes = cluster.ray.nodes()
    assert len(nodes) == 2 and {n["NodeManagerAddress"] for n in nodes} == {"127.0.0.1"}
    assert_loopback_only()


# ---- dataset() --------------------------------------------------------------------------


@pytest.mark.ray
def test_dataset_rows_equal_the_cpu_loader_and_come_from_the_preprocessing_node(cluster, folder, tmp_path):
    import gdsio.data.ray as gray

    where = tmp_path / "nodes.txt"
    ds = gray.dataset(folder, transform=RecordNode(TF, str(where)), seed=SEED, epoch=2, shuffle=True,
                      resources=PRE, batch_size=4)
    rows = ds.take_all()
    ref = gd.Loader(folder, 18, device="cpu", transform=TF, shuffle=True, seed=SEED)
    ref.set_epoch(2)
    (want, labels), = list(ref)
    order = ref.order.indices(2)
    assert [int(r["index"]) for r in rows] == order.tolist()  # the epoch's order, as the loader's
    for r, k in zip(rows, range(len(order))):
        assert set(r) == {"index", "label", "image"}
        assert r["image"].dtype == np.float16 and r["image"].shape == (3, 24, 24)
        assert r["image"].tobytes() == want[k].numpy().tobytes(), f"sample {r['index']} differs"
        assert int(r["label"]) == int(labels[k])
    assert set(where.read_text().split()) == {cluster.pre.node_id}  # decoded and transformed there, only there


@pytest.mark.ray
def test_dataset_without_transform_gives_uint8_chw(cluster, folder):
    import gdsio.data.ray as gray

    rows = gray.dataset(folder, resources=PRE).take(3)
    assert [int(r["index"]) for r in rows] == [0, 1, 2]
    img = gd.Loader(folder, 1, device="cpu").dataset[1][0]
    assert rows[1]["image"].dtype == np.uint8 and rows[1]["image"].shape == tuple(img.shape)
    assert np.array_equal(rows[1]["image"], img.numpy())


# ---- the loader -------------------------------------------------------------------------


@pytest.mark.ray
def test_all_remote_equals_the_cpu_loader_byte_for_byte(cluster, folder):
    loader = ray_loader(folder, 4, local_share=0.0)
    loader.set_epoch(1)
    assert_same(list(loader), cpu_batches(folder, 4, 1))
    s = loader.stats()
    assert (s.local_samples, s.remote_samples) == (0, 18)
    assert s.remote_nodes == {cluster.pre.node_id: 18}  # made on the preprocessing node
    assert s.path == "ray" and "path ray" in str(s)
    assert s.remote_ms_per_sample is not None and s.remote_ms_per_sample > 0
    assert s.batches == 5 and loader.epoch == 2
    assert_loopback_only()  # the actors' worker processes included


CHAINS = {  # the training chain in each output dtype, and the uint8 chain (no cast)
    "float32": gd.Compose([gd.RandomResizedCrop(24), gd.RandomHorizontalFlip(), gd.ToDtype(torch.float32, scale=True),
                           gd.Normalize(gd.IMAGENET_MEAN, gd.IMAGENET_STD)]),
    "float16": TF,
    "bfloat16": gd.Compose([gd.RandomResizedCrop(24), gd.RandomHorizontalFlip(),
                            gd.ToDtype(torch.bfloat16, scale=True)]),
    "uint8": gd.Compose([gd.RandomResizedCrop(24), gd.RandomHorizontalFlip()]),
}


@pytest.mark.ray
@pytest.mark.parametrize("chain", list(CHAINS))
@pytest.mark.parametrize("cast_on", ["device", "cpu_nodes"])
def test_the_cpu_nodes_send_uint8_and_the_batches_equal_the_cpu_loader(cluster, folder, chain, cast_on, monkeypatch):
    """cast_on="device": a chain ending in a float cast crosses as uint8 (a
    quarter of float32's bytes) and the cast and the normalisation run here
    (the default); "cpu_nodes": the chain runs whole there. The
    batch is gdsio.Loader's, bit for bit, in every dtype."""
    from gdsio.data.ray import feed

    travelled = []
    receive = feed.receive

    def spy(images, tail, pinned):
        travelled.append((images.dtype, images.flags.writeable))
        return receive(images, tail, pinned)

    monkeypatch.setattr(feed, "receive", spy)
    # Ray's object store (test_ray_transport.py checks the same over the default socket transport).
    loader = ray_loader(folder, 4, local_share=0.0, transform=CHAINS[chain], cast_on=cast_on, transport="object_store")
    assert ray_loader(folder, 4, local_share=1.0).cast_on == "device"  # the default
    loader.set_epoch(2)
    if chain == "bfloat16" and cast_on == "cpu_nodes":  # numpy has no bfloat16: it cannot leave a CPU node
        with pytest.raises(TypeError, match="bfloat16 batch cannot leave a CPU node"):
            list(loader)
        return
    got = list(loader)
    assert_same(got, cpu_batches(folder, 4, 2, transform=CHAINS[chain]))
    assert got[0][0].dtype == (torch.uint8 if chain == "uint8" else getattr(torch, chain))
    # Every batch came as Ray's read-only mapping of the object store, in uint8 (or the chain's dtype there).
    sent = np.dtype(np.uint8) if cast_on == "device" or chain == "uint8" else np.dtype(chain)
    assert travelled == [(sent, False)] * 5


@pytest.mark.ray
def test_a_transform_that_does_not_split_runs_whole_on_the_cpu_nodes(cluster, folder):
    from gdsio.data.ray.feed import split_transform

    unfused = gd.Compose([gd.RandomResizedCrop(24), gd.ToDtype(torch.float32, scale=True), gd.RandomHorizontalFlip()])
    for tf in (unfused, Slow(TF, 0.0), gd.Compose([gd.ToDtype(torch.float32, scale=True)])):
        assert split_transform(tf) == (tf, None)
    loader = ray_loader(folder, 4, local_share=0.0, transform=unfused, cast_on="device")
    assert_same(list(loader), cpu_batches(folder, 4, 0, transform=unfused))


@pytest.mark.ray
@pytest.mark.parametrize("chain, cast_on", [("float32", "device"), ("float32", "cpu_nodes"), ("uint8", "device")])
def test_a_batch_changed_in_place_changes_no_later_batch(cluster, folder, chain, cast_on):
    """A received batch is the consumer's own memory (on the CPU, without a
    tail, its block in the object store): writing into it (a
    Normalize(inplace=True), an add_) reaches no later batch, of this epoch or the next."""
    tf = CHAINS[chain]
    loader = ray_loader(folder, 4, local_share=0.0, transform=tf, epochs_per_pool=2, cast_on=cast_on)
    first = []
    for images, labels in loader:
        first.append((images.clone(), labels.clone()))
        images.fill_(7)  # the user's in-place op
        labels.fill_(7)
    assert_same(first, cpu_batches(folder, 4, 0, transform=tf))
    held = list(loader)  # epoch 1, from the same pool
    for images, _ in held[:2]:
        images.fill_(9)
    assert_same(held[2:], cpu_batches(folder, 4, 1, transform=tf)[2:])
    loader.set_epoch(0)
    assert_same(list(loader), cpu_batches(folder, 4, 0, transform=tf))  # a new pool, the same batches


@pytest.mark.ray
@pytest.mark.gpu
@pytest.mark.parametrize("share", [0.0, 0.5])
def test_on_a_gpu_batches_land_on_the_consumers_stream_equal_to_the_cpu_loader(cluster, folder, share):
    """device="cuda": remote batches go from pinned memory to the GPU on the
    consumer's current stream, local ones are ordered after it. Read at once
    by a kernel on a side stream made current, every batch equals the CPU
    loader's byte for byte (a copy on another stream, unordered, would race)."""
    import gdsio.data.ray as gray

    loader = gray.Loader(folder, 4, device="cuda", transform=TF, seed=SEED, shuffle=True, local_share=share,
                         resources=PRE, timeout=TIMEOUT)
    loader.set_epoch(1)
    side = torch.cuda.Stream()
    got = []
    try:
        with torch.cuda.stream(side):
            for x, y in loader:
                assert x.is_cuda and y.is_cuda and x.device == torch.device("cuda", torch.cuda.current_device())
                got.append(((x + 0).cpu(), (y + 0).cpu()))  # kernels on `side`, then its copy to the host
                del x, y
    finally:
        loader.close()
    assert_same(got, cpu_batches(folder, 4, 1))
    s = loader.stats()
    assert s.local_samples + s.remote_samples == 18
    assert s.remote_samples == 18 if share == 0.0 else min(s.local_samples, s.remote_samples) > 0


@pytest.mark.ray
def test_a_fixed_share_splits_a_rank_and_gives_the_rank_its_gdsio_shard(cluster, folder, caplog):
    for rank in (0, 1):
        with caplog.at_level(logging.WARNING, logger="gdsio"):
            loader = ray_loader(folder, 2, local_share=0.5, rank=rank, world_size=2)
        # One preprocessing CPU for two ranks: each pool gets the one actor, and the loader says they share it.
        assert loader._actors == 1 and "fewer than the 2 ranks" in caplog.text
        got = list(loader)
        assert_same(got, cpu_batches(folder, 2, 0, rank=rank, world_size=2))
        s = loader.stats()
        assert s.local_samples + s.remote_samples == 9 and s.local_samples > 0 and s.remote_samples > 0
        assert set(s.remote_nodes) == {cluster.pre.node_id} and s.path == "local+ray"


@pytest.mark.ray
def test_ranks_sharing_the_cpu_nodes_get_a_pool_each_and_run_at_once(cluster, folder):
    """Each rank's default pool is its share of the CPU nodes (2 one-CPU nodes, 2 ranks: an actor each).
    With pools of every slot (actors=2 here), the first pool takes both nodes and the second rank waits
    until the first's execution has made its whole epoch, then takes both nodes in turn."""
    spares = [cluster.c.add_node(num_cpus=1, labels={ROLE: "ranks"}, **NODE) for _ in range(2)]
    try:
        loaders = [ray_loader(folder, 2, local_share=0.0, rank=r, world_size=2, resources={ROLE: "ranks"},
                              transform=Slow(TF, 0.2), prefetch=1, timeout=90) for r in (0, 1)]
        assert [lo._actors for lo in loaders] == [1, 1] and "1 actor(s)" in repr(loaders[0])
        its = [iter(lo) for lo in loaders]
        got: list[list] = [[next(its[0])], []]
        got[1].append(next(its[1]))  # while rank 0's pass runs, its actor on one node
        while True:  # the two ranks in turn, as two trainers step together
            more = False
            for r in (0, 1):
                b = next(its[r], None)
                if b is not None:
                    got[r].append(b)
                    more = True
            if not more:
                break
        nodes = []
        for r in (0, 1):
            assert_same(got[r], cpu_batches(folder, 2, 0, rank=r, world_size=2))  # the rank's gdsio shard, exactly
            s = loaders[r].stats()
            assert s.remote_samples == 9
            nodes.append(set(s.remote_nodes))
        assert nodes[0] | nodes[1] == {n.node_id for n in spares} and not nodes[0] & nodes[1]  # a node each
    finally:
        for n in spares:
            if n in cluster.c.worker_nodes:
                cluster.c.remove_node(n)


@pytest.mark.ray
def test_auto_share_is_exact_and_says_where_it_went(cluster, folder):
    loader = ray_loader(folder, 2, local_share="auto")
    assert_same(list(loader), cpu_batches(folder, 2, 0))
    s = loader.stats()
    assert s.local_samples + s.remote_samples == 18
    assert 0.0 <= s.local_share <= 1.0 and "local_share" in str(s)
    # The trainer's board decides before the feed calls an actor: one call for each batch the CPU nodes
    # made (9 batches of 2), none for a batch made here.
    assert loader._exec.feed._seq == s.remote_samples // 2, (loader._exec.feed._seq, s)


@pytest.mark.ray
def test_auto_gives_the_cpu_nodes_no_batch_before_an_actor_is_ready(cluster, folder, tmp_path):
    # The pool cannot start until the gate opens, and it opens only after the epoch: every batch is made here,
    # and the feed calls no actor. A feed that took batches before its actor was ready would hold the
    # consumer until the gate's 120 s ran out, and the CPU node would make them.
    gate = tmp_path / "gate"
    loader = ray_loader(folder, 2, local_share="auto", transform=GatedStart(TF, str(gate)))
    got = list(loader)
    gate.touch()
    assert_same(got, cpu_batches(folder, 2, 0))
    s = loader.stats()
    assert s.local_samples == 18 and s.remote_samples == 0 and s.local_share == 1.0, s
    assert loader._exec is None or loader._exec.feed._seq == 0
    loader.close()
    assert not [t for t in threading.enumerate() if t.name == "gdsio-ray"]


@pytest.mark.ray
def test_auto_share_moves_work_here_when_the_cpu_nodes_lag(cluster, folder):
    # The other direction (this node lags) is not checked on a cluster: on 2 busy cores the actor pool's start
    # takes so long that every local batch is ready before the first remote one, and nothing is waited for.
    loader = ray_loader(folder, 2, local_share="auto", transform=SlowOn(TF, cluster.pre.node_id, 0.6), prefetch=2)
    got = []
    for batch in loader:
        got.append(batch)
        time.sleep(0.1)  # the consumer's step: a batch made in time is not waited for
    assert_same(got, cpu_batches(folder, 2, 0))
    assert loader.stats().local_share > 0.5, loader.stats()


@pytest.mark.ray
def test_resume_mid_epoch_is_exact_across_loaders(cluster, folder):
    want = cpu_batches(folder, 3, 4)
    first = ray_loader(folder, 3, local_share=0.0)
    first.set_epoch(4)
    it = iter(first)
    head = [next(it), next(it)]
    state = first.state_dict()
    it.close()
    assert state["batches_done"] == 2 and state["epoch"] == 4
    second = ray_loader(folder, 3, local_share=0.5)
    second.load_state_dict(state)
    assert_same(head + list(second), want)
    assert second.stats().samples == 12
    # The state is gdsio.Loader's: a plain loader resumes from it too.
    plain = gd.Loader(folder, 3, device="cpu", transform=TF, shuffle=True, seed=SEED)
    plain.load_state_dict(state)
    assert_same(list(plain), want[2:])


@pytest.mark.ray
def test_a_pool_kept_across_epochs_gives_each_epoch_exactly_and_starts_once(cluster, folder):
    loader = ray_loader(folder, 4, local_share=0.0, epochs_per_pool=3)
    for epoch in range(3):
        loader.set_epoch(epoch)  # as a training loop does: the epoch the last pass ended on
        assert_same(list(loader), cpu_batches(folder, 4, epoch))
    s = loader.stats()
    assert s.remote_pools == 1 and s.remote_samples == 54 and s.remote_nodes == {cluster.pre.node_id: 54}
    assert_same(list(loader), cpu_batches(folder, 4, 3))  # its 3 epochs are over: a new execution
    assert loader.stats().remote_pools == 2
    loader.close()
    assert not [t for t in threading.enumerate() if t.name == "gdsio-ray"]
    # close() freed the pool's CPU: another loader's actors get the preprocessing node (1 CPU) at once.
    other = ray_loader(folder, 4, local_share=0.0)
    assert_same(list(other), cpu_batches(folder, 4, 0))


@pytest.mark.ray
def test_auto_share_over_a_kept_pool_is_exact_every_epoch(cluster, folder):
    loader = ray_loader(folder, 2, local_share="auto", epochs_per_pool=2)
    got = [list(loader), list(loader)]  # epochs 0 and 1, one after the other
    assert_same(got[0], cpu_batches(folder, 2, 0))
    assert_same(got[1], cpu_batches(folder, 2, 1))
    s = loader.stats()
    assert s.remote_pools == 1 and s.local_samples + s.remote_samples == 36
    loader.close()


@pytest.mark.ray
def test_a_pass_left_mid_epoch_ends_its_pool_and_a_resume_is_exact(cluster, folder):
    loader = ray_loader(folder, 3, local_share=0.5, epochs_per_pool=4)
    loader.set_epoch(2)
    it = iter(loader)
    head = [next(it), next(it)]
    state = loader.state_dict()
    it.close()
    assert not [t for t in threading.enumerate() if t.name == "gdsio-ray"]  # the pool went with the pass
    # ...so another loader's actors can have the preprocessing node (1 CPU) meanwhile.
    assert_same(list(ray_loader(folder, 3, local_share=0.0)), cpu_batches(folder, 3, 0))
    loader.load_state_dict(state)
    assert_same(head + list(loader), cpu_batches(folder, 3, 2))
    assert_same(list(loader), cpu_batches(folder, 3, 3))  # went on with the resumed pass's pool
    assert loader.stats().remote_pools == 2
    loader.close()


@pytest.mark.ray
def test_bad_samples_on_the_cpu_nodes_skip_or_raise_as_gdsio_loader(cluster, tmp_path):
    root = tmp_path / "train"
    write_jpeg_folder(str(root), classes=1, per_class=6, size=(40, 30))
    bad = sorted((root / os.listdir(root)[0]).iterdir())[2]
    bad.write_bytes(b"\xff\xd8 not a jpeg")
    got = list(ray_loader(str(root), 4, local_share=0.0, on_error="skip"))
    assert_same(got, cpu_batches(str(root), 4, 0, on_error="skip"))
    assert sum(len(x) for x, _ in got) == 5
    with pytest.raises(SampleError, match=bad.name) as e:
        list(ray_loader(str(root), 4, local_share=0.0))
    # gdsio's own SampleError, as gdsio.Loader raises it: not Ray's RayTaskError subclass wrapping it.
    assert type(e.value) is SampleError and e.value.path.endswith(bad.name), type(e.value).__mro__
    with pytest.raises(SampleError) as local:
        list(gd.Loader(str(root), 4, device="cpu"))
    assert str(e.value) == str(local.value)  # gdsio.Loader's words, not Ray's around them


# ---- nodes lost mid-epoch ---------------------------------------------------------------


@pytest.mark.ray
@pytest.mark.parametrize("transport", ["socket", "object_store"])
def test_a_node_lost_mid_epoch_has_its_batches_remade_elsewhere(cluster, folder, transport):
    role = f"spare-{transport}"
    spares = [cluster.c.add_node(num_cpus=1, labels={ROLE: role}, **NODE) for _ in range(2)]
    try:
        loader = ray_loader(folder, 2, local_share=0.0, resources={ROLE: role}, actors=1,
                            transform=Slow(TF, 0.4), prefetch=1, transport=transport)
        it = iter(loader)
        got = [next(it)]
        (first,) = loader.stats().remote_nodes
        victim = next(n for n in spares if n.node_id == first)
        cluster.c.remove_node(victim)
        got += list(it)
        assert_same(got, cpu_batches(folder, 2, 0))  # none lost, none twice, in order
        s = loader.stats()
        assert s.remote_samples == 18 and s.batches == 9
        other = next(n for n in spares if n is not victim)
        assert other.node_id in s.remote_nodes  # Ray remade the rest on the other node
    finally:
        for n in spares:
            if n in cluster.c.worker_nodes:
                cluster.c.remove_node(n)


class HoldOn(gd.BatchTransform):
    """The inner transform; on the given Ray node, each call marks a file and
    then waits (bounded) for ever: the test removes the node once the mark is
    there, so the CPU node makes no batch, whatever the timing."""

    def __init__(self, inner, node_id, marks):
        self.inner, self.node_id, self.marks = inner, node_id, marks

    def __call__(self, images):
        import ray

        if ray.get_runtime_context().get_node_id() == self.node_id:
            with open(self.marks, "a") as f:
                f.write("x")
            time.sleep(TIMEOUT)
        return self.inner(images)


@pytest.mark.ray
@pytest.mark.parametrize("share", [0.0, "auto"])
def test_every_node_lost_mid_epoch_finishes_it_here_exactly_and_says_so(cluster, folder, tmp_path, share):
    lone = cluster.c.add_node(num_cpus=1, labels={ROLE: "lone"}, **NODE)
    added = [lone]
    marks = tmp_path / "marks"
    try:
        want = cpu_batches(folder, 2, 0)
        plain = gd.Loader(folder, 2, device="cpu", transform=TF, shuffle=True, seed=SEED)
        it = iter(plain)
        head = [next(it) for _ in range(3)]
        state = plain.state_dict()
        it.close()
        loader = ray_loader(folder, 2, local_share=share, resources={ROLE: "lone"}, prefetch=1, timeout=120,
                            transform=HoldOn(TF, lone.node_id, str(marks)))
        loader.load_state_dict(state)  # mid-epoch: from batch 3
        it = iter(loader)
        deadline = time.monotonic() + TIMEOUT
        while not marks.exists() and time.monotonic() < deadline:  # the CPU node's pool is up and at work
            time.sleep(0.05)
        assert marks.exists(), "the CPU node never began a batch"
        cluster.c.remove_node(lone)
        got = list(it)  # no error: the rest is made here
        assert_same(head + got, want)  # none lost, none twice, in order
        s = loader.stats()
        assert list(s.finished_here) == [0] and s.remote_lost == [lone.node_id] and s.remote_samples == 0
        k = s.finished_here[0]
        assert k == 3 if share == 0.0 else 3 <= k <= 8
        assert f"CPU nodes lost ({lone.node_id}): made here epoch 0 from batch {k}" in str(s)
        # Nothing left: the pass's threads end (joined with bounds; waited for, not timed, on a loaded machine).
        deadline = time.monotonic() + 120
        while [t for t in threading.enumerate() if t.name in ("gdsio-ray", "gdsio-loader")] and \
                time.monotonic() < deadline:
            time.sleep(0.05)
        assert not [t for t in threading.enumerate() if t.name in ("gdsio-ray", "gdsio-loader")]
        # The next epoch, no node with the label live: all made here, and stats says so.
        assert_same(list(loader), cpu_batches(folder, 2, 1))
        s = loader.stats(reset=True)
        assert s.finished_here == {0: k, 1: 0} and s.remote_pools == 1 and s.local_samples == 12 + 18
        if share == 0.0:  # a node with the label live again: the next epoch has a new pool on it
            added.append(cluster.c.add_node(num_cpus=1, labels={ROLE: "lone"}, **NODE))
            assert_same(list(loader), cpu_batches(folder, 2, 2))
            s = loader.stats()
            assert s.remote_nodes == {added[-1].node_id: 18} and s.remote_pools == 2 and not s.finished_here
        loader.close()
    finally:
        for n in added:
            if n in cluster.c.worker_nodes:
                cluster.c.remove_node(n)


# ---- shutdown (last of the module's Ray tests: it ends the cluster) ---------------------


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie holds nothing but its pid
    except OSError:
        return False


def _mentioning(text: str) -> list[str]:
    """Processes whose command line names `text` (Ray's processes name their session dir, under RAY_TMPDIR)."""
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != os.getpid():
            try:
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if text in cmd and _alive(int(name)):
                out.append(f"{name}: {cmd[:200]}")
    return out


@pytest.mark.ray
def test_shutdown_leaves_no_ray_process_or_socket_behind(cluster):
    assert _mentioning(cluster.tmp), "the check must see the cluster's processes while it runs"
    pids = cluster.close()
    assert len(pids) >= 4  # GCS, two raylets, their workers (and what else Ray started)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and ([p for p in pids if _alive(p)] or _mentioning(cluster.tmp)):
        time.sleep(0.5)
    assert not [p for p in pids if _alive(p)], "Ray processes alive after shutdown"
    assert not _mentioning(cluster.tmp), "processes of the cluster's session alive after shutdown"
    assert not [s for s in ray_sockets() if "LISTEN" in s["kind"]], "sockets still listening after shutdown"


# ---- without ray (no marker) ------------------------------------------------------------


def test_the_auto_board_gives_each_batch_to_the_side_that_asks_first_once():
    from gdsio.data.ray.passes import Board

    board = Board()
    board.begin(1, per=10)
    assert [board.owner(1, 3, k, "local") for k in range(3)] == ["local"] * 3
    assert [board.owner(1, 3, k, "remote") for k in range(5)] == ["local"] * 3 + ["remote"] * 2  # 0-2 held here
    assert [board.owner(1, 3, k, "local") for k in reversed(range(6))] == ["local"] + ["remote"] * 2 + ["local"] * 3
    assert board.owner(1, 4, 0, "remote") == "remote"  # the next epoch's batch 0 is another batch
    assert board.owner(0, 3, 9, "local") == "stale"  # an earlier execution's question takes nothing
    board.forget(1, 4)  # epoch 3 handed out: its answers go, epoch 4's stay
    assert set(board.owners) == {(4, 0)}
    board.advance(1, 4, 0)  # the consumer is at epoch 4: a late question about epoch 3 takes no call
    assert board.owner(1, 3, 7, "remote") == "local" and set(board.owners) == {(4, 0)}
    board.begin(2)
    assert board.owner(2, 3, 0, "local") == "local" and board.owner(1, 3, 0, "remote") == "stale"
    with pytest.raises(ValueError, match="side must be"):
        board.owner(2, 3, 1, "elsewhere")


def test_the_auto_board_answers_the_producer_only_near_the_consumer():
    from gdsio.data.ray.passes import Board

    board = Board()
    board.begin(1, epoch=2, start=3, per=10, horizon=4)
    # The producer's questions: batches 3-6 of epoch 2 are within 4 of the consumer (at batch 3); 7 is not yet.
    assert [board.owner(1, 2, k, "local") for k in range(3, 7)] == ["local"] * 4
    assert board.owner(1, 2, 7, "local") is None and (2, 7) not in board.owners
    stop = threading.Event()
    waited = []
    t = threading.Thread(target=lambda: (board.wait(1, 2, 7, stop), waited.append(board.at)))
    t.start()
    board.advance(1, 2, 4)  # the consumer takes batch 4 next: 7 is within 4 of it
    t.join(120)  # woken by advance(); the bound only keeps a broken wait from hanging the suite
    assert not t.is_alive() and waited == [2 * 10 + 4]
    assert board.owner(1, 2, 7, "local") == "local"
    # The feed's questions are answered however far (its calls in flight bound it); the next epoch's batches
    # count on from this one's, and one the feed holds is the feed's for the producer too.
    assert board.owner(1, 3, 5, "remote") == "remote"
    assert board.owner(1, 3, 0, "local") is None  # 3 * 10 + 0 >= 24 + 4
    board.advance(1, 2, 9)
    assert board.owner(1, 3, 0, "local") == "local" and board.owner(1, 3, 5, "local") == "remote"
    # A stale execution and a stop end the wait, whatever the position.
    board.wait(0, 2, 50, stop)
    stop.set()
    board.wait(1, 9, 0, stop)
    assert board.owner(0, 2, 8, "local") == "stale"


@pytest.fixture
def reader_pools(monkeypatch):
    """The reader pools producers start, by their arguments (ThreadPoolExecutor counted, still real)."""
    from gdsio.data import producer as producer_module

    pools = []
    real_pool = producer_module.concurrent.futures.ThreadPoolExecutor
    monkeypatch.setattr(producer_module.concurrent.futures, "ThreadPoolExecutor",
                        lambda *a, **k: pools.append(a) or real_pool(*a, **k))
    return pools


@pytest.mark.parametrize("on_error", ["skip", "raise"])
def test_inline_reads_make_the_same_batches_in_the_producers_own_thread(tmp_path, reader_pools, on_error):
    """A CPU node's actor call (one batch, one CPU) reads and decodes in the producer's thread: the same
    batches, the same skipped sample or the same error naming the file, and no reader thread started."""
    import dataclasses
    import glob
    import queue as queue_module

    from gdsio.data import producer as producer_module
    from gdsio.data.flow import END, Failed, ReadyBatch

    write_jpeg_folder(str(tmp_path / "train"), classes=2, per_class=5, size=(20, 14))
    bad = sorted(glob.glob(str(tmp_path / "train" / "*" / "*")))[3]
    with open(bad, "wb") as f:
        f.write(b"\xff\xd8\xff\xe0 not a JPEG after its first marker")
    tf = gd.Compose([gd.RandomResizedCrop(8), gd.RandomHorizontalFlip()])
    inner = gd.Loader(str(tmp_path / "train"), 4, device="cpu", transform=tf, shuffle=True, seed=3, on_error=on_error)
    def run(inline):
        q, kept = queue_module.Queue(), {}
        plan = dataclasses.replace(inner._plan(0, 0), threads=1, inline_reads=inline)
        # To its end, in a thread of its own: a producer marks its thread as a loader's, which pytest's must not be
        # (a loader closed there later would not join its threads).
        in_time(producer_module.Producer(plan, q, threading.Event(), kept=kept).run, 120)
        out = []
        while (item := q.get_nowait()) is not END:
            if isinstance(item, Failed):
                out.append(("failed", type(item.error).__name__, str(item.error)))
                break
            assert isinstance(item, ReadyBatch)
            out.append((item.batch_no, item.images.clone(), item.labels.clone(), kept[item.batch_no].tolist()))
        return out

    threaded = run(False)
    assert len(reader_pools) == 1
    inline = run(True)
    assert len(reader_pools) == 1  # no reader pool for the inline pass
    assert len(inline) == len(threaded) > 0
    for a, b in zip(inline, threaded):
        if a[0] == "failed":
            assert a == b and os.path.basename(bad) in a[2]
        else:
            assert a[0] == b[0] and torch.equal(a[1], b[1]) and torch.equal(a[2], b[2]) and a[3] == b[3]
    if on_error == "skip":
        assert sum(len(x[3]) for x in inline) == 9  # the bad file's sample left out, every other one there
    else:
        assert inline[-1][0] == "failed"


@pytest.mark.parametrize("cpus", [1, 2])
def test_an_actor_call_on_one_cpu_starts_no_reader_thread(tmp_path, reader_pools, cpus):
    """BatchMaker.make (one actor call, one batch) with one CPU reads in the call's thread; with more, in a
    pool of that many readers; the batch is gdsio.Loader's either way."""
    from gdsio.data.ray.remote import ActorSpec, BatchMaker

    write_jpeg_folder(str(tmp_path / "train"), classes=2, per_class=4, size=(20, 14))
    tf = gd.Compose([gd.RandomResizedCrop(8), gd.RandomHorizontalFlip()])
    ref = gd.Loader(str(tmp_path / "train"), 4, device="cpu", transform=tf, shuffle=True, seed=5)
    o = ref.order
    spec = ActorSpec(table=ref.table, num_samples=o.num_samples, batch_size=4, shuffle=o.shuffle, seed=o.seed,
                     rank=0, world_size=1, drop_last=False, epoch=0, transform=tf, mode=ref.image_mode,
                     on_error="raise", threads=cpus, per_batch=True, per=len(ref))
    maker = BatchMaker.__new__(BatchMaker)  # as the actor's __init__ makes it, without Ray's node id
    maker.spec, maker.node, maker.order, maker.units, maker._indices = spec, "node", spec.order(), None, {}
    made = in_time(lambda: [maker.make(place) for place in range(len(ref))], 120)  # a thread of its own, as above
    assert reader_pools == ([] if cpus == 1 else [(cpus,)] * len(ref))
    want = list(ref)  # the whole pass: its threads end with it (a pass left open keeps them for later tests)
    assert len(want) == len(made)
    for (epoch, k, images, labels, _, _), (want_images, want_labels) in zip(made, want):
        assert epoch == 0 and torch.equal(torch.from_numpy(images), want_images)
        assert torch.equal(torch.from_numpy(labels), want_labels.to(torch.int64))


def test_a_producer_waits_for_an_order_not_yet_decided_only_with_nothing_in_hand(tmp_path):
    """The producer meets NOT_YET: it finishes the batch it has read first (its put lets the consumer move on),
    and waits only with nothing in hand."""
    import queue as queue_module

    from gdsio.data import Loader
    from gdsio.data.flow import END, NOT_YET, ReadyBatch
    from gdsio.data.producer import Producer

    write_jpeg_folder(str(tmp_path / "train"), classes=1, per_class=8, size=(16, 12))
    inner = Loader(str(tmp_path / "train"), 2, device="cpu")
    events = []

    class Puts(queue_module.Queue):
        puts = 0

        def put(self, item, block=True, timeout=None):
            super().put(item, block, timeout)
            self.puts += 1

    class Order:
        seed = 0

        def numbered_batches(self, epoch, start=0):
            for k, idx in inner.order.numbered_batches(epoch, start):
                while k == 2 and not any(e[0] == "wait" for e in events):
                    events.append(("not yet", q.puts))
                    yield NOT_YET
                yield k, idx

        def wait(self, stop):
            events.append(("wait", q.puts))

    import dataclasses

    plan = dataclasses.replace(inner._plan(0, 0), order=Order())
    q = Puts()
    got = []
    t = threading.Thread(target=Producer(plan, q, threading.Event()).run)
    t.start()
    while (item := q.get(timeout=30)) is not END:
        assert isinstance(item, ReadyBatch)
        got.append(item.batch_no)
    t.join(30)
    assert got == [0, 1, 2, 3]
    # Batch 2 was NOT_YET with batch 1 in hand (batch 0 put): batch 1 was finished and put first, then, asked
    # again with nothing in hand, the producer waited.
    assert events == [("not yet", 1), ("not yet", 2), ("wait", 2)]


def test_imports_stay_light_and_the_extra_is_named():
    p = run_python(
        "import sys, gdsio, gdsio.data, gdsio.data.ray as gray\n"
        "assert 'ray' not in sys.modules, 'importing gdsio.data.ray imported ray'\n"
        "sys.modules['ray'] = None  # as if it were not installed\n"
        "try:\n"
        "    gray.dataset('.')\n"
        "except ImportError as e:\n"
        "    print(e)\n"
    )
    assert p.returncode == 0, p.stderr
    assert 'pip install "gdsio[ray]"' in p.stdout


def test_local_share_one_is_a_plain_loader_without_ray(tmp_path):
    write_jpeg_folder(str(tmp_path / "train"), classes=2, per_class=3, size=(40, 30))
    p = run_python(
        "import sys, torch, gdsio.data as gd, gdsio.data.ray as gray\n"
        f"tf = gd.Compose([gd.RandomResizedCrop(24), gd.RandomHorizontalFlip()])\n"
        "for kw in ({}, {'shuffle': True}):  # the defaults alike, shuffle=False in both\n"
        f"    a = list(gray.Loader({str(tmp_path / 'train')!r}, 4, device='cpu', transform=tf, local_share=1.0, **kw))\n"
        f"    b = list(gd.Loader({str(tmp_path / 'train')!r}, 4, device='cpu', transform=tf, **kw))\n"
        "    assert len(a) == len(b) == 2\n"
        "    assert all(torch.equal(x, y) and torch.equal(u, v) for (x, u), (y, v) in zip(a, b)), kw\n"
        f"l = gray.Loader({str(tmp_path / 'train')!r}, 4, device='cpu', local_share=1.0); list(l)\n"
        "assert l.stats().path == 'local' and l.stats().local_samples == 6\n"
        "assert 'ray' not in sys.modules\n"
        "print('ok')\n"
    )
    assert p.returncode == 0 and "ok" in p.stdout, p.stderr


def test_the_arguments_both_loaders_take_have_the_same_defaults():
    # "The same batches as gdsio.Loader with the same arguments" holds for the defaults too (shuffle=False,
    # as torch's DataLoader).
    import inspect

    import gdsio.data.ray as gray

    ours = inspect.signature(gray.Loader).parameters
    theirs = inspect.signature(gd.Loader).parameters
    shared = [n for n in ours if n in theirs and n not in ("source", "batch_size")]
    assert "shuffle" in shared and ours["shuffle"].default is False
    assert {n: ours[n].default for n in shared} == {n: theirs[n].default for n in shared}


@pytest.mark.parametrize("kw, err, match", [
    ({"local_share": 1.5}, ValueError, "local_share must be 'auto' or a fraction"),
    ({"local_share": "half"}, ValueError, "local_share must be 'auto' or a fraction"),
    ({"local_share": True}, ValueError, "local_share"),
    ({"resources": ["preprocess"]}, TypeError, "resources must be a dict"),
    ({"resources": {"preprocess": -1}}, ValueError, r"resources\['preprocess'\] must be a positive amount"),
    ({"resources": {"preprocess": None}}, ValueError, "resources"),
    ({"cpus_per_actor": 0}, ValueError, "cpus_per_actor"),
    ({"timeout": 0}, ValueError, "timeout"),
    ({"epochs_per_pool": 0}, ValueError, "epochs_per_pool must be a positive int"),
    ({"epochs_per_pool": 2.0}, ValueError, "epochs_per_pool"),
    ({"cast_on": "gpu"}, ValueError, "cast_on must be one of"),
    ({"batch_size": 0}, ValueError, "batch_size"),
    ({"num_workers": 4}, TypeError, "does not take DataLoader's num_workers=: .*threads="),
    ({"pin_memory": True}, TypeError, "does not take DataLoader's pin_memory=: .*device="),
    ({"local_shares": 0.5}, TypeError, "unexpected keyword argument 'local_shares'"),
])
def test_arguments_are_checked_before_any_cluster_is_needed(tmp_path, kw, err, match):
    import gdsio.data.ray as gray

    write_jpeg_folder(str(tmp_path / "train"), classes=1, per_class=2, size=(40, 30))
    batch_size = kw.pop("batch_size", 2)
    with pytest.raises(err, match=match):
        gray.Loader(str(tmp_path / "train"), batch_size, device="cpu", **kw)


def test_an_order_names_its_batches_one_at_a_time_as_it_walks_them():
    # What the CPU nodes' actors and the local producer share: batch k alone, and (k, indices) from a start.
    o = gd.ShardedOrder(11, batch_size=3, shuffle=True, seed=2, rank=1, world_size=2)
    walked = list(o.numbered_batches(4, 1))
    assert [k for k, _ in walked] == list(range(1, len(o)))
    for k, idx in walked:
        assert np.array_equal(o.batch(4, k), idx)
        assert np.array_equal(o.batch(4, k, o.indices(4)), idx)
    with pytest.raises(IndexError, match="batch 2 is out of range for 2 batches"):
        o.batch(4, len(o))
