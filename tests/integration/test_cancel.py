"""actorrt.cancel on real processes, as ray.cancel: what it stops, what it leaves, the errors."""

import asyncio
import os
import time

import pytest

import actorrt

pytestmark = pytest.mark.timeout(120)


@actorrt.actor
class Log:
    def __init__(self):
        self.ran = []

    def add(self, x):
        self.ran.append(x)
        return x

    def slow(self, s):
        time.sleep(s)
        self.ran.append(f"slow {s}")
        return s

    def pair(self, x):
        self.ran.append(("pair", x))
        return x, -x

    def log(self):
        return self.ran


@actorrt.actor
class Waiter:
    async def wait(self, s):
        await asyncio.sleep(s)
        return "slept"

    async def shrug_off_cancel(self):
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            return "caught"
        return "slept"

    async def ping(self):
        return "pong"


@actorrt.remote
def nap(s):
    time.sleep(s)
    return s


@actorrt.remote
def loop_until_cancelled(started_file, catch=False, seconds=60):
    """Python code that runs for a minute unless interrupted: its cleanup leaves a mark."""
    open(started_file, "w").close()
    try:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            time.sleep(0.01)
        return "ran its time"
    except KeyboardInterrupt:
        if catch:
            return "caught"
        raise
    finally:
        open(started_file + ".cleaned", "w").close()


@actorrt.remote
async def naps_async(s):
    await asyncio.sleep(s)  # its loop sits in C until the timer: its task is cancelled
    return s


def _outcome_after_start(ref):
    time.sleep(0.5)  # under way by now, or queued: cancelled either way
    actorrt.cancel(ref)
    return _outcome(ref)  # 30 s at most


def _when_started(path):
    deadline = time.monotonic() + 30
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert os.path.exists(path), "the function never started"


def _outcome(ref):
    try:
        return actorrt.get(ref, timeout=30)
    except actorrt.TaskCancelledError as exc:
        return exc


def test_a_queued_call_never_runs_and_the_calls_around_it_do(cluster):
    log = Log.remote()
    first = log.slow.remote(1.0)  # the others queue behind it
    doomed, after = log.add.remote("doomed"), log.add.remote("after")
    actorrt.cancel(doomed)
    ready, _ = actorrt.wait([doomed], timeout=30)
    assert ready == [doomed]  # answered at once, while `first` still runs
    assert not first.done()
    error = _outcome(doomed)
    assert isinstance(error, actorrt.TaskCancelledError)
    assert isinstance(error, actorrt.ActorRtError)
    assert error.actor_id == log.actor_id
    assert ".add was cancelled (actorrt.cancel) before it ran" in str(error)
    assert actorrt.get([first, after], timeout=30) == [1.0, "after"]
    assert actorrt.get(log.log.remote(), timeout=30) == ["slow 1.0", "after"]
    actorrt.cancel(after)  # answered already: nothing changes
    assert actorrt.get(after, timeout=30) == "after"


def test_cancels_of_calls_queued_in_a_burst_keep_the_order_of_the_rest(burst):
    # The calls wait in this process's outbox while each cancel goes out alone: a cancel
    # may reach the actor before its call, which is then answered when it comes.
    log = Log.remote()
    actorrt.get(log.add.remote("warm"), timeout=30)
    first = log.slow.remote(1.0)
    refs = [log.add.remote(i) for i in range(20)]
    for ref in refs[::2]:
        actorrt.cancel(ref)
    outcomes = [_outcome(r) for r in refs]
    assert all(isinstance(o, actorrt.TaskCancelledError) for o in outcomes[::2]), outcomes
    assert outcomes[1::2] == list(range(1, 20, 2))
    assert actorrt.get(first, timeout=30) == 1.0
    assert actorrt.get(log.log.remote(), timeout=30) == ["warm", "slow 1.0", *range(1, 20, 2)]


def test_a_queued_call_to_an_actor_with_retries_is_cancelled_where_it_went(cluster):
    log = Log.options(max_restarts=1, max_task_retries=2).remote()
    first = log.slow.remote(1.0)
    doomed = log.add.remote("doomed")
    actorrt.cancel(doomed)
    assert isinstance(_outcome(doomed), actorrt.TaskCancelledError)
    assert actorrt.get(first, timeout=30) == 1.0
    assert actorrt.get(log.log.remote(), timeout=30) == ["slow 1.0"]


def test_a_call_waiting_for_its_ref_arguments_is_never_sent(cluster):
    log = Log.remote()
    dep = log.slow.remote(0.5)
    doomed = log.add.remote(dep)
    actorrt.cancel(doomed)
    error = _outcome(doomed)
    assert isinstance(error, actorrt.TaskCancelledError)
    assert "before it was sent (it waited for its ref arguments)" in str(error)
    # its sequence number was given up: later calls from here do not wait for it
    assert actorrt.get(log.add.remote("later"), timeout=30) == "later"
    assert actorrt.get(log.log.remote(), timeout=30) == ["slow 0.5", "later"]


def test_a_running_call_of_a_plain_actor_runs_to_its_end_and_its_get_raises_as_rays(cluster):
    log = Log.remote()
    running = log.slow.remote(1.0)
    time.sleep(0.3)
    actorrt.cancel(running)
    outcome = _outcome(running)
    assert isinstance(outcome, actorrt.TaskCancelledError), outcome
    assert ".slow was cancelled (actorrt.cancel) while it ran" in str(outcome)
    assert actorrt.get(log.log.remote(), timeout=30) == ["slow 1.0"]  # it ran to its end
    pair = log.pair.options(num_returns=2).remote(1)  # not cancelled: unchanged
    assert actorrt.get(pair, timeout=30) == [1, -1]


def test_an_async_actors_call_is_cancelled_where_it_awaits(cluster):
    waiter = Waiter.remote()
    waiting = waiter.wait.remote(60)
    assert actorrt.get(waiter.ping.remote(), timeout=30) == "pong"  # `wait` awaits by now
    began = time.monotonic()
    actorrt.cancel(waiting)
    error = _outcome(waiting)
    assert isinstance(error, actorrt.TaskCancelledError) and "while it awaited" in str(error)
    assert time.monotonic() - began < 20, "the cancel waited for the method's sleep"
    caught = waiter.shrug_off_cancel.remote()
    assert actorrt.get(waiter.ping.remote(), timeout=30) == "pong"
    actorrt.cancel(caught)
    assert actorrt.get(caught, timeout=30) == "caught"  # it caught CancelledError and returned


def test_any_ref_of_a_call_with_num_returns_cancels_the_call(cluster):
    log = Log.remote()
    first = log.slow.remote(1.0)
    plus, minus = log.pair.options(num_returns=2).remote(3)
    actorrt.cancel(minus)
    assert all(isinstance(_outcome(r), actorrt.TaskCancelledError) for r in (plus, minus))
    actorrt.get(first, timeout=30)
    assert actorrt.get(log.log.remote(), timeout=30) == ["slow 1.0"]


def test_a_queued_remote_function_call_never_runs(cluster):
    # All of a host's CPUs per call: one thread per process, so the fourth call queues.
    one_each = nap.options(num_cpus=os.cpu_count())
    refs = [one_each.remote(1.0) for _ in range(4)]
    actorrt.cancel(refs[-1])
    outcomes = [_outcome(r) for r in refs]
    assert outcomes[:3] == [1.0, 1.0, 1.0]
    assert isinstance(outcomes[3], actorrt.TaskCancelledError)
    assert str(outcomes[3]).startswith("remote function nap was cancelled")


def test_a_running_remote_function_is_interrupted_as_rays_task(cluster, tmp_path):
    """As Ray: a KeyboardInterrupt in the running function, TaskCancelledError at get."""
    started = str(tmp_path / "started")
    running = loop_until_cancelled.remote(started)
    _when_started(started)
    actorrt.cancel(running)
    outcome = _outcome(running)  # 30 s at most: the function would run for 60
    assert isinstance(outcome, actorrt.TaskCancelledError), outcome
    assert "cancelled (actorrt.cancel) while it ran" in str(outcome)
    assert os.path.exists(started + ".cleaned")  # its finally ran
    assert actorrt.get(nap.remote(0), timeout=30) == 0  # the executor goes on

    waiting = naps_async.remote(60)
    assert isinstance(_outcome_after_start(waiting), actorrt.TaskCancelledError)

    caught = str(tmp_path / "caught")
    shrugs = loop_until_cancelled.remote(caught, catch=True)
    _when_started(caught)
    actorrt.cancel(shrugs)
    assert actorrt.get(shrugs, timeout=30) == "caught"  # its value stands


@actorrt.remote
def get_of_a_slow_call(log, started_file, how):
    ref = log.slow.remote(20)  # a plain actor's method: a cancel does not stop it
    open(started_file, "w").close()
    if how == "wait":
        return actorrt.wait([ref])  # no timeout: it would wait the 20 s
    return actorrt.get(ref)


@pytest.mark.parametrize("how", ["get", "wait"])
def test_a_remote_function_waiting_in_get_is_interrupted_before_its_child_answers(
    cluster, tmp_path, how
):
    """Was: the interrupt landed only once the child answered (get waited in C)."""
    started = str(tmp_path / "started")
    running = get_of_a_slow_call.remote(Log.remote(), started, how)
    _when_started(started)
    time.sleep(0.3)  # inside its get by now
    cancelled_at = time.monotonic()
    actorrt.cancel(running)
    outcome = _outcome(running)
    assert isinstance(outcome, actorrt.TaskCancelledError), outcome
    assert time.monotonic() - cancelled_at < 10, "it waited for the child's 20 s"


def test_bad_cancels_fail_with_what_to_do(cluster):
    log = Log.remote()
    ref = log.slow.remote(0.5)
    with pytest.raises(ValueError, match=r"force=True\) is not supported.*actorrt.kill\(handle\)"):
        actorrt.cancel(ref, force=True)
    with pytest.raises(TypeError, match="expected an ObjectRef"):
        actorrt.cancel([ref])
    assert actorrt.get(ref, timeout=30) == 0.5
    put = actorrt.put(7)
    actorrt.cancel(put)  # an object, not a call: nothing to stop
    assert actorrt.get(put, timeout=30) == 7


@actorrt.actor
class Forwarder:
    def cancel(self, refs):
        try:
            actorrt.cancel(refs[0])
        except ValueError as exc:
            return str(exc)
        return "cancelled"


def test_only_the_process_that_made_the_call_can_cancel_it(cluster):
    log = Log.remote()
    pending = log.slow.remote(1.0)
    said = actorrt.get(Forwarder.remote().cancel.remote([pending]), timeout=30)
    assert "only the process that made the call can cancel it" in said
    assert actorrt.get(pending, timeout=30) == 1.0


# -- recursive cancel and is_canceled(), as Ray's ----------------------------------------


@actorrt.actor
class Parent:
    def __init__(self):
        self.last = None  # what the last until_cancelled noticed, and its child's ref

    def wait_on_child(self, started):
        return actorrt.get(loop_until_cancelled.remote(started), timeout=90)

    def until_cancelled(self, started, child_started, child_seconds):
        child = loop_until_cancelled.remote(child_started, seconds=child_seconds)
        open(started, "w").close()
        context = actorrt.get_runtime_context()
        deadline = time.monotonic() + 60
        while not context.is_canceled() and time.monotonic() < deadline:
            time.sleep(0.01)
        # Its get raises TaskCancelledError (as Ray's): what it saw is kept for last_run.
        self.last = (context.is_canceled(), [child])
        return self.last

    def last_run(self):
        return self.last

    def is_canceled(self):
        return actorrt.get_runtime_context().is_canceled()


@actorrt.actor
class AsyncParent:
    async def await_child(self, started):
        return await loop_until_cancelled.remote(started)


@actorrt.remote
def nest(started):
    """A function whose call makes another: cancelling it reaches the grandchild."""
    return actorrt.get(loop_until_cancelled.remote(started), timeout=90)


def _cleaned_within(started, timeout=30):
    deadline = time.monotonic() + timeout
    while not os.path.exists(started + ".cleaned") and time.monotonic() < deadline:
        time.sleep(0.02)
    return os.path.exists(started + ".cleaned")


def test_a_cancelled_method_takes_the_calls_it_made_with_it(cluster, tmp_path):
    """As Ray's recursive=True: a plain actor's method blocked in get() of its child."""
    started = str(tmp_path / "child")
    running = Parent.remote().wait_on_child.remote(started)
    _when_started(started)
    actorrt.cancel(running)
    outcome = _outcome(running)  # 30 s at most: the child would run for 60
    assert isinstance(outcome, actorrt.TaskCancelledError), outcome
    assert ".wait_on_child was cancelled (actorrt.cancel) while it ran" in str(outcome)
    assert os.path.exists(started + ".cleaned")  # the child was interrupted


def test_a_recursive_cancel_reaches_grandchildren(cluster, tmp_path):
    started = str(tmp_path / "grandchild")
    top = nest.remote(started)
    _when_started(started)
    actorrt.cancel(top)
    assert isinstance(_outcome(top), actorrt.TaskCancelledError)
    assert _cleaned_within(started), "the grandchild ran on"


def test_an_async_methods_children_are_cancelled_with_it(cluster, tmp_path):
    started = str(tmp_path / "child")
    running = AsyncParent.remote().await_child.remote(started)
    _when_started(started)
    actorrt.cancel(running)
    outcome = _outcome(running)
    assert isinstance(outcome, actorrt.TaskCancelledError) and "while it awaited" in str(outcome)
    assert _cleaned_within(started), "the call it awaited ran on"


def test_a_plain_actors_method_reads_its_cancel_and_a_cancel_not_recursive_spares_children(
    cluster, tmp_path
):
    parent = Parent.remote()
    assert actorrt.get(parent.is_canceled.remote(), timeout=30) is False
    with pytest.raises(RuntimeError, match="only inside an actor's method or a remote function"):
        actorrt.get_runtime_context().is_canceled()  # the driver's own code

    started, child = str(tmp_path / "a"), str(tmp_path / "a-child")
    running = parent.until_cancelled.remote(started, child, 3)
    _when_started(started)
    actorrt.cancel(running, recursive=False)
    assert isinstance(_outcome(running), actorrt.TaskCancelledError)
    noticed, (child_ref,) = actorrt.get(parent.last_run.remote(), timeout=30)
    assert noticed is True  # it stopped early, as it chose to
    assert actorrt.get(child_ref, timeout=30) == "ran its time"  # the child was spared
    assert actorrt.get(parent.is_canceled.remote(), timeout=30) is False  # a new call

    started, child = str(tmp_path / "b"), str(tmp_path / "b-child")
    running = parent.until_cancelled.remote(started, child, 60)
    _when_started(started)
    _when_started(child)
    actorrt.cancel(running)  # recursive: the child is interrupted
    assert isinstance(_outcome(running), actorrt.TaskCancelledError)
    noticed, (child_ref,) = actorrt.get(parent.last_run.remote(), timeout=30)
    assert noticed is True
    assert isinstance(_outcome(child_ref), actorrt.TaskCancelledError)


def test_a_call_waiting_for_its_ref_arguments_fails_at_its_cancel_not_when_they_come(
    cluster,
):
    """As in Ray, get raises TaskCancelledError at once. Was: only once the ref arguments
    it waited for were ready (here 3 s later: a get with a 1.5 s timeout timed out)."""
    log = Log.remote()
    dep = log.slow.remote(3.0)
    doomed = log.add.remote(dep)
    doomed_function = nap.remote(dep)
    actorrt.cancel(doomed)
    actorrt.cancel(doomed_function)
    for ref in (doomed, doomed_function):
        with pytest.raises(actorrt.TaskCancelledError, match="before it was sent"):
            actorrt.get(ref, timeout=1.5)
    assert actorrt.get(dep, timeout=30) == 3.0
    # Its number was still given up once the argument came: a later call does not wait.
    assert actorrt.get(log.add.remote("later"), timeout=30) == "later"
    assert actorrt.get(log.log.remote(), timeout=30) == ["slow 3.0", "later"]
