"""The actor lease (the value an actor's RRef holds) on an agent with device maps.

There torch pickles every RRef value to find its tensors
(``torch._jit_internal._extract_tensors``, called from C++). A lease pickled as itself
dragged the whole host along, failed, and was dropped: the actor was released before
its first call ("no handle refers to the actor any more", seen on a GPU machine).
"""

from __future__ import annotations

import gc
import pickle
import queue

import pytest
import torch._jit_internal as jit_internal

from actorrt.runtime.host import ActorHost, ActorLease


def _host() -> ActorHost:
    return ActorHost(pack_reply=lambda value: (None, [value]))


def test_torchs_tensor_extractor_reads_a_lease_without_walking_the_host() -> None:
    host = _host()
    lease = ActorLease(host, "a" * 32)
    assert jit_internal._extract_tensors(lease) == []
    assert len(pickle.dumps(lease)) < 100


def test_pickling_a_lease_does_not_release_its_actor(monkeypatch: pytest.MonkeyPatch) -> None:
    released: queue.Queue[str] = queue.Queue()
    # On the class, before the host's release thread starts and looks the method up.
    monkeypatch.setattr(ActorHost, "release", lambda self, actor_id, reason: released.put(actor_id))
    host = _host()
    lease = ActorLease(host, "b" * 32)
    copy = pickle.loads(pickle.dumps(lease))
    del copy
    gc.collect()
    # Only this lease's id counts: hosts of earlier tests in this process release their
    # own actors through the same patched method when the collector frees their leases.
    assert "b" * 32 not in _drain(released, 0.5)
    del lease
    gc.collect()
    assert "b" * 32 in _drain(released, 5, until="b" * 32)


def _drain(released: queue.Queue[str], seconds: float, until: str | None = None) -> list[str]:
    """The ids released within ``seconds`` (or until ``until`` came)."""
    import time

    got: list[str] = []
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0 and until not in got:
        try:
            got.append(released.get(timeout=left))
        except queue.Empty:
            break
    return got


class _Counter:
    def __init__(self) -> None:
        self.n = 0


def test_a_restart_that_comes_before_the_creation_waits_for_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # actorrt.kill(no_restart=False) right after Cls.remote(): rank 0's restart can reach
    # the process before the creation does (two messages, two RPC threads).
    import threading
    import types

    import cloudpickle

    from actorrt.runtime import host as host_mod
    from actorrt.runtime.payload import pack

    monkeypatch.setattr(
        host_mod.rpc, "get_worker_info", lambda: types.SimpleNamespace(name="worker1")
    )
    host = ActorHost(pack_reply=lambda caller, reply: (None, [reply]))
    actor_id = "c" * 32
    blob = cloudpickle.dumps(_Counter)
    wire = pack(((), {}))
    restarted: list[bool] = []
    early = threading.Thread(
        target=lambda: restarted.append(host.restart(actor_id, "why", "key", blob, wire))
    )
    early.start()
    early.join(0.3)
    assert early.is_alive()  # waits for the creation, not "not here"
    lease = host.create(
        actor_id, "key", blob, wire, class_name="_Counter", max_concurrency=None,
        gpu_ids=(), pinned=False,
    )  # fmt: skip
    early.join(5)
    assert restarted == [True] and host.was_reconstructed(actor_id)
    del lease
