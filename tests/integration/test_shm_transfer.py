"""Large CPU tensors between processes of one host travel through shared memory.

Checks values, that the road is really taken, and that an actor holding a received
tensor never sees it change when the caller sends more tensors of the same size.
"""

import time

import pytest
import torch

import actorrt
from actorrt.runtime import shm


@actorrt.actor
class Keeper:
    def __init__(self):
        self.kept = []

    def checksum(self, t):
        return float(t.double().sum()), t.dtype, tuple(t.shape)

    def keep(self, t):
        self.kept.append(t)
        return [int(k.min()) for k in self.kept] + [int(k.max()) for k in self.kept]

    def forget(self):
        self.kept.clear()

    def make(self, n, value):
        return torch.full((n,), value, dtype=torch.uint8)

    def shm_state(self, peer):
        """(can peer map our memory?, how many of our segments are lent out now)"""
        return shm._peers.get(peer), sum(1 for seg in shm._pool._segments if seg.mm[0])


def _wait_probe(worker, timeout=30.0):
    deadline = time.monotonic() + timeout
    while shm._peers.get(worker) is None and time.monotonic() < deadline:
        time.sleep(0.05)
    return shm._peers.get(worker)


def test_large_tensors_arrive_intact_and_are_never_reused_under_the_receiver(cluster):
    k = Keeper.remote()
    big = torch.arange(1 << 20, dtype=torch.float32).reshape(1024, 1024)
    expect = float(big.double().sum())
    assert actorrt.get(k.checksum.remote(big), timeout=60) == (expect, torch.float32, (1024, 1024))
    if not shm.enabled():
        pytest.skip("shared memory is off here (ACTORRT_SHM=0, no memfd, or forced transports)")
    # workers of a local cluster share the host and PID namespace: the probe must succeed
    assert _wait_probe(k.worker), "the peer could not map this process's shared memory"
    used_before = len(shm._pool._segments)
    assert actorrt.get(k.checksum.remote(big.t()), timeout=60)[0] == expect
    size = 4 << 20
    for value in range(1, 6):
        got = actorrt.get(k.keep.remote(torch.full((size,), value, dtype=torch.uint8)), timeout=60)
        # every tensor the actor holds still has the value it was sent with
        assert got == list(range(1, value + 1)) * 2
    assert len(shm._pool._segments) > used_before  # the shared-memory road was taken
    actorrt.get(k.forget.remote(), timeout=60)
    segments = len(shm._pool._segments)
    for value in range(6, 9):
        actorrt.get(k.checksum.remote(torch.full((size,), value, dtype=torch.uint8)), timeout=60)
    assert len(shm._pool._segments) == segments  # released segments are reused


def test_large_return_values_come_back_through_shared_memory(cluster):
    if not shm.enabled():
        pytest.skip("shared memory is off here (ACTORRT_SHM=0, no memfd, or forced transports)")
    k = Keeper.remote()
    size = 4 << 20
    assert int(actorrt.get(k.make.remote(size, 7), timeout=60).sum()) == 7 * size
    deadline = time.monotonic() + 30  # the worker probes whether we can map its memory
    while actorrt.get(k.shm_state.remote(cluster.name), timeout=30)[0] is None:
        assert time.monotonic() < deadline, "the worker's probe of the driver never answered"
        time.sleep(0.05)
    ok, lent_before = actorrt.get(k.shm_state.remote(cluster.name), timeout=30)
    assert ok, "the driver could not map the worker's shared memory"
    held = [actorrt.get(k.make.remote(size, v), timeout=60) for v in range(1, 5)]
    # each reply still holds what it was sent with: the worker reused no segment under us
    assert [(int(t.min()), int(t.max())) for t in held] == [(v, v) for v in range(1, 5)]
    _, lent_now = actorrt.get(k.shm_state.remote(cluster.name), timeout=30)
    assert lent_now >= lent_before + 4  # the shared-memory road was taken, one per reply held
    del held
    deadline = time.monotonic() + 10  # dropping them hands the segments back
    while actorrt.get(k.shm_state.remote(cluster.name), timeout=30)[1] > lent_before:
        assert time.monotonic() < deadline, "segments stayed lent after the replies were dropped"
        time.sleep(0.05)
