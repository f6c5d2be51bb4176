"""A cluster whose plan names a process that never starts RPC: the timeout names it."""

from __future__ import annotations

import threading

import pytest
import torch.distributed as dist

from actorrt.runtime import group

MEMBERS = [("driver", 0), ("worker1", 1), ("worker2", 2)]


def test_a_world_that_never_forms_names_the_process_that_never_started():
    store = dist.HashStore()
    # worker2 started its agent (it waits too, in its own thread); worker1 left after
    # the plan was made and never does.
    other = threading.Thread(
        target=lambda: pytest.raises(
            TimeoutError, group.wait_for_world, store, MEMBERS, 1.0, own="worker2"
        ),
        daemon=True,
    )
    other.start()
    with pytest.raises(TimeoutError) as caught:
        group.wait_for_world(store, MEMBERS, 1.0, own="driver")
    other.join(10)
    message = str(caught.value)
    assert "not every process started RPC within 1 s" in message
    assert "worker1 (rank 1) never did" in message and "start the cluster again" in message
    assert "worker2" not in message and "driver (" not in message
