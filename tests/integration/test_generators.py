"""Streaming generators on real processes, as Ray's: each value as it is yielded."""

import asyncio
import threading
import time

import pytest
import torch

import actorrt
from actorrt.runtime.runtime import current_or_none

pytestmark = pytest.mark.timeout(120)

MB = 1 << 20


@actorrt.actor(max_concurrency=2)
class Source:
    def __init__(self):
        self.gate = threading.Event()
        self.closed = 0

    def count(self, n):
        yield from range(n)

    def gated(self):
        yield "before"
        self.gate.wait(60)
        yield "after"

    def release(self):
        self.gate.set()

    def tensors(self, n, nbytes):
        for i in range(n):
            yield torch.full((nbytes,), i, dtype=torch.uint8)

    def fail_after(self, n):
        yield from range(n)
        raise KeyError("no more")

    def forever(self):
        try:
            i = 0
            while True:
                yield i
                i += 1
                time.sleep(0.01)
        finally:
            self.closed += 1

    def closed_count(self):
        return self.closed

    def plain(self):
        return [1, 2]

    @actorrt.method(num_returns=2)
    def two(self):
        yield "a"
        yield "b"

    def kept_ids(self):
        return set(current_or_none().objects._values)


@actorrt.actor
class AsyncSource:
    async def count(self, n):
        for i in range(n):
            await asyncio.sleep(0.001)
            yield i * 10

    async def slow(self):
        yield "first"
        await asyncio.sleep(60)
        yield "never"

    async def ping(self):
        return "pong"


@actorrt.actor
class Sink:
    def total(self, t):
        return int(t.sum())

    def drain(self, source, n):
        # iterates another actor's generator inside a method
        return [actorrt.get(r, timeout=30) for r in source.count.remote(n)]


@actorrt.remote
def numbers(n):
    for i in range(n):
        yield i + 100


@actorrt.remote
async def async_numbers(n):
    for i in range(n):
        await asyncio.sleep(0)
        yield -i


def _values(gen):
    return [actorrt.get(r, timeout=30) for r in gen]


def test_a_generator_method_gives_each_value_while_it_runs(cluster):
    s = Source.remote()
    gen = s.gated.remote()
    assert isinstance(gen, actorrt.ObjectRefGenerator)
    assert actorrt.get(next(gen), timeout=30) == "before"
    time.sleep(0.2)
    assert not gen.completed().done()  # the method still waits at its gate
    s.release.remote()
    assert _values(gen) == ["after"]
    assert actorrt.get(gen.completed(), timeout=30) == 2
    with pytest.raises(StopIteration):
        next(gen)


def test_values_come_in_order_and_the_iteration_ends(cluster):
    s = Source.remote()
    assert _values(s.count.remote(50)) == list(range(50))
    assert _values(s.count.remote(0)) == []


def test_large_values_stay_at_the_actor_and_go_to_a_consumer_in_one_hop(cluster):
    s, sink = Source.remote(), Sink.remote()
    before = cluster.payload_bytes_in
    # over ACTORRT_PULL_BYTES (32 MiB): no copy comes along to the caller
    refs = list(s.tensors.remote(2, 40 * MB))
    assert [actorrt.get(sink.total.remote(r), timeout=60) for r in refs] == [0, 40 * MB]
    assert cluster.payload_bytes_in - before < MB  # the driver got locations, not bytes
    assert int(actorrt.get(refs[1], timeout=60)[0]) == 1


def test_values_not_taken_are_freed_at_the_actor_when_the_generator_goes(cluster):
    s = Source.remote()
    before = actorrt.get(s.kept_ids.remote(), timeout=30)
    gen = s.tensors.remote(4, 2 * MB)
    first = next(gen)
    assert actorrt.get(gen.completed(), timeout=60) == 4
    del gen  # three values never taken

    def left():
        return actorrt.get(s.kept_ids.remote(), timeout=30) - before

    deadline = time.monotonic() + 20
    while len(left()) > 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(left()) == 1, f"values nobody can take are kept: {left()}"
    assert int(actorrt.get(first, timeout=30)[0]) == 0
    del first
    while left() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not left()


def test_an_exception_is_the_last_ref_and_the_iteration_ends(cluster):
    refs = list(Source.remote().fail_after.remote(2))
    assert len(refs) == 3
    assert actorrt.get(refs[:2], timeout=30) == [0, 1]
    with pytest.raises(actorrt.ActorError) as info:
        actorrt.get(refs[2], timeout=30)
    assert isinstance(info.value.cause, KeyError) and "fail_after" in str(info.value)


def test_streaming_a_method_that_returns_no_generator_says_so(cluster):
    refs = list(Source.remote().plain.options(num_returns="streaming").remote())
    with pytest.raises(actorrt.ActorError, match="returned list, not a generator"):
        actorrt.get(refs[0], timeout=30)


def test_an_async_generator_streams_and_the_driver_can_async_for(cluster):
    a = AsyncSource.remote()
    assert _values(a.count.remote(5)) == [0, 10, 20, 30, 40]

    async def main():
        return [await r async for r in a.count.remote(3)]

    assert asyncio.run(main()) == [0, 10, 20]


def test_generator_functions_stream_too(cluster):
    assert _values(numbers.remote(4)) == [100, 101, 102, 103]
    assert _values(async_numbers.remote(3)) == [0, -1, -2]
    with pytest.raises(actorrt.ActorError, match="cannot pickle 'generator'"):
        actorrt.get(numbers.options(num_returns=1).remote(1), timeout=30)  # asked not to stream


def test_cancel_stops_a_running_generator_between_values(cluster):
    s = Source.remote()
    gen = s.forever.remote()
    taken = [actorrt.get(next(gen), timeout=30) for _ in range(3)]
    actorrt.cancel(gen)
    rest = list(gen)
    with pytest.raises(actorrt.TaskCancelledError):
        actorrt.get(rest[-1], timeout=30)
    assert taken + actorrt.get(rest[:-1], timeout=30) == list(range(3 + len(rest) - 1))
    assert actorrt.get(s.closed_count.remote(), timeout=30) == 1  # its finally ran


def test_cancel_stops_an_async_generator_where_it_awaits(cluster):
    a = AsyncSource.remote()
    gen = a.slow.remote()
    assert actorrt.get(next(gen), timeout=30) == "first"
    actorrt.cancel(gen)
    last = next(gen)
    with pytest.raises(actorrt.TaskCancelledError):
        actorrt.get(last, timeout=30)
    with pytest.raises(StopIteration):
        next(gen)
    assert actorrt.get(a.ping.remote(), timeout=30) == "pong"


def test_a_killed_actor_ends_the_iteration_with_actor_died(cluster):
    s = Source.remote()
    gen = s.forever.remote()
    assert actorrt.get(next(gen), timeout=30) == 0
    actorrt.kill(s)
    refs = list(gen)  # ends: no hang
    with pytest.raises(actorrt.ActorDiedError):
        actorrt.get(refs[-1], timeout=30)
    with pytest.raises(actorrt.ActorDiedError):
        actorrt.get(gen.completed(), timeout=30)


def test_an_actor_iterates_another_actors_generator(cluster):
    s, sink = Source.remote(), Sink.remote()
    assert actorrt.get(sink.drain.remote(s, 5), timeout=60) == list(range(5))


def test_num_returns_on_a_generator_method_splits_its_values(cluster):
    first, second = Source.remote().two.remote()
    assert actorrt.get([first, second], timeout=30) == ["a", "b"]


def test_a_generator_cannot_travel_and_bad_num_returns_fail_at_the_call(cluster):
    s, sink = Source.remote(), Sink.remote()
    gen = s.count.remote(2)
    with pytest.raises(TypeError, match="cannot be sent to another process"):
        sink.total.remote([gen])
    for use in (actorrt.get, lambda g: actorrt.get([g])):
        with pytest.raises(TypeError, match="iterate it"):
            use(gen)
    with pytest.raises(TypeError, match=r"takes a list: actorrt.wait\(\[gen\]\)"):
        actorrt.wait(gen)
    assert _values(gen) == [0, 1]
    with pytest.raises(TypeError, match="'streaming'"):
        s.count.options(num_returns="stream")
    with pytest.raises(TypeError, match="'streaming'"):
        numbers.options(num_returns="many")


def test_max_pending_calls_counts_a_streaming_call_until_it_ends(cluster):
    s = Source.options(max_pending_calls=2).remote()
    gen = s.gated.remote()
    assert actorrt.get(next(gen), timeout=30) == "before"
    other = s.count.remote(1)
    with pytest.raises(actorrt.PendingCallsLimitExceeded):
        s.count.remote(1)  # the running stream and `other` are both unanswered
    assert _values(other) == [0]
    actorrt.get(s.release.remote(), timeout=30)
    assert actorrt.get(gen.completed(), timeout=30) == 2
    assert _values(s.count.remote(2)) == [0, 1]  # both answered: room again


@actorrt.actor
class OnlyAsyncGenerators:  # no async def: its async generator still makes it an async actor
    async def ticks(self, n):
        for i in range(n):
            await asyncio.sleep(0)
            yield i


def test_an_actor_with_only_async_generators_is_an_async_actor(cluster):
    assert _values(OnlyAsyncGenerators.remote().ticks.remote(3)) == [0, 1, 2]


@actorrt.remote
def leaves(how):
    yield "one"
    if how == "exit_actor":
        actorrt.exit_actor()
    raise SystemExit(3)


def test_a_generator_function_cannot_end_its_worker(cluster):
    for how, error in (("exit_actor", TypeError), ("sys.exit", RuntimeError)):
        refs = list(leaves.options(max_retries=0).remote(how))
        assert actorrt.get(refs[0], timeout=30) == "one"
        with pytest.raises(actorrt.ActorError) as info:
            actorrt.get(refs[1], timeout=30)
        assert isinstance(info.value.cause, error), info.value
    assert _values(numbers.remote(2)) == [100, 101]  # its worker still runs functions


@actorrt.actor(max_concurrency=2)
class Producer:
    def __init__(self):
        self.made = 0

    def produce(self, n):
        for i in range(n):
            self.made = i + 1
            yield i

    @actorrt.method(_generator_backpressure_num_objects=1)
    def one_ahead(self, n):
        yield from self.produce(n)

    def count(self):
        return self.made


@actorrt.actor
class AsyncProducer:
    def __init__(self):
        self.made = 0

    async def produce(self, n):
        for i in range(n):
            self.made = i + 1
            yield i

    async def count(self):
        return self.made


def _made_settles_at(producer, expected):
    deadline = time.monotonic() + 20
    while actorrt.get(producer.count.remote(), timeout=30) < expected:
        assert time.monotonic() < deadline, f"never made {expected} values"
        time.sleep(0.02)
    time.sleep(0.3)  # and no more: it waits for the caller
    return actorrt.get(producer.count.remote(), timeout=30)


@pytest.mark.parametrize("cls", [Producer, AsyncProducer], ids=["plain", "async"])
def test_backpressure_keeps_a_generator_at_most_n_values_ahead(cluster, cls):
    p = cls.remote()
    gen = p.produce.options(_generator_backpressure_num_objects=2).remote(100)
    assert _made_settles_at(p, 2) == 2  # nothing taken: two values made, then it waits
    assert actorrt.get(next(gen), timeout=30) == 0
    assert _made_settles_at(p, 3) == 3  # one taken: room for one more
    rest = [actorrt.get(r, timeout=30) for r in gen]
    assert rest == list(range(1, 100))


def test_without_backpressure_a_generator_runs_ahead(cluster):
    p = Producer.remote()
    gen = p.produce.remote(50)
    assert _made_settles_at(p, 50) == 50
    assert len(list(gen)) == 50


def test_a_dropped_generator_lets_its_method_run_to_its_end(cluster):
    p = Producer.remote()
    gen = p.one_ahead.remote(20)  # the decorator's limit: one value ahead
    assert _made_settles_at(p, 1) == 1
    del gen
    assert _made_settles_at(p, 20) == 20


def test_cancel_stops_a_generator_waiting_for_its_caller(cluster):
    p = Producer.remote()
    gen = p.produce.options(_generator_backpressure_num_objects=1).remote(100)
    assert _made_settles_at(p, 1) == 1
    actorrt.cancel(gen)
    assert actorrt.get(gen.completed(), timeout=30) == 2  # one value, then the cancel
    refs = list(gen)
    assert actorrt.get(refs[0], timeout=30) == 0
    with pytest.raises(actorrt.TaskCancelledError):
        actorrt.get(refs[-1], timeout=30)
    assert len(refs) == 2 and actorrt.get(p.count.remote(), timeout=30) == 1


def test_backpressure_on_a_generator_function(cluster):
    limited = numbers.options(_generator_backpressure_num_objects=1)
    assert _values(limited.remote(30)) == list(range(100, 130))


def test_bad_backpressure_fails_at_once(cluster):
    p = Producer.remote()
    with pytest.raises(ValueError, match="-1 for no limit"):
        p.produce.options(_generator_backpressure_num_objects=0)
    with pytest.raises(TypeError, match="for streaming calls"):
        p.count.options(_generator_backpressure_num_objects=2)
    with pytest.raises(TypeError, match="for streaming calls"):
        actorrt.remote(_generator_backpressure_num_objects=2)(lambda: 1)
    with pytest.raises(TypeError, match="for streaming methods"):
        actorrt.method(_generator_backpressure_num_objects=2)(lambda self: 1)


def test_wait_says_when_a_generators_next_value_is_there(cluster):
    s = Source.remote()
    gen = s.gated.remote()
    assert actorrt.wait([gen], timeout=30) == ([gen], [])
    assert actorrt.get(next(gen), timeout=30) == "before"
    assert actorrt.wait([gen], timeout=0.3) == ([], [gen])  # the method waits at its gate
    other = s.count.remote(1)  # a ref beside it
    ready, not_ready = actorrt.wait([gen, other.completed()], num_returns=1, timeout=30)
    assert ready == [other.completed()] and not_ready == [gen]
    s.release.remote()
    assert actorrt.wait([gen], timeout=30) == ([gen], [])
    assert actorrt.get(next(gen), timeout=30) == "after"
    assert actorrt.wait([gen], timeout=30) == ([gen], [])  # its end is there too
    with pytest.raises(StopIteration):
        next(gen)
    assert actorrt.wait([gen], timeout=0) == ([gen], [])


def test_several_consumers_of_one_generator_share_its_values_once_each_and_all_end(cluster):
    # Before: two threads (or asyncio tasks) read one index at once, so a value went to
    # both and the next to none, and a consumer waited for ever after the end.
    s = Source.remote()
    n = 300
    gen = s.count.remote(n)
    got: list[list[int]] = [[], []]

    def consume(into):
        for ref in gen:
            into.append(actorrt.get(ref, timeout=30))

    threads = [threading.Thread(target=consume, args=(into,), daemon=True) for into in got]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads)  # every consumer ended
    assert sorted(got[0] + got[1]) == list(range(n))

    async def tasks():
        gen = s.count.remote(n)
        out: list[int] = []

        async def consume():
            async for ref in gen:
                out.append(await ref)

        await asyncio.wait_for(asyncio.gather(*(consume() for _ in range(4))), 60)
        return out

    assert sorted(asyncio.run(tasks())) == list(range(n))
