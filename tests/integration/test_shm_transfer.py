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
