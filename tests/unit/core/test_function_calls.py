"""The caller's side of remote functions without processes: choosing, retrying, lending."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from actorrt.errors import ActorDiedError, PlacementError, TaskCancelledError
from actorrt.placement.functions import FunctionSpot
from actorrt.placement.resources import Resources
from actorrt.runtime.functions import FunctionCall, FunctionRoutes, Shape
from actorrt.runtime.protocol import LocalFailure
from actorrt.runtime.threads import ActorThreads, lender, may_lend

SHAPE = Shape(None, Resources(1, 0))


class FakeRoute:
    """Records sends; each gets a torch future the test completes."""

    def __init__(self, spots):
        self.spots = spots
        self.asked = 0
        self.down: set[str] = set()
        self.sent: list[tuple[str, str, tuple, torch.futures.Future]] = []
        self.unreachable: list[str] = []
        self.stopped = threading.Event()
        self.seqs: dict[tuple[str, str], int] = {}
        self.sent_event = threading.Condition()
        self.cancels: list[tuple[str, str, int, bool]] = []
        self.skips: list[tuple[str, str, int]] = []  # (executor, worker, seq) given up

    def function_spots(self, shape):
        self.asked += 1
        return self.spots

    def is_down(self, worker):
        return worker in self.down

    def seq_at(self, actor_id, worker):
        n = self.seqs.get((actor_id, worker), 0)
        self.seqs[(actor_id, worker)] = n + 1
        return n

    def send(self, target, seq, method, args, kwargs, slot, *, raise_now, seq_worker=None):
        fut = torch.futures.Future()
        with self.sent_event:
            self.sent.append((target._worker, target._actor_id, args, fut))
            self.sent_event.notify_all()
        slot.attach(fut, target._worker, None, seq)

    def worker_unreachable(self, worker):
        self.unreachable.append(worker)

    def cancel_call(self, worker, actor_id, seq, recursive):
        self.cancels.append((worker, actor_id, seq, recursive))

    def skip_at(self, actor_id, worker, seq):
        self.skips.append((actor_id, worker, seq))

    def wait_sent(self, n, timeout=10):
        with self.sent_event:
            assert self.sent_event.wait_for(lambda: len(self.sent) >= n, timeout), self.sent


def spots(*workers, threads=1):
    return tuple(FunctionSpot(w, f"fn/{threads}", threads) for w in workers)


def test_calls_go_to_the_least_busy_executor_per_thread():
    route = FakeRoute((FunctionSpot("a", "fn/1", 1), FunctionSpot("b", "fn/3", 3)))
    routes = FunctionRoutes(route)
    chosen = [routes.choose(SHAPE).worker for _ in range(8)]
    assert chosen.count("b") == 6 and chosen.count("a") == 2, chosen
    assert route.asked == 1  # the table is asked for once
    for _ in range(6):
        routes.answered(FunctionSpot("b", "fn/3", 3))
    assert routes.choose(SHAPE).worker == "b"


def test_processes_down_are_passed_over_and_the_table_asked_again():
    route = FakeRoute(spots("a", "b"))
    routes = FunctionRoutes(route)
    route.down = {"a"}
    assert {routes.choose(SHAPE).worker for _ in range(4)} == {"b"}
    route.down = set()
    assert {routes.choose(SHAPE, avoid="b").worker for _ in range(4)} == {"a"}
    route.down = {"a", "b"}
    with pytest.raises(PlacementError, match="every process that can run it is down"):
        routes.choose(SHAPE)
    assert route.asked >= 2  # asked again before giving up: a process may have come back


def make_call(route, retries):
    routes = FunctionRoutes(route)
    call = FunctionCall(routes, route, SHAPE, "remote function f", "f", retries)
    return routes, call


def test_a_call_whose_process_dies_is_sent_again_elsewhere():
    route = FakeRoute(spots("a", "b"))
    routes, call = make_call(route, retries=2)
    call.send(("k", b"blob", 5), {}, True)
    first_worker, _, args, fut = route.sent[0]
    fut.set_exception(RuntimeError("connection reset by peer"))  # the process died
    route.wait_sent(2)
    second_worker, _, args2, fut2 = route.sent[1]
    assert second_worker != first_worker and args2 == args
    assert route.unreachable == [first_worker]  # the driver hears of it
    fut2.set_result((None, [(0, 25)]))
    assert call.reply.wait() == (None, [(0, 25)])
    routes.close()


def test_retries_used_up_or_none_fail_with_actor_died_error():
    route = FakeRoute(spots("a", "b", "c"))
    routes, call = make_call(route, retries=1)
    call.send(("k", b"", 1), {}, True)
    route.sent[0][3].set_exception(RuntimeError("eof"))
    route.wait_sent(2)
    route.sent[1][3].set_exception(RuntimeError("eof"))
    with pytest.raises(ActorDiedError, match="retries are used up \\(max_retries=1\\)"):
        _reply(call)
    routes.close()
    route = FakeRoute(spots("a"))
    routes, call = make_call(route, retries=0)
    call.send(("k", b"", 1), {}, True)
    route.sent[0][3].set_exception(RuntimeError("eof"))
    with pytest.raises(ActorDiedError, match=r"remote function f: the process running it, 'a'"):
        _reply(call)
    assert len(route.sent) == 1


def test_a_reply_that_cannot_be_read_is_not_retried():
    route = FakeRoute(spots("a", "b"))
    routes, call = make_call(route, retries=3)
    call.send(("k", b"", 1), {}, True)
    route.sent[0][3].set_exception(RuntimeError("can't get attribute 'Thing'"))
    time.sleep(0.2)
    assert len(route.sent) == 1
    with pytest.raises(Exception, match="could not be sent"):
        _reply(call)
    assert route.skips == [("fn/1", "a", 0)]  # it may never have reached the mailbox


def _reply(call):
    try:
        return call.reply.wait()
    except LocalFailure as failure:
        raise failure.error from None


def test_a_lent_thread_lets_one_more_run_and_goes_away_after():
    pool = ActorThreads(1, "lend-test")
    inner_ran = threading.Event()
    outer_done = threading.Event()
    seen = []

    def inner(_):
        inner_ran.set()

    def outer(_):
        seen.append(lender())
        with may_lend():
            me = lender()
            seen.append(me)
            pool.submit(inner, None)
            with me.lending():  # as actorrt.get does in a remote function
                seen.append(inner_ran.wait(5))
        seen.append(lender())
        outer_done.set()

    pool.submit(outer, None)
    assert outer_done.wait(10)
    assert seen == [None, pool, True, None]
    # without lending the inner call waits behind the outer one: one thread only
    blocked = threading.Event()
    inner_ran.clear()

    def waits(_):
        blocked.set()
        seen.append(inner_ran.wait(0.5))

    pool.submit(waits, None)
    assert blocked.wait(5)
    pool.submit(inner, None)
    assert inner_ran.wait(5)
    assert seen[-1] is False
    deadline = time.monotonic() + 5
    while pool._started > 1 and time.monotonic() < deadline:  # the extra thread ended
        pool.submit(lambda _: None, None)
        time.sleep(0.05)
    assert pool._started == 1
    pool.close()


def _not_loaded_reply(key):
    from actorrt.runtime.payload import pack
    from actorrt.runtime.protocol import FunctionNotLoaded, error_reply

    return pack(error_reply("remote function f", FunctionNotLoaded(key)))


def test_the_bytes_go_until_a_process_has_answered_then_the_key_alone():
    route = FakeRoute(spots("a"))
    routes = FunctionRoutes(route)
    calls = [FunctionCall(routes, route, SHAPE, "remote function f", "f", 0) for _ in range(3)]
    calls[0].send(("k", b"blob", 1), {}, True)
    calls[1].send(("k", b"blob", 2), {}, True)  # before any answer: with the bytes too
    assert [s[2] for s in route.sent] == [("k", b"blob", 1), ("k", b"blob", 2)]
    route.sent[0][3].set_result((None, [(0, 1)]))
    calls[2].send(("k", b"blob", 3), {}, True)
    assert route.sent[2][2] == ("k", None, 3)  # "a" answered a call that carried them
    other = FunctionCall(routes, route, SHAPE, "remote function g", "g", 0)
    other.send(("k2", b"blob2", 4), {}, True)
    assert route.sent[3][2] == ("k2", b"blob2", 4)  # another function: its own bytes
    routes.close()


def test_a_process_that_lost_the_function_gets_the_call_again_with_it_at_no_retry():
    route = FakeRoute(spots("a"))
    routes, call = make_call(route, retries=0)
    routes.learned("a", "k")  # believed loaded there (the process was since replaced)
    call.send(("k", b"blob", 7), {}, True)
    assert route.sent[0][2] == ("k", None, 7)
    route.sent[0][3].set_result(_not_loaded_reply("k"))
    route.wait_sent(2)
    assert route.sent[1][2] == ("k", b"blob", 7)  # again, with the bytes, max_retries=0
    assert not routes.loaded("a", "k")
    route.sent[1][3].set_result((None, [(0, 49)]))
    assert _reply(call) == (None, [(0, 49)])
    assert routes.loaded("a", "k") and route.unreachable == []
    routes.close()


def test_a_process_that_died_is_sent_the_bytes_again():
    route = FakeRoute(spots("a", "b"))
    routes, call = make_call(route, retries=1)
    routes.learned("a", "k")
    routes.learned("b", "k")
    call.send(("k", b"blob", 1), {}, True)
    dead = route.sent[0][0]
    route.sent[0][3].set_exception(RuntimeError("connection reset by peer"))
    route.wait_sent(2)
    assert not routes.loaded(dead, "k")  # whatever comes up under its name lacks it
    assert route.sent[1][0] != dead and route.sent[1][2] == ("k", None, 1)
    route.sent[1][3].set_result((None, [(0, 1)]))
    assert _reply(call) == (None, [(0, 1)])
    routes.close()


def test_a_cancelled_call_is_cancelled_at_its_process_and_not_sent_again_when_it_dies():
    route = FakeRoute(spots("a", "b"))
    routes, call = make_call(route, retries=2)
    call.send(("k", b"", 1), {}, True)
    worker, executor, _, fut = route.sent[0]
    call.cancel(False)  # actorrt.cancel(ref, recursive=False)
    assert route.cancels == [(worker, executor, 0, False)]
    fut.set_exception(RuntimeError("connection reset by peer"))  # its process died
    _done_within(call.reply)
    with pytest.raises(TaskCancelledError, match="remote function f was cancelled"):
        _reply(call)
    time.sleep(0.2)
    assert len(route.sent) == 1, "a cancelled call was sent again"
    routes.close()


def test_a_call_cancelled_before_its_arguments_were_ready_is_never_sent():
    route = FakeRoute(spots("a"))
    routes, call = make_call(route, retries=0)
    call.cancel(True)  # its ref arguments were still being made
    call.send(("k", b"", 1), {}, False)
    _done_within(call.reply)
    with pytest.raises(TaskCancelledError, match="before it was sent"):
        _reply(call)
    assert route.sent == [] and route.cancels == []
    routes.close()


def _done_within(future, timeout=10):
    done = threading.Event()
    future.add_done_callback(lambda _: done.set())
    assert done.wait(timeout), f"no answer in {timeout} s"
