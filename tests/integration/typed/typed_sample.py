"""Typed remote calls as a type checker sees them; checked by test_typed_calls.py.

mypy (strict, the project's config) must find no error here: each ``assert_type`` holds.
``run()`` and ``run_async()`` also make the calls on a cluster, so the types are those
of calls that work.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Iterator
from typing import Any

import actorrt
from actorrt import ActorHandle, ObjectRef, ObjectRefGenerator

if sys.version_info >= (3, 11):
    from typing import assert_type
else:  # pragma: no cover
    from typing_extensions import assert_type


@actorrt.actor
class Counter(actorrt.TypedActor):
    def __init__(self, start: int) -> None:
        self.n = start

    @actorrt.method
    def add(self, k: int = 1) -> int:
        self.n += k
        return self.n

    @actorrt.method
    def describe(self, k: int, *, factor: float = 1.0, label: str = "n") -> str:
        return f"{label}={self.n * k * factor}"

    @actorrt.method
    async def later(self, delay: float) -> int:
        await asyncio.sleep(delay)
        return self.n

    @actorrt.method
    def twice(self) -> int:
        assert_type(self.add(0), int)  # a marked method still calls locally, with its type
        return 2 * self.add(0)

    def unmarked(self) -> int:  # no .remote for a type checker; called remotely all the same
        return self.n

    @actorrt.method
    def upto(self, k: int) -> Iterator[int]:  # a generator method: streamed
        yield from range(self.n, self.n + k)

    @actorrt.method
    async def labels(self, k: int) -> AsyncIterator[str]:
        for i in range(k):
            await asyncio.sleep(0)
            yield f"#{i}"


@actorrt.actor(num_cpus=0, max_concurrency=2)
class Echo(actorrt.TypedActor):
    @actorrt.method
    def echo(self, data: bytes, times: int = 1) -> bytes:
        return data * times


class _Plain:
    def value(self) -> int:
        return 7


# The call form of the decorator: for a type checker, a plain class becomes an
# ActorClass, whose handles are untyped. (A TypedActor class is best decorated: mypy
# loses its constructor's parameters through the call form.)
Plain = actorrt.actor(_Plain)


@actorrt.remote
def scale(x: int, k: float = 2.0) -> float:
    return x * k


def run() -> dict[str, Any]:
    """Makes typed calls; the values, for the runtime test to check."""
    c = Counter.remote(10)
    assert_type(c, Counter)
    as_object: object = c
    assert isinstance(as_object, ActorHandle)  # at run time: a handle, as for any class

    ref = c.add.remote(5)
    assert_type(ref, ObjectRef[int])
    added = actorrt.get(ref)
    assert_type(added, int)

    refs = [c.add.remote(), c.add.remote(k=2)]
    assert_type(refs, list[ObjectRef[int]])
    many = actorrt.get(refs, timeout=60)
    assert_type(many, list[int])

    text_ref = c.describe.remote(2, factor=0.5, label="half")
    assert_type(text_ref, ObjectRef[str])
    text = actorrt.get(text_ref)
    assert_type(text, str)

    later = c.later.remote(0.01)  # async def: the ref holds the awaited type
    assert_type(later, ObjectRef[int])
    ready, not_ready = actorrt.wait([later], timeout=60)
    assert_type(ready, list[ObjectRef[int]])
    assert_type(not_ready, list[ObjectRef[int]])
    awaited = actorrt.get(later)
    assert_type(awaited, int)

    # a list of refs of several types: list[object] for mypy, list[int | str] for pyright
    mixed = actorrt.get([c.add.remote(0), c.describe.remote(1)])

    e = Echo.options(max_concurrency=4).remote()
    assert_type(e, Echo)
    echoed = actorrt.get(e.echo.remote(b"ab", times=2))
    assert_type(echoed, bytes)

    p = Plain.remote()  # a class not deriving from TypedActor: untyped, as before
    assert_type(p, ActorHandle)
    assert_type(p.value.remote(), ObjectRef[Any])
    plain = actorrt.get(p.value.remote())
    one = p.value.options(num_returns=1).remote()  # one ref, as Ray's; N > 1: a list
    assert_type(one, ObjectRef[Any])
    assert actorrt.get(one) == plain
    assert_type(p.value.options(num_returns=0).remote(), None)  # nothing to get, as Ray's

    twice = actorrt.get(c.twice.remote())
    gen = c.upto.remote(2)
    assert_type(gen, ObjectRefGenerator[int])
    streamed = [actorrt.get(r) for r in gen]
    assert_type(streamed, list[int])
    label_gen = c.labels.remote(2)
    assert_type(label_gen, ObjectRefGenerator[str])
    labels = [actorrt.get(r) for r in label_gen]
    scaled_ref = scale.remote(3, k=1.5)  # a remote function: checked against its signature
    assert_type(scaled_ref, ObjectRef[float])
    scaled = actorrt.get(scale.options(num_cpus=0).remote(2))
    assert_type(scaled, float)
    actorrt.kill(e)  # a typed handle is still a handle for kill()
    return {
        "added": added,
        "many": many,
        "text": text,
        "awaited": awaited,
        "mixed": mixed,
        "echoed": echoed,
        "plain": plain,
        "twice": twice,
        "streamed": streamed,
        "labels": labels,
        "scaled": [actorrt.get(scaled_ref), scaled],
    }


async def run_async() -> int:
    """``await`` of a typed ref gives the value, typed."""
    c = Counter.remote(1)
    value = await c.add.remote(2)
    assert_type(value, int)
    return value
