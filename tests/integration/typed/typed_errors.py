"""Wrong typed calls; test_typed_calls.py checks that mypy reports exactly these.

Each line ending in ``# E: <code>`` must get one mypy error with that code, and no
other line any. Never imported: the calls would fail.
"""

from __future__ import annotations

from typed_sample import Counter, Echo, scale

import actorrt


def wrong_calls() -> None:
    Counter.remote()  # E: call-arg
    Counter.remote("ten")  # E: arg-type
    c = Counter.remote(10)
    c.add.remote("one")  # E: arg-type
    c.add.remote(1, 2)  # E: call-arg
    c.describe.remote(2, factor="big")  # E: arg-type
    c.describe.remote(2, colour="red")  # E: call-arg
    c.later.remote()  # E: call-arg
    c.upto.remote("two")  # E: arg-type
    c.unmarked.remote()  # E: attr-defined
    c.no_such_method.remote()  # E: attr-defined
    Echo.options(num_cpus=1).remote(b"x")  # E: call-overload
    e = Echo.remote()
    e.echo.remote("text")  # E: arg-type
    scale.remote("three")  # E: arg-type
    scale.options(num_gpus=0).remote(1, 2, 3)  # E: call-arg


def wrong_results() -> tuple[object, ...]:
    c = Counter.remote(10)
    n: str = actorrt.get(c.add.remote())  # E: assignment
    texts: list[int] = actorrt.get([c.describe.remote(1)])  # E: list-item
    ref: actorrt.ObjectRef[str] = c.add.remote()  # E: assignment
    scaled: str = actorrt.get(scale.remote(1))  # E: assignment
    first: actorrt.ObjectRef[str] = next(c.upto.remote(1))  # E: arg-type
    return n, texts, ref, scaled, first
