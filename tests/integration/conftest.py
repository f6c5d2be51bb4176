import pytest
from netns import Procs
from procutil import kill_pids, pid_alive

import actorrt
from actorrt.runtime.runtime import current_or_none


@pytest.fixture(scope="session")
def shared_cluster():
    """A 3-worker local cluster shared by every in-process test of one pytest process.

    One per process on purpose: torch binds its RRef context to the first RPC agent of a
    process, so a second cluster started in the same process cannot pass actor handles
    between actors (see docs/architecture.md). Tests that need their own cluster run
    their driver in a subprocess.
    """
    rt = actorrt.start(num_workers=3, timeout=90)
    pids = list(rt.local_worker_pids)
    try:
        yield rt
    finally:
        actorrt.shutdown()
        kill_pids(p for p in pids if pid_alive(p))


@pytest.fixture
def cluster(shared_cluster):
    """The shared cluster, checked alive: a test that stops it breaks every later one."""
    if current_or_none() is not shared_cluster:
        pytest.fail(
            "the shared cluster of this pytest process was shut down by an earlier test: "
            "a test that starts or stops a cluster must run it in its own process "
            "(tests/integration/scripts.py)"
        )
    return shared_cluster


@pytest.fixture
def procs(tmp_path):
    """Processes of one multi-process test, all killed (by pid and group) at its end."""
    p = Procs(tmp_path)
    try:
        yield p
    finally:
        p.close()


@pytest.fixture
def burst(cluster, monkeypatch):
    """Makes every call of the test queue into batches, as in a long burst."""
    outbox = cluster.calls.outbox
    monkeypatch.setattr(outbox, "busy", lambda dest: True)
    before = outbox.batches_sent
    yield outbox
    assert outbox.batches_sent > before, "the test's calls never went in a batch"
