"""actorrt.Queue on real processes, as Ray's ray.util.queue.Queue: order, bounds, actors."""

import asyncio
import queue as stdlib_queue
import time

import pytest
import torch

import actorrt
from actorrt.queues import Empty, Full

pytestmark = pytest.mark.timeout(120)


@actorrt.actor
class Producer:
    def __init__(self, q):
        self.q = q

    def produce(self, n, tag):
        for i in range(n):
            self.q.put((tag, i, torch.full((3,), float(i))))
        return n


@actorrt.actor
class Consumer:
    def take(self, q, n, timeout):
        return [q.get(timeout=timeout) for _ in range(n)]


def test_items_come_out_in_order_across_actors(cluster):
    q = actorrt.Queue()
    assert actorrt.get(Producer.remote(q).produce.remote(5, "a"), timeout=30) == 5
    assert len(q) == q.qsize() == q.size() == 5 and not q.empty() and not q.full()
    items = actorrt.get(Consumer.remote().take.remote(q, 5, 10), timeout=30)
    assert [(tag, i) for tag, i, _ in items] == [("a", i) for i in range(5)]
    assert all(torch.equal(t, torch.full((3,), float(i))) for _, i, t in items)
    assert q.empty()


def test_a_waiting_get_is_answered_by_a_later_put_from_another_actor(cluster):
    q = actorrt.Queue()
    waiting = Consumer.remote().take.remote(q, 2, 30)  # waits in the queue's actor
    time.sleep(0.3)
    assert not waiting.done()
    actorrt.get(Producer.remote(q).produce.remote(2, "late"), timeout=30)
    assert [(tag, i) for tag, i, _ in actorrt.get(waiting, timeout=30)] == [
        ("late", 0),
        ("late", 1),
    ]


def test_a_bounded_queue_says_full_and_empty_as_the_stdlib_does(cluster):
    q = actorrt.Queue(maxsize=2)
    q.put(1)
    q.put_nowait(2)
    assert q.full()
    with pytest.raises(Full, match=r"full \(maxsize=2\)"):
        q.put_nowait(3)
    began = time.monotonic()
    with pytest.raises(Full, match="stayed so for 0.3 s"):
        q.put(3, timeout=0.3)
    assert time.monotonic() - began >= 0.25
    assert issubclass(Full, stdlib_queue.Full) and issubclass(Empty, stdlib_queue.Empty)
    assert [q.get(), q.get_nowait()] == [1, 2]
    with pytest.raises(Empty, match="empty"):
        q.get(block=False)
    with pytest.raises(Empty, match="stayed so for 0.3 s"):
        q.get(timeout=0.3)


def test_batches_go_in_whole_or_not_at_all(cluster):
    q = actorrt.Queue(maxsize=3)
    q.put_nowait_batch([1, 2])
    with pytest.raises(Full, match="2 items do not fit: the queue has room for 1"):
        q.put_nowait_batch([3, 4])
    assert q.size() == 2
    with pytest.raises(Empty, match="3 items asked for, 2 in the queue"):
        q.get_nowait_batch(3)
    assert q.get_nowait_batch(2) == [1, 2]
    assert q.get_nowait_batch(0) == []


def test_async_put_and_get_wait_without_blocking_the_loop(cluster):
    q = actorrt.Queue()

    async def main():
        getter = asyncio.ensure_future(q.get_async(timeout=30))
        await asyncio.sleep(0.2)
        assert not getter.done()
        await q.put_async("x")
        return await getter

    assert asyncio.run(main()) == "x"

    async def empty():
        with pytest.raises(Empty):
            await q.get_async(block=False)

    asyncio.run(empty())


def test_bad_arguments_and_a_shut_down_queue_say_what_to_do(cluster):
    with pytest.raises(TypeError, match="maxsize='2' must be an int"):
        actorrt.Queue(maxsize="2")
    assert actorrt.Queue(maxsize=-1).maxsize == 0  # no bound, as queue.Queue and Ray
    q = actorrt.Queue(actor_options={"name": "test-queue"})
    assert actorrt.get_actor("test-queue").actor_id == q.actor.actor_id
    with pytest.raises(ValueError, match=r"timeout=-1 must be >= 0 seconds"):
        q.get(timeout=-1)
    with pytest.raises(TypeError, match="timeout='1' must be a number of seconds"):
        q.put(1, timeout="1")
    with pytest.raises(ValueError, match="num_items=-1 must be >= 0"):
        q.get_nowait_batch(-1)
    waiting = Consumer.remote().take.remote(q, 1, 30)
    time.sleep(0.3)
    with pytest.raises(TypeError, match="force='yes' must be True or False"):
        q.shutdown(force="yes")
    with pytest.raises(ValueError, match="grace_period_s=-1 must be >= 0"):
        q.shutdown(grace_period_s=-1)
    q.shutdown(force=True)  # Ray's arguments
    with pytest.raises(actorrt.ActorDiedError):
        q.put(1)
    with pytest.raises(actorrt.ActorError) as info:  # the consumer's get died with the queue
        actorrt.get(waiting, timeout=30)
    assert isinstance(info.value.cause, actorrt.ActorDiedError)


@actorrt.actor
class BigProducer:
    def produce(self, q, n, nbytes):
        # refs in the queue, inside a list (a top-level ref argument is resolved, as in
        # Ray): the bytes stay here until the consumer fetches them
        for i in range(n):
            q.put([actorrt.put(torch.full((nbytes,), i, dtype=torch.uint8))])
        return n


@actorrt.actor
class BigConsumer:
    def take(self, q, n):
        return [int(actorrt.get(q.get(timeout=30)[0], timeout=30)[0]) for _ in range(n)]


def test_refs_put_in_a_queue_go_producer_to_consumer(cluster):
    q = actorrt.Queue()
    nbytes = 2 << 20
    assert actorrt.get(BigProducer.remote().produce.remote(q, 3, nbytes), timeout=60) == 3
    (ref,) = q.get(timeout=30)
    assert isinstance(ref, actorrt.ObjectRef)  # the queue held a ref, not the tensor
    assert int(actorrt.get(ref, timeout=30)[0]) == 0
    assert actorrt.get(BigConsumer.remote().take.remote(q, 2), timeout=60) == [1, 2]
    q.put(actorrt.put("alone"))  # a ref put alone is resolved first, as in Ray
    assert q.get(timeout=30) == "alone"
