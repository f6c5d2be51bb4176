"""Async actors, actors that end themselves, and awaiting refs, on the shared local cluster."""

import asyncio
import sys
import threading

import pytest
import torch.distributed.rpc as rpc
from scripts import run_script

import actorrt
from actorrt.runtime import host as host_mod

pytestmark = pytest.mark.timeout(240)


@actorrt.actor
class Batcher:
    """Ray's batching pattern: callers wait on one event that the n-th caller sets."""

    def __init__(self):
        self.arrived = 0
        self.full = asyncio.Event()

    async def join(self, n):
        self.arrived += 1
        if self.arrived == n:
            self.full.set()
        await asyncio.wait_for(self.full.wait(), 60)
        return self.arrived

    def flush(self):
        # a plain method runs on the loop's thread, so it may set the loop's event
        self.full.set()

    def threads(self):
        return threading.get_ident()

    async def threads_async(self):
        return threading.get_ident()


@actorrt.actor
class Ordered:
    def __init__(self):
        self.seen = []

    def add(self, i):
        self.seen.append(i)

    async def add_async(self, i):
        self.seen.append(i)
        await asyncio.sleep(0)

    def log(self):
        return list(self.seen)


class Ends:
    def __init__(self):
        self.n = 0

    def stop(self):
        actorrt.exit_actor()
        return "never"

    def stop_caught(self):
        try:
            actorrt.exit_actor()
        except BaseException:  # the actor ends all the same, as in Ray
            pass
        return "caught"

    def stop_swallowed(self):
        try:
            actorrt.exit_actor()
        except SystemExit:
            pass
        return "swallowed"

    def sys_exit(self):
        sys.exit(2)

    def builtin_exit(self):
        exit()  # the builtin, as users write it (site's closes sys.stdin first)

    def add(self):
        self.n += 1
        return self.n


@actorrt.actor
class SyncEnder(Ends):
    pass


@actorrt.actor
class Ender(Ends):
    async def stop_async(self):
        actorrt.exit_actor()

    async def stop_caught_async(self):
        try:
            actorrt.exit_actor()
        except BaseException:  # no await after it: the test's queued call must not run first
            pass
        return "caught"

    async def stop_swallowed_async(self):
        try:
            actorrt.exit_actor()
        except SystemExit:
            pass
        return "swallowed"

    async def nap(self, s):
        await asyncio.sleep(s)
        return s


def test_an_async_actor_runs_many_calls_at_once_by_default(cluster):
    b = Batcher.remote()
    n = 200
    refs = [b.join.remote(n) for _ in range(n)]  # one call at a time: a deadlock
    assert actorrt.get(refs, timeout=60) == [n] * n


def test_a_plain_method_of_an_async_actor_runs_on_its_loop(cluster):
    b = Batcher.options(max_concurrency=4).remote()
    waiting = [b.join.remote(10_000) for _ in range(3)]
    actorrt.get(b.flush.remote(), timeout=60)
    assert actorrt.get(waiting, timeout=60) == [3, 3, 3]
    assert actorrt.get(b.threads.remote(), timeout=60) == actorrt.get(
        b.threads_async.remote(), timeout=60
    )


def test_plain_and_async_calls_of_one_caller_start_in_order(cluster):
    o = Ordered.remote()
    refs = [(o.add if i % 2 else o.add_async).remote(i) for i in range(300)]
    actorrt.get(refs, timeout=60)
    assert actorrt.get(o.log.remote(), timeout=60) == list(range(300))


@pytest.mark.parametrize(
    "cls, method, why",
    [
        (SyncEnder, "stop", "exit_actor"),
        (SyncEnder, "sys_exit", "SystemExit(2)"),
        (SyncEnder, "builtin_exit", "SystemExit(None)"),
        (Ender, "stop", "exit_actor"),
        (Ender, "stop_async", "exit_actor"),
        # the method catches the exit: the actor must end anyway (sync and async actors)
        (SyncEnder, "stop_caught", "exit_actor() was called in stop_caught"),
        (SyncEnder, "stop_swallowed", "exit_actor() was called in stop_swallowed"),
        (Ender, "stop_caught", "exit_actor() was called in stop_caught"),
        (Ender, "stop_caught_async", "exit_actor() was called in stop_caught_async"),
        (Ender, "stop_swallowed_async", "exit_actor() was called in stop_swallowed_async"),
        (Ender, "sys_exit", "SystemExit(2)"),
        (Ender, "builtin_exit", "SystemExit(None)"),
    ],
)
def test_an_actor_that_exits_fails_its_call_and_queued_and_later_ones(cluster, cls, method, why):
    e = cls.remote()
    assert actorrt.get(e.add.remote(), timeout=60) == 1
    ending = getattr(e, method).remote()
    queued = e.add.remote()  # runs after the exit (the exit does not await first)
    for ref in (ending, queued, e.add.remote()):
        with pytest.raises(actorrt.ActorDiedError, match="exited") as info:
            actorrt.get(ref, timeout=60)
        assert why in str(info.value) and info.value.actor_id == e.actor_id
    # only the actor ended, not its process
    assert rpc.rpc_sync(e.worker, host_mod.rpc_ping, args=("alive",), timeout=30) == "alive"


def test_an_exit_fails_the_calls_running_beside_it(cluster):
    e = Ender.options(max_concurrency=2).remote()
    napping = e.nap.remote(30)
    ending = e.stop_async.remote()
    with pytest.raises(actorrt.ActorDiedError, match="exit_actor"):
        actorrt.get(ending, timeout=60)
    with pytest.raises(actorrt.ActorDiedError, match="exit_actor"):
        actorrt.get(napping, timeout=20)  # answered at the exit, not after its 30 s nap


@actorrt.actor
class EndsInInit:
    def __init__(self):
        try:
            actorrt.exit_actor()
        except SystemExit:
            pass

    def add(self):
        return 1


@actorrt.actor
class EndsInInitAsync(EndsInInit.cls):
    async def add_async(self):
        return 1


@pytest.mark.parametrize("cls", [EndsInInit, EndsInInitAsync])
def test_an_exit_caught_in_the_constructor_ends_the_actor(cluster, cls):
    e = cls.remote()
    for _ in range(2):  # the first call, and one after it
        with pytest.raises(
            actorrt.ActorDiedError, match=r"exit_actor\(\) was called in .*__init__"
        ):
            actorrt.get(e.add.remote(), timeout=60)


def test_exit_actor_in_the_driver_is_a_clear_error(cluster):
    with pytest.raises(TypeError, match="inside an actor method"):
        actorrt.exit_actor()


def test_a_timed_out_await_does_not_spoil_the_ref(cluster):
    e = Ender.remote()
    ref = e.nap.remote(1.0)

    async def main():
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(ref, 0.1)
        return await asyncio.wait_for(ref, 60)

    assert asyncio.run(main()) == 1.0
    assert actorrt.get(ref, timeout=60) == 1.0


def test_a_huge_max_concurrency_starts_threads_on_demand(tmp_path):
    # Its own cluster: on a runtime that starts every thread up front, the worker dies.
    (rep,) = run_script(
        tmp_path,
        "import threading\nimport actorrt\n",
        """
        @actorrt.actor(max_concurrency=100_000)
        class Wide:
            def __init__(self):
                self.gate = threading.Event()

            def hold(self):
                return self.gate.wait(60)

            def open(self):
                self.gate.set()

            def threads(self):
                return sum(1 for t in threading.enumerate() if t.name.startswith("Wide-"))

        with actorrt.start(num_workers=1, timeout=90) as rt:
            pids = list(rt.local_worker_pids)
            w = Wide.remote()
            held = [w.hold.remote() for _ in range(20)]  # 20 at once need 20 threads...
            actorrt.get(w.open.remote(), timeout=60)  # ...and one more opens the gate
            opened = actorrt.get(held, timeout=60)
            threads = actorrt.get(w.threads.remote(), timeout=60)
        report(pids=pids, opened=opened, threads=threads)
        """,
    )
    assert rep["opened"] == [True] * 20
    assert 21 <= rep["threads"] <= 100, rep


def _caught_while(fn):
    """What the actorrt logger said in this process while ``fn`` ran, and its value."""
    import logging

    from actorrt import refs

    refs._warned_blocking = False  # said once per process: not yet, for this test
    seen = []

    class Catch(logging.Handler):
        def emit(self, record):
            seen.append(record.getMessage())

    handler = Catch()
    logging.getLogger("actorrt").addHandler(handler)
    try:
        return fn(), seen
    finally:
        logging.getLogger("actorrt").removeHandler(handler)


@actorrt.actor
class Value:
    def value(self):
        return 7


@actorrt.actor
class Blocker:
    async def blocks(self, other):
        return _caught_while(lambda: actorrt.get(other.value.remote(), timeout=30))


@actorrt.actor
class PlainGetter:
    def gets(self, other):
        return _caught_while(lambda: actorrt.get(other.value.remote(), timeout=30))


def test_a_blocking_get_in_an_async_method_says_it_blocks_the_loop_as_ray_does(cluster):
    target = Value.remote()
    value, said = actorrt.get(Blocker.remote().blocks.remote(target), timeout=60)
    assert value == 7 and any("blocks its event loop" in line for line in said), said
    value, said = actorrt.get(PlainGetter.remote().gets.remote(target), timeout=60)
    assert value == 7 and not any("blocks its event loop" in line for line in said), said
