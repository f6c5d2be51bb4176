"""actorrt.ActorPool on real actors: order, queueing, timeouts, errors, membership (Ray's)."""

import time

import pytest

import actorrt

pytestmark = pytest.mark.timeout(120)


@actorrt.actor
class Worker:
    def __init__(self):
        self.doubled = 0

    def double(self, x):
        # The larger the value, the sooner it is done: completion order is not submit order.
        self.doubled += 1
        time.sleep(0.05 * (5 - x) if 0 <= x < 5 else 0)
        return 2 * x

    def times_doubled(self):
        return self.doubled

    def slow(self, s):
        time.sleep(s)
        return s

    def fail(self, msg):
        raise ValueError(msg)

    @actorrt.method(num_returns=2)
    def pair(self, x):
        return x, x + 1


def double(actor, x):
    return actor.double.remote(x)


@pytest.fixture
def workers(cluster):
    return [Worker.remote(), Worker.remote()]


def test_map_gives_results_in_order_and_map_unordered_as_they_come(workers):
    pool = actorrt.ActorPool(workers)
    assert list(pool.map(double, range(5))) == [0, 2, 4, 6, 8]
    unordered = list(pool.map_unordered(lambda a, s: a.slow.remote(s), [1.5, 0.0]))
    assert unordered == [0.0, 1.5]  # the short one first, though submitted second
    assert not pool.has_next() and pool.has_free()


def test_map_gives_up_the_tasks_submitted_before_it_and_never_starts_the_waiting_ones(
    workers,
):
    pool = actorrt.ActorPool(workers[:1])
    pool.submit(lambda a, s: a.slow.remote(s), 0.5)  # running
    pool.submit(double, 1)  # waiting for the actor
    assert list(pool.map(double, [2])) == [4]  # only its own
    assert actorrt.get(workers[0].times_doubled.remote(), timeout=30) == 1  # not double(1)


def test_tasks_wait_for_a_free_actor_and_results_come_in_submission_order(workers):
    pool = actorrt.ActorPool(workers)
    for x in range(5):
        pool.submit(double, x)
    assert not pool.has_free()  # two run, three wait
    assert [pool.get_next() for _ in range(5)] == [0, 2, 4, 6, 8]
    assert not pool.has_next()
    with pytest.raises(StopIteration, match="no more results"):
        pool.get_next()
    with pytest.raises(StopIteration):
        pool.get_next_unordered()


def test_a_timeout_raises_and_ignore_if_timedout_gives_the_task_up(workers):
    pool = actorrt.ActorPool(workers[:1])
    pool.submit(lambda a, s: a.slow.remote(s), 1.0)
    with pytest.raises(TimeoutError):  # GetTimeoutError is one
        pool.get_next(timeout=0.05)
    assert pool.has_next()  # still there to take
    assert pool.get_next(timeout=30) == 1.0
    pool.submit(lambda a, s: a.slow.remote(s), 1.0)
    with pytest.raises(actorrt.GetTimeoutError, match="given up"):
        pool.get_next_unordered(timeout=0.05, ignore_if_timedout=True)
    assert not pool.has_next() and pool.has_free()  # the actor is free again
    pool.submit(double, 3)  # queued on the actor behind the abandoned call
    assert pool.get_next(timeout=30) == 6


def test_a_failed_task_raises_at_its_turn_and_frees_its_actor(workers):
    pool = actorrt.ActorPool(workers)
    pool.submit(lambda a, m: a.fail.remote(m), "bad input")
    pool.submit(double, 1)
    with pytest.raises(actorrt.ActorError, match="bad input"):
        pool.get_next()
    assert pool.get_next() == 2
    assert pool.has_free()


def test_membership_push_pop_idle_and_a_task_function_that_returns_no_ref(workers):
    a, b = workers
    pool = actorrt.ActorPool([a])
    with pytest.raises(ValueError, match="in the pool already"):
        pool.push(a)
    with pytest.raises(ValueError, match="in the pool already"):
        actorrt.ActorPool([a, a])
    with pytest.raises(TypeError, match="not an ObjectRef"):
        pool.submit(lambda actor, x: x, 1)
    assert pool.has_free()  # the actor was not lost
    pool.submit(double, 2)
    assert pool.pop_idle() is None  # busy
    pool.submit(double, 3)  # waits for an actor
    pool.push(b)  # takes the waiting task at once
    assert sorted([pool.get_next_unordered(), pool.get_next_unordered()]) == [4, 6]
    idle = pool.pop_idle()
    assert idle in (a, b)
    pool.push(idle)  # out, then in again
    assert list(pool.map(double, [1])) == [2]


def test_a_waiting_task_whose_function_fails_raises_at_its_turn_and_no_result_is_lost(workers):
    a, _ = workers
    pool = actorrt.ActorPool([a])
    pool.submit(double, 1)
    pool.submit(lambda actor, x: x, 5)  # waits; returns no ref once an actor is free
    pool.submit(double, 3)
    assert pool.get_next() == 2  # frees the actor, which tries the broken task first
    with pytest.raises(TypeError, match="not an ObjectRef"):
        pool.get_next()
    assert pool.get_next() == 6
    assert not pool.has_next() and pool.has_free()


def no_such_method(actor, x):
    return actor.no_such_method.remote(x)  # fails at the call site: nothing starts


def test_a_task_function_that_raises_leaves_its_actor_free(workers):
    a, _ = workers
    pool = actorrt.ActorPool([a])
    with pytest.raises(AttributeError, match="no_such_method"):
        pool.submit(no_such_method, 1)
    assert pool.has_free()  # the actor was not lost to the pool
    pool.submit(double, 2)
    assert pool.get_next(timeout=30) == 4
    # The same function waiting for an actor fails at its turn; the tasks behind it run.
    pool.submit(double, 1)
    pool.submit(no_such_method, 5)
    pool.submit(double, 3)
    assert pool.get_next(timeout=30) == 2
    with pytest.raises(AttributeError, match="no_such_method"):
        pool.get_next(timeout=30)
    assert pool.get_next(timeout=30) == 6
    assert not pool.has_next() and pool.has_free()


def test_map_submits_every_task_at_the_call_as_ray_does(workers):
    """Was: map and map_unordered were generators, which submitted nothing until
    iterated: has_next() was False after map(), and draining with get_next got []."""
    pool = actorrt.ActorPool(workers)
    pool.map(double, [0, 1])  # not iterated
    assert pool.has_next()
    assert [pool.get_next(timeout=30) for _ in range(2)] == [0, 2]
    pool.map_unordered(double, [3])
    assert pool.get_next_unordered(timeout=30) == 6 and not pool.has_next()


def pair(actor, x):
    return actor.pair.remote(x)  # a list of two refs


def two_calls(actor, s):
    return [actor.slow.remote(s), actor.slow.remote(0.0)]


def test_a_task_function_may_return_a_list_of_refs_whose_values_come_as_a_list_as_rays(workers):
    # Ray's pool takes a list (a method's num_returns=2 refs, or several calls): was a
    # TypeError. Ray's own get_next(timeout=) and get_next_unordered fail on one.
    pool = actorrt.ActorPool(workers)
    assert list(pool.map(pair, [1, 2, 3])) == [[1, 2], [2, 3], [3, 4]]
    assert list(pool.map_unordered(two_calls, [1.0, 0.0])) == [[0.0, 0.0], [1.0, 0.0]]
    pool.submit(two_calls, 1.0)
    with pytest.raises(TimeoutError):  # its first call is slow: the task is not done
        pool.get_next(timeout=0.05)
    assert pool.get_next(timeout=30) == [1.0, 0.0]
    pool.submit(lambda a, x: [], 0)  # starts nothing: done at once, as Ray's gives []
    pool.submit(pair, 5)
    assert pool.get_next_unordered(timeout=30) == []
    assert pool.get_next(timeout=30) == [5, 6]
    with pytest.raises(TypeError, match="not an ObjectRef or a list"):
        pool.submit(lambda a, x: (a.double.remote(x),), 1)  # a tuple: refused, as by Ray
    assert not pool.has_next() and pool.has_free()
