"""The core runtime on a real 2-worker local cluster: calls, ordering, errors, lifetime."""

import asyncio
import os
import threading
import time

import pytest
import torch
from scripts import run_script

import actorrt

pytestmark = pytest.mark.timeout(180)


@actorrt.actor
class Counter:
    def __init__(self, start=0):
        self.n = start

    def add(self, k=1):
        self.n += k
        return self.n

    def value(self):
        return self.n

    def fail(self, msg):
        raise ValueError(msg)

    def sleep(self, s):
        time.sleep(s)
        return s


@actorrt.actor
class Recorder:
    def __init__(self):
        self.seen = []

    def record(self, caller, i):
        self.seen.append((caller, i))

    def log(self):
        return list(self.seen)


@actorrt.actor
class Caller:
    def flood(self, recorder, n):
        refs = [recorder.record.remote("actor", i) for i in range(n)]
        actorrt.get(refs, timeout=120)
        return n


@actorrt.actor(max_concurrency=1)
class Overlap:
    def __init__(self):
        self.lock = threading.Lock()
        self.now = 0
        self.peak = 0

    def work(self, s):
        with self.lock:
            self.now += 1
            self.peak = max(self.peak, self.now)
        time.sleep(s)
        with self.lock:
            self.now -= 1

    def peak_seen(self):
        return self.peak


@actorrt.actor
class AsyncOverlap:
    def __init__(self):
        self.now = 0
        self.peak = 0
        self.loop_threads = set()

    async def work(self, s):
        self.loop_threads.add(threading.get_ident())
        self.now += 1
        self.peak = max(self.peak, self.now)
        await asyncio.sleep(s)
        self.now -= 1
        return s

    def peak_seen(self):
        return self.peak, len(self.loop_threads)


@actorrt.actor(max_concurrency=2)
class PingPong:
    def __init__(self):
        self.pongs = 0

    def start(self, other, me):
        # calls `other`, which calls back into this actor (`me`) before answering
        return actorrt.get(other.bounce.remote(me), timeout=60)

    def pong(self):
        self.pongs += 1
        return "pong"


@actorrt.actor
class Bouncer:
    def bounce(self, back):
        return actorrt.get(back.pong.remote(), timeout=60) + "!"


@actorrt.actor
class Echo:
    def echo(self, x):
        return x

    def checksum(self, t):
        return t.numel(), int(t.view(torch.uint8).sum()) if t.numel() else 0

    def make(self, n):
        return torch.arange(n, dtype=torch.int64)


@actorrt.actor
class Spawner:
    def make_counter(self, start):
        return Counter.remote(start)


@actorrt.actor
class Broken:
    def __init__(self):
        raise KeyError("missing config")

    def ping(self):
        return "never"


class NotPicklable:
    def __reduce__(self):
        raise TypeError("NotPicklable cannot be pickled")


def test_calls_return_values(cluster):
    c = Counter.remote(10)
    assert actorrt.get(c.add.remote(5), timeout=30) == 15
    assert actorrt.get([c.add.remote(), c.value.remote()], timeout=30) == [16, 16]
    assert actorrt.get(Counter.options(name=None).remote().add.remote(2), timeout=30) == 2


def test_per_caller_order_two_callers(cluster):
    rec = Recorder.remote()
    caller = Caller.remote()
    n = 1000
    flood = caller.flood.remote(rec, n)
    refs = [rec.record.remote("driver", i) for i in range(n)]
    actorrt.get(refs, timeout=120)
    assert actorrt.get(flood, timeout=120) == n
    log = actorrt.get(rec.log.remote(), timeout=30)
    assert len(log) == 2 * n
    for who in ("driver", "actor"):
        assert [i for c, i in log if c == who] == list(range(n))


def test_max_concurrency_one_runs_one_at_a_time(cluster):
    a = Overlap.remote()
    actorrt.get([a.work.remote(0.05) for _ in range(6)], timeout=60)
    assert actorrt.get(a.peak_seen.remote(), timeout=30) == 1


def test_max_concurrency_three(cluster):
    a = Overlap.options(max_concurrency=3).remote()
    actorrt.get([a.work.remote(0.4) for _ in range(6)], timeout=60)
    assert actorrt.get(a.peak_seen.remote(), timeout=30) == 3


def test_async_methods_run_on_one_event_loop(cluster):
    a = AsyncOverlap.options(max_concurrency=4).remote()
    assert actorrt.get([a.work.remote(0.3) for _ in range(8)], timeout=60) == [0.3] * 8
    peak, loop_threads = actorrt.get(a.peak_seen.remote(), timeout=30)
    assert peak == 4
    assert loop_threads == 1


def test_nested_and_callback_calls(cluster):
    a = PingPong.remote()
    b = Bouncer.remote()
    assert actorrt.get(a.start.remote(b, a), timeout=60) == "pong!"


def test_actor_creates_actor_and_returns_its_handle(cluster):
    s = Spawner.remote()
    child = actorrt.get(s.make_counter.remote(7), timeout=30)
    assert isinstance(child, actorrt.ActorHandle)
    assert actorrt.get(child.add.remote(1), timeout=30) == 8


def test_object_ref_argument_is_resolved_first(cluster):
    c = Counter.remote()
    e = Echo.remote()
    slow = c.sleep.remote(0.3)
    assert actorrt.get(e.echo.remote(slow), timeout=30) == 0.3
    assert actorrt.get(e.echo.remote(x=c.add.remote(4)), timeout=30) == 4


def test_failed_argument_ref_fails_the_call_and_keeps_order(cluster):
    c = Counter.remote()
    bad = c.fail.remote("upstream")
    e = Echo.remote()
    ref = e.echo.remote(bad)
    with pytest.raises(actorrt.ActorError, match="upstream"):
        actorrt.get(ref, timeout=30)
    # the skipped seq must not block the next call from this caller
    assert actorrt.get(e.echo.remote(1), timeout=30) == 1


def test_wait_returns_ready_and_not_ready(cluster):
    c = Counter.options(max_concurrency=2).remote()
    fast = c.sleep.remote(0.0)
    slow = c.sleep.remote(5.0)
    ready, not_ready = actorrt.wait([slow, fast], num_returns=1, timeout=30)
    assert ready == [fast] and not_ready == [slow]
    ready, not_ready = actorrt.wait([slow], timeout=0.1)
    assert ready == [] and not_ready == [slow]
    with pytest.raises(ValueError):
        actorrt.wait([fast, fast])


def test_await_object_ref(cluster):
    c = Counter.remote()

    async def main():
        return await c.add.remote(3)

    assert asyncio.run(main()) == 3


def test_a_methods_exception_is_caught_by_its_own_class_as_in_ray(cluster):
    c = Counter.remote(1)
    with pytest.raises(ValueError, match="boom") as info:  # ActorError(ValueError)
        actorrt.get(c.fail.remote("boom"), timeout=30)
    assert isinstance(info.value, actorrt.ActorError) and info.value.actor_id == c.actor_id
    assert type(info.value.cause) is ValueError


def test_get_without_timeout_waits_on_the_reply_directly(cluster):
    # no timeout: `get` takes the direct road (waits on the torch future); the module's
    # pytest timeout bounds these waits
    c = Counter.remote(1)
    assert actorrt.get(c.add.remote(1)) == 2
    assert actorrt.get([c.add.remote(1), c.value.remote()]) == [3, 3]
    with pytest.raises(actorrt.ActorError, match="direct") as info:
        actorrt.get(c.fail.remote("direct"))
    assert isinstance(info.value.cause, ValueError)
    pending = c.sleep.remote(1.0)
    actorrt.kill(c)
    with pytest.raises(actorrt.ActorDiedError, match="killed"):
        actorrt.get(pending)


def test_future_made_before_or_after_the_reply(cluster):
    # A ref's concurrent.futures.Future is made on demand; both orders must complete it.
    c = Counter.remote()
    early = c.sleep.remote(0.3)
    fut = early.future()  # made while the call is in flight
    assert not early.done()
    late = c.add.remote(5)
    assert actorrt.get(late) == 5
    assert late.done() and late.future().result(timeout=1) == 5  # made after the reply
    assert fut.result(timeout=30) == 0.3 and early.done()
    failing = c.fail.remote("later")
    actorrt.get(c.value.remote())  # the failure has arrived by now
    with pytest.raises(actorrt.ActorError, match="later"):
        failing.future().result(timeout=1)


@actorrt.actor
class Draw:
    def draw(self):
        import numpy as np

        return int(np.random.randint(1 << 62)), os.getpid()


def test_workers_draw_different_random_numbers(cluster):
    # Workers are forked from one zygote: numpy's global generator must not be shared.
    actors = [Draw.remote() for _ in range(6)]
    draws = dict((pid, value) for value, pid in actorrt.get([a.draw.remote() for a in actors]))
    assert len(draws) >= 2, "the actors did not spread over several workers"
    assert len(set(draws.values())) == len(draws), draws


def test_a_full_collection_in_a_worker_leaves_the_zygotes_pages_shared(tmp_path):
    """The zygote freezes its objects before forking, so a collection in a worker does
    not write to them: unfrozen, each worker copied some 35 MB of the zygote's pages.
    In a cluster of its own: a worker of the shared one holds what earlier tests made
    there (one run counted 187 MB private after the objects tests), whatever the zygote."""
    (rep,) = run_script(
        tmp_path,
        "import actorrt\n",
        """
        @actorrt.actor
        class Collect:
            def collect(self):
                import gc
                gc.collect()
                with open("/proc/self/smaps_rollup") as f:
                    rows = dict(line.split()[:2] for line in f if line.endswith(" kB\\n"))
                dirty = int(rows["Private_Dirty:"]), int(rows["Shared_Dirty:"])
                return dirty, gc.get_freeze_count(), gc.isenabled()

        rt = actorrt.start(num_workers=1, timeout=90)
        report(pids=list(rt.local_worker_pids))
        (private, shared), frozen, enabled = actorrt.get(
            Collect.remote().collect.remote(), timeout=60
        )
        report(private=private, shared=shared, frozen=frozen, enabled=enabled)
        actorrt.shutdown()
        """,
        timeout=120,
    )[-1:]
    assert rep["enabled"]
    assert rep["frozen"] > 50_000, (
        f"only {rep['frozen']} objects frozen: importing torch makes more"
    )
    assert rep["private"] < 0.35 * rep["shared"], (
        f"{rep['private']} kB copied, {rep['shared']} kB still shared"
    )


@actorrt.actor(max_concurrency=2)
class Gate:
    def __init__(self):
        self.event = threading.Event()

    def hold(self):
        return self.event.wait(60)

    def open(self):
        self.event.set()

    def ping(self, x):
        return x

    def unsendable(self):
        return threading.Lock()  # a lambda would travel: cloudpickle carries it

    def replies_batched(self):
        from actorrt.runtime.runtime import current

        return current().replies.outbox.batches_sent


def test_a_burst_keeps_order_and_its_replies_come_in_batches_too(cluster, burst):
    c = Counter.remote()
    refs = [c.add.remote(1) for _ in range(500)]
    assert actorrt.get(refs, timeout=60) == list(range(1, 501))
    g = Gate.remote()
    actorrt.get([g.ping.remote(i) for i in range(300)], timeout=60)
    assert actorrt.get(g.replies_batched.remote(), timeout=30) > 0


def test_a_reply_in_a_batch_does_not_wait_for_a_slow_call_of_the_same_batch(cluster, burst):
    g = Gate.remote()
    actorrt.get(g.ping.remote(0), timeout=30)
    before = burst.batches_sent
    held = g.hold.remote()  # runs until we open the gate, which we do only after...
    after = g.ping.remote(2)
    more = [g.ping.remote(i) for i in range(3, 6)]
    time.sleep(0.2)  # the flusher has sent everything by now
    if burst.batches_sent - before > 1:  # the flusher woke between the calls
        actorrt.get(g.open.remote(), timeout=30)
        pytest.skip("the calls went out in several sends; one batch was not reached")
    assert actorrt.get(after, timeout=20) == 2  # ...this reply arrived on its own
    assert not held.done()
    actorrt.get(g.open.remote(), timeout=30)
    assert actorrt.get([held, *more], timeout=30) == [True, 3, 4, 5]


def test_unpicklable_values_in_a_batch_fail_only_their_own_call(cluster, burst):
    e = Echo.remote()
    g = Gate.remote()
    refs = [e.echo.remote(i) for i in range(5)]
    with pytest.raises(TypeError, match="cannot be sent"):  # packed before it queues
        e.echo.remote(NotPicklable())
    refs += [e.echo.remote(i) for i in range(5, 10)]
    assert actorrt.get(refs, timeout=30) == list(range(10))
    unsendable = [g.ping.remote(0), g.unsendable.remote(), g.ping.remote(1)]
    assert actorrt.get(unsendable[0], timeout=30) == 0
    with pytest.raises(actorrt.ActorError, match="cannot be sent back"):
        actorrt.get(unsendable[1], timeout=30)
    assert actorrt.get(unsendable[2], timeout=30) == 1


def test_method_error_keeps_actor_usable(cluster):
    c = Counter.remote()
    with pytest.raises(actorrt.ActorError) as info:
        actorrt.get(c.fail.remote("boom"), timeout=30)
    assert isinstance(info.value.cause, ValueError)
    assert "boom" in str(info.value)
    assert "in fail" in info.value.remote_traceback
    assert actorrt.get(c.add.remote(1), timeout=30) == 1


def test_unknown_method_fails_at_call_site(cluster):
    c = Counter.remote()
    with pytest.raises(AttributeError, match="has no method 'nope'.*add, fail, sleep, value"):
        c.nope.remote()


def test_unpicklable_argument_fails_at_call_site_and_cluster_goes_on(cluster):
    e = Echo.remote()
    with pytest.raises(TypeError, match="cannot be sent"):
        e.echo.remote(NotPicklable())
    assert actorrt.get(e.echo.remote("after"), timeout=30) == "after"


def test_get_timeout(cluster):
    c = Counter.remote()
    ref = c.sleep.remote(2.0)
    with pytest.raises(actorrt.GetTimeoutError, match="not ready after 0.2"):
        actorrt.get(ref, timeout=0.2)
    assert actorrt.get(ref, timeout=30) == 2.0


def test_get_of_a_list_raises_a_failure_without_waiting_for_slower_calls_before_it(cluster):
    slow, failing = Counter.remote(), Counter.remote()
    refs = [slow.sleep.remote(6.0), failing.fail.remote("boom")]
    # Before the fix the slow call hid the failure behind the timeout.
    with pytest.raises(actorrt.ActorError, match="boom"):
        actorrt.get(refs, timeout=3)
    later = [slow.add.remote(2), failing.add.remote(3)]  # queued behind the sleep
    with pytest.raises(actorrt.GetTimeoutError, match="Counter.add.*not ready after 0.2"):
        actorrt.get(later, timeout=0.2)
    assert actorrt.get(later, timeout=30) == [2, 3]  # in the list's order
    actorrt.kill(slow)
    actorrt.kill(failing)


def test_get_of_a_list_raises_a_failure_already_there_at_once(cluster):
    slow, failing = Counter.remote(), Counter.remote()
    failed = failing.fail.remote("boom")
    ready, _ = actorrt.wait([failed], timeout=30)
    assert ready == [failed]
    for read_before in (False, True):
        pending = slow.sleep.remote(6.0)
        # With no timeout: before the fix the get waited for the slow call first.
        with pytest.raises(actorrt.ActorError, match="boom"):
            actorrt.get([pending, failed])
        ready, _ = actorrt.wait([pending], timeout=0)
        assert ready == [], f"get waited for the slow call (failure read before: {read_before})"
        assert actorrt.get(pending, timeout=30) == 6.0
    actorrt.kill(slow)
    actorrt.kill(failing)


def test_constructor_error_reports_actor_died(cluster):
    bad = Broken.remote()
    with pytest.raises(actorrt.ActorDiedError, match="failed in __init__") as info:
        actorrt.get(bad.ping.remote(), timeout=30)
    assert "KeyError: 'missing config'" in str(info.value)


def test_kill_fails_pending_and_later_calls(cluster):
    c = Counter.remote()
    running = c.sleep.remote(3.0)
    queued = c.add.remote(1)
    time.sleep(0.3)
    actorrt.kill(c)
    for ref in (running, queued, c.add.remote(1)):
        with pytest.raises(actorrt.ActorDiedError, match="killed"):
            actorrt.get(ref, timeout=30)


def test_named_actors(cluster):
    Counter.options(name="shared-counter").remote(100)
    h = actorrt.get_actor("shared-counter")
    assert actorrt.get(h.add.remote(1), timeout=30) == 101
    with pytest.raises(ValueError, match="already exists"):
        Counter.options(name="shared-counter").remote()
    with pytest.raises(ValueError, match="no actor named 'missing'"):
        actorrt.get_actor("missing")
    actorrt.kill(h)
    with pytest.raises(ValueError):
        actorrt.get_actor("shared-counter")


@pytest.mark.parametrize("nbytes", [1, 1 << 10, 1 << 20, 64 << 20])
def test_tensors_arrive_intact(cluster, nbytes):
    e = Echo.remote()
    t = torch.randint(0, 256, (nbytes,), dtype=torch.uint8)
    n, total = actorrt.get(e.checksum.remote(t), timeout=120)
    assert (n, total) == (nbytes, int(t.sum()))
    back = actorrt.get(e.echo.remote(t), timeout=120)
    assert torch.equal(back, t)


def test_nested_containers_of_tensors(cluster):
    e = Echo.remote()
    batch = {
        "obs": torch.rand(4, 3),
        "pairs": [(torch.arange(3), torch.ones(2, dtype=torch.bool))],
        "meta": {"step": 7, "rew": torch.tensor([1.5])},
    }
    back = actorrt.get(e.echo.remote(batch), timeout=30)
    assert torch.equal(back["obs"], batch["obs"])
    assert torch.equal(back["pairs"][0][0], batch["pairs"][0][0])
    assert torch.equal(back["pairs"][0][1], batch["pairs"][0][1])
    assert back["meta"]["step"] == 7 and torch.equal(back["meta"]["rew"], batch["meta"]["rew"])
    assert torch.equal(actorrt.get(e.make.remote(5), timeout=30), torch.arange(5))


def _alive(worker, actor_id):
    """Whether the actor still lives in its process (the status query lists them)."""
    import torch.distributed.rpc as rpc

    from actorrt.runtime.status import rpc_process_stats

    return actor_id in rpc.rpc_sync(worker, rpc_process_stats)["calls"]


def test_unnamed_actor_is_released_when_last_handle_goes(cluster):
    import gc

    c = Counter.remote()
    assert actorrt.get(c.add.remote(1), timeout=30) == 1
    worker, actor_id = c.worker, c.actor_id
    assert _alive(worker, actor_id)
    del c
    gc.collect()
    deadline = time.monotonic() + 20
    while _alive(worker, actor_id) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(worker, actor_id)


@actorrt.actor
class Taker:
    def take(self, message):
        return True

    def back(self, handles):
        return [handles, torch.zeros(2)]  # the handle leaves in a reply, a tensor after it


@pytest.mark.parametrize("road", ["arguments", "reply"])
def test_a_handle_that_travelled_beside_a_tensor_does_not_keep_the_actor(cluster, road):
    # Before: a handle before a small tensor in one call made a second fork of its RRef
    # (the quick pickler reached it before falling back to torch's), never delivered;
    # and the actor thread kept its last call, reply and all, until its next call.
    import gc

    taker = Taker.remote()
    c = Counter.remote()
    worker, actor_id = c.worker, c.actor_id
    if road == "arguments":
        assert actorrt.get(taker.take.remote({"who": c, "obs": torch.zeros(4)}), timeout=30)
    else:
        back = actorrt.get(taker.back.remote([c]), timeout=30)
        assert back[0][0].actor_id == actor_id
        del back
    del c
    gc.collect()
    deadline = time.monotonic() + 40  # past the RRef keeper's holds (SENT_HOLD_S)
    while _alive(worker, actor_id) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _alive(worker, actor_id)


@pytest.mark.parametrize("read", ["get", "wait"])
def test_refs_kept_after_their_calls_answered_do_not_keep_the_actor(cluster, read):
    import gc

    c = Counter.remote()
    refs = [c.add.remote(1), c.add.remote(2)]  # kept, as a list of results often is
    if read == "get":
        assert actorrt.get(refs, timeout=30) == [1, 3]
    else:
        assert len(actorrt.wait(refs, num_returns=2, timeout=30)[0]) == 2
    worker, actor_id = c.worker, c.actor_id
    del c
    gc.collect()
    deadline = time.monotonic() + 20
    while _alive(worker, actor_id) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(worker, actor_id)  # before the fix: alive while the refs lived
    if read == "get":
        assert actorrt.get(refs, timeout=30) == [1, 3]  # the values stay good


def test_handle_passed_to_actor_keeps_actor_alive(cluster):
    import gc

    holder = Echo.remote()
    c = Counter.remote(41)
    stored = holder.echo.remote(c)  # the reply is a fork of the handle
    back = actorrt.get(stored, timeout=30)
    del c, stored
    gc.collect()
    time.sleep(0.5)
    assert _alive(back.worker, back.actor_id)
    assert actorrt.get(back.add.remote(1), timeout=30) == 42


@actorrt.actor
class RRefProbe:
    """Reports what the RRef keeper of its process does with a handle it receives."""

    def __init__(self):
        self.last = None

    def arrivals(self):
        from actorrt.runtime import rref_keeper

        return rref_keeper.arrivals()

    def take(self, handle):
        self.last = handle._rref  # the RRef that arrived (kept here only to ask about it)
        return handle.actor_id

    def holds_last(self):
        from actorrt.runtime import rref_keeper

        return rref_keeper.holds(self.last)


def test_a_handle_that_arrives_is_held_by_the_rref_keeper_until_its_owner_confirmed_it(cluster):
    """A handle's RRef is held by the process's RRef keeper from its arrival (on torch's
    RPC thread, before any of actorrt's code runs), and let go once its owner confirmed
    it: so torch never drops a user RRef's last reference on an RPC thread, the deadlock
    of a process that froze until the heartbeat marked it dead (rref_keeper)."""
    probe = RRefProbe.remote()
    c = Counter.remote(1)
    before = actorrt.get(probe.arrivals.remote(), timeout=30)
    assert actorrt.get(probe.take.remote(c), timeout=30) == c.actor_id
    assert actorrt.get(probe.arrivals.remote(), timeout=30) >= before + 1
    deadline = time.monotonic() + 20
    while actorrt.get(probe.holds_last.remote(), timeout=30) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not actorrt.get(probe.holds_last.remote(), timeout=30), "never let go"
    assert actorrt.get(c.add.remote(1), timeout=30) == 2  # the driver's handle still works


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without GPUs")
def test_gpu_actor_on_a_cpu_cluster_is_a_placement_error(cluster):
    with pytest.raises(actorrt.PlacementError, match="no process that may host it has a GPU"):
        Counter.options(num_gpus=1).remote()
    assert actorrt.get(Counter.remote(1).add.remote(1), timeout=30) == 2  # cluster goes on


@actorrt.actor
class Maker:
    def attempt(self, what):
        try:
            if what == "gpu":
                Counter.options(num_gpus=1).remote()
            else:
                Counter.options(name=what).remote()
        except Exception as exc:
            return type(exc).__name__, str(exc)
        return "no error", ""


def test_an_actor_creating_actors_gets_the_errors_the_driver_gets(cluster):
    # Raised on rank 0's directory and sent back: not torch's RuntimeError wrapping it.
    maker = Maker.remote()
    kind, message = actorrt.get(maker.attempt.remote("gpu"), timeout=30)
    assert kind == "PlacementError", (kind, message)
    assert message.startswith("Counter") and "no process that may host it has a GPU" in message
    keep = Counter.options(name="made-once").remote()
    kind, message = actorrt.get(maker.attempt.remote("made-once"), timeout=30)
    assert kind == "ValueError" and message.startswith("an actor named 'made-once'"), message
    actorrt.kill(keep)


def test_second_start_is_an_error(cluster):
    with pytest.raises(RuntimeError, match="already started"):
        actorrt.start(num_workers=1)


def test_bad_start_arguments():
    with pytest.raises(ValueError, match="transport"):
        actorrt.start(transport="carrier-pigeon")
    with pytest.raises(ValueError, match="tcp://HOST:PORT"):
        actorrt.start(init_method="http://x", world_size=2)


class _CallsItself:
    def g(self):
        return 2

    def via_handle(self):
        me = actorrt.get_runtime_context().current_actor
        return actorrt.get([me.g.remote()], timeout=30)[0]

    def send_later(self):
        self.pending = actorrt.get_runtime_context().current_actor.g.remote()
        return True

    def read_later(self):
        return actorrt.get(self.pending, timeout=30)

    def wait_on_itself(self):
        return actorrt.wait([actorrt.get_runtime_context().current_actor.g.remote()])

    def wait_for_either(self, other):
        me = actorrt.get_runtime_context().current_actor
        ready, _ = actorrt.wait([me.g.remote(), other.g.remote()], num_returns=1)
        return len(ready)


CallsItself = actorrt.actor(_CallsItself)


class _RoomyCallsItself(_CallsItself):
    pass


RoomyCallsItself = actorrt.actor(max_concurrency=2)(_RoomyCallsItself)


@actorrt.actor
class AsyncCallsItself:
    async def g(self):
        return 2

    async def blocking(self):
        return actorrt.get(actorrt.get_runtime_context().current_actor.g.remote(), timeout=30)

    async def awaiting(self):
        return await actorrt.get_runtime_context().current_actor.g.remote()


def test_a_method_that_gets_a_call_to_its_own_busy_actor_fails_at_once(cluster):
    """Was (as in Ray): it waited for ever, or until its timeout, for a call queued behind
    itself. Now get raises, naming the fix; where that call can run (two threads, an
    await, a call that already ran) get waits and returns as before."""
    a = CallsItself.remote()
    start = time.monotonic()
    with pytest.raises(RuntimeError, match="would never end.*only thread.*self.method"):
        actorrt.get(a.via_handle.remote(), timeout=60)
    assert time.monotonic() - start < 20  # not the 30 s of its own get's timeout
    assert actorrt.get(a.g.remote(), timeout=30) == 2  # the actor lives on
    with pytest.raises(RuntimeError, match=r"actorrt.wait\(\) in .* would never end"):
        actorrt.get(a.wait_on_itself.remote(), timeout=60)
    # another actor's call can come: wait waits for it
    assert actorrt.get(a.wait_for_either.remote(CallsItself.remote()), timeout=60) == 1
    assert actorrt.get(a.send_later.remote(), timeout=30)
    assert actorrt.get(a.read_later.remote(), timeout=30) == 2  # it ran before: no error
    assert actorrt.get(RoomyCallsItself.remote().via_handle.remote(), timeout=60) == 2
    s = AsyncCallsItself.remote()
    with pytest.raises(RuntimeError, match="event loop.*await the ref"):
        actorrt.get(s.blocking.remote(), timeout=60)
    assert actorrt.get(s.awaiting.remote(), timeout=30) == 2
