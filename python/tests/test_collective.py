"""Collectives among Python actors on numpy arrays and torch tensors; ranks passing different
counts all fail saying so; a killed rank fails the others naming it, and a new group of the live
members works."""

import os
import signal

import pytest

import baton
from actors import Rank


def test_every_collective_matches_a_direct_computation():
    procs = baton.this_host().spawn_procs({"procs": 3})
    ranks = procs.spawn("ranks", Rank)
    group = baton.collective.make_group(ranks)
    assert len(group) == 3
    assert ranks.join.call(group).get(timeout=60).values() == [0, 1, 2]
    n = 1000
    for a, t, b, g, s in ranks.every_collective.call(n).get(timeout=60).values():
        assert a == [3 * i + 3 for i in range(n)]
        assert t == [2.0] * n
        assert b == [102] * n
        assert g == [0] * n + [1] * n + [2] * n
        assert s == [3.0] * n
    procs.stop().get(timeout=60)


def test_ranks_passing_different_counts_all_fail_saying_so():
    procs = baton.this_host().spawn_procs({"procs": 3})
    ranks = procs.spawn("ranks", Rank)
    ranks.join.call(baton.collective.make_group(ranks)).get(timeout=60)
    # 10,000 floats go through baton's messages, 20,000 through Gloo's ring.
    pending = [
        ranks.slice(procs=r).allreduce_n.call_one(20000 if r == 1 else 10000) for r in range(3)
    ]
    for r, p in enumerate(pending):
        with pytest.raises(baton.ActorError) as info:
            p.get(timeout=60)
        said = info.value.remote_message
        assert "every rank passes the same count and type" in said, (r, said)
        assert "the group is broken" in said, (r, said)
    procs.stop().get(timeout=60)


def test_a_killed_rank_fails_the_others_naming_it_and_a_new_group_works():
    procs = baton.this_host().spawn_procs({"procs": 3})
    ranks = procs.spawn("ranks", Rank)
    ranks.join.call(baton.collective.make_group(ranks)).get(timeout=60)
    victim = ranks.slice(procs=2).pid.call_one().get(timeout=30)
    live = ranks.slice(procs=slice(0, 2))
    pending = live.allreduce_forever.call()
    ranks.slice(procs=2).allreduce_forever.broadcast()
    os.kill(victim, signal.SIGKILL)
    with pytest.raises(baton.ActorError) as info:
        pending.get(timeout=60)
    assert "rank 2" in info.value.remote_message and "is gone" in info.value.remote_message
    assert live.join.call(baton.collective.make_group(live)).get(timeout=60).values() == [0, 1]
    for a, *_ in live.every_collective.call(4).get(timeout=60).values():
        assert a == [1.0, 3.0, 5.0, 7.0]
    live.stop().get(timeout=60)
    procs.stop().get(timeout=60)


def test_tensors_on_other_devices_and_other_objects_are_refused_saying_why():
    import torch

    from baton.collective import _memory

    with pytest.raises(baton.UsageError, match="takes a numpy array or a torch tensor"):
        _memory([1, 2, 3], "allreduce")
    with pytest.raises(baton.UsageError, match="not contiguous"):
        _memory(torch.zeros(4, 4).t(), "allreduce")
    with pytest.raises(baton.UsageError, match="on meta"):
        _memory(torch.zeros(4, device="meta"), "allreduce")
