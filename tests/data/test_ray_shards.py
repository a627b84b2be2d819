"""gdsio.data.ray.Loader over tar shards in the shard-window order
(``shuffle="window"``, and ``shuffle=True`` over shards on an object store),
on a local multi-node Ray cluster on loopback (test_ray's cluster): the
batches, their order, the ranks and a resume are gdsio.Loader's, and each
unit of the window plan (a shard, or the part of one a rank takes) is read
whole by one ranged read, once, however many actors make its batches.

Marker ``ray`` (skipped centrally without Ray Data); the test without it
checks what holds without a cluster (local_share=1.0)."""

from __future__ import annotations

import operator
import os
from pathlib import Path

# test_ray sets RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 on import, before ray is imported (loopback only).
from test_ray import NODE, PRE, ROLE, TIMEOUT, Slow, assert_same, cluster  # noqa: F401 - cluster: the module's own
from test_remote_shards import window_gets
from test_shards import make_folder

import pytest
import torch
from remote_servers import RangeServer

import gdsio.data as gd
from gdsio.data import write_shards
from gdsio.io import http

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.data.context")

SEED = 3
TF = gd.Compose([gd.RandomResizedCrop(8), gd.RandomHorizontalFlip(), gd.ToDtype(torch.float16, scale=True),
                 gd.Normalize(gd.IMAGENET_MEAN, gd.IMAGENET_STD)])


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    """30 samples (JPEGs and PNGs) in tar shards of 4 to 7 samples, with their indexes."""
    root = tmp_path_factory.mktemp("ray-shards")
    folder = make_folder(root / "img", classes=3, per_class=10)
    paths = write_shards(folder, root / "shards", shard_bytes=12000)
    assert len(paths) >= 6
    return paths


@pytest.fixture
def served(shards):
    """The shards on the ranged HTTP server (127.0.0.1): (server, brace URL of them)."""
    server = RangeServer()
    try:
        for p in shards:
            server.put(f"shards/{os.path.basename(p)}", Path(p).read_bytes())
        yield server, server.url(f"shards/shard-{{000000..{len(shards) - 1:06d}}}.tar")
    finally:
        http.drop_pools()  # this process's kept-alive connections to it (the index scan's, the reads')
        server.close()


def plain(source, batch_size, epoch, **kw):
    loader = gd.Loader(source, batch_size, device="cpu", transform=TF, seed=SEED, **kw)
    loader.set_epoch(epoch)
    return [(x.clone(), y.clone()) for x, y in loader]


def ray_loader(source, batch_size, **kw):
    import gdsio.data.ray as gray

    kw.setdefault("resources", PRE)
    kw.setdefault("timeout", TIMEOUT)
    return gray.Loader(source, batch_size, device="cpu", transform=kw.pop("transform", TF), seed=SEED, **kw)


def tar_gets(server):
    return sorted((p, r) for m, p, r in server.requests if m == "GET" and p.endswith(".tar"))


@pytest.mark.ray
def test_the_window_order_over_local_shards_is_gdsio_loaders_every_epoch_of_a_kept_pool(cluster, shards):
    kw = dict(shuffle="window", shuffle_window=2)
    loader = ray_loader(shards, 4, local_share=0.0, epochs_per_pool=2, **kw)
    assert loader.order.shuffle == "window"
    for epoch in (0, 1):
        loader.set_epoch(epoch)
        assert_same(list(loader), plain(shards, 4, epoch, **kw))
    s = loader.stats()
    assert s.remote_samples == 60 and s.local_samples == 0 and s.remote_pools == 1
    loader.close()  # the pool, the units' board and the units it held go
    assert_same(list(loader), plain(shards, 4, 2, **kw))  # a new pool, and board, for the next pass
    loader.close()


@pytest.mark.ray
def test_a_window_rank_split_between_the_sides_resumes_exactly(cluster, shards):
    kw = dict(shuffle="window", shuffle_window=2, rank=1, world_size=2)
    want = plain(shards, 3, 2, **kw)
    first = ray_loader(shards, 3, local_share=0.5, **kw)
    first.set_epoch(2)
    it = iter(first)
    head = [next(it), next(it)]
    state = first.state_dict()
    it.close()
    assert state["shuffle"] == "window" and state["shuffle_window"] == 2 and state["batches_done"] == 2
    second = ray_loader(shards, 3, local_share="auto", **kw)
    second.load_state_dict(state)
    assert_same(head + list(second), want)
    s = second.stats()
    assert s.local_samples + s.remote_samples == 15 - 6
    second.close()


@pytest.mark.ray
def test_remote_shards_are_read_unit_by_unit_once_whatever_actor_makes_the_batches(cluster, shards, served):
    server, brace = served
    urls = [server.url(f"shards/{os.path.basename(p)}")[len(server.base):] for p in shards]
    extra = cluster.c.add_node(num_cpus=1, labels=PRE, resources={"preprocess": 1}, **NODE)
    try:
        loader = ray_loader(brace, 4, local_share=0.0, shuffle=True, shuffle_window=2, actors=2)
        assert loader.order.shuffle == "window"  # shuffle=True over shards on a store
        server.requests.clear()  # the index scan's
        got = list(loader)
        assert_same(got, plain(shards, 4, 0, shuffle="window", shuffle_window=2))
        assert len(loader.stats().remote_nodes) == 2  # both nodes made batches
        # Each unit by one ranged GET of its whole image span, once: not a GET a sample, nor one an actor.
        assert tar_gets(server) == window_gets(loader.order, 0, shards, urls, early=False)[0]  # the board: units only
        loader.close()
    finally:
        cluster.c.remove_node(extra)


@pytest.mark.ray
def test_a_node_lost_mid_epoch_has_its_units_read_again_and_its_batches_remade(cluster, shards):
    kw = dict(shuffle="window", shuffle_window=2)
    spares = [cluster.c.add_node(num_cpus=1, labels={ROLE: "spare"}, **NODE) for _ in range(2)]
    try:
        loader = ray_loader(shards, 2, local_share=0.0, resources={ROLE: "spare"}, actors=1,
                            transform=Slow(TF, 0.3), prefetch=1, **kw)
        it = iter(loader)
        got = [next(it)]
        (first,) = loader.stats().remote_nodes
        victim = next(n for n in spares if n.node_id == first)
        cluster.c.remove_node(victim)  # with the actor, and the units read on its node
        got += list(it)
        assert_same(got, plain(shards, 2, 0, **kw))  # none lost, none twice, in order
        s = loader.stats()
        assert s.remote_samples == 30 and not s.finished_here
        other = next(n for n in spares if n is not victim)
        assert other.node_id in s.remote_nodes  # Ray remade the rest on the other node
        loader.close()
    finally:
        for n in spares:
            if n in cluster.c.worker_nodes:
                cluster.c.remove_node(n)


def test_local_share_one_reads_each_unit_whole_as_gdsio_loader(shards, served):
    import gdsio.data.ray as gray

    server, brace = served
    urls = [server.url(f"shards/{os.path.basename(p)}")[len(server.base):] for p in shards]
    loader = gray.Loader(brace, 4, device="cpu", transform=TF, seed=SEED, shuffle=True, local_share=1.0)
    server.requests.clear()
    assert_same(list(loader), plain(shards, 4, 0, shuffle="window"))
    # As gdsio.Loader reads them: each unit whole, and the first batch's samples each alone as well.
    assert tar_gets(server) == window_gets(loader.order, 0, shards, urls)[0]


class Unmakeable(gd.BatchTransform):
    """A transform that cannot be unpickled (on a CPU node): its actor's creation raises there."""

    def __call__(self, images):
        return images

    def __reduce__(self):
        return (operator.truediv, (1, 0))


@pytest.mark.ray
def test_an_actor_that_cannot_be_made_raises_its_error_rather_than_being_replaced_until_the_timeout(cluster, shards):
    # Before: the feed took the creation error for a lost node and made new actors, each raising it, until the
    # consumer's timeout; gdsio.data.ray.Loader over the window order failed so (ShardedOrder refused "window").
    loader = ray_loader(shards, 4, local_share=0.0, shuffle="window", transform=Unmakeable())
    with pytest.raises(Exception, match="division by zero") as e:
        list(loader)
    assert not isinstance(e.value, TimeoutError)
    loader.close()
