"""runtime.lineage: which calls a call made, held weakly, and cancelled with it."""

from __future__ import annotations

import contextvars
import gc
import sys
import threading

from actorrt.runtime import lineage


class Parent:
    """Stands for a running call (mailbox.Call)."""

    def __init__(self):
        self.cancel_asked = False
        self.children = None


class Child:
    """Stands for the ref of a call made (ObjectRef)."""

    def __init__(self, fail=False):
        self.cancelled = 0
        self.fail = fail

    def _cancel_with_parent(self):
        self.cancelled += 1
        if self.fail:
            raise RuntimeError("the runtime is gone")


def _serving(parent, fn):
    """Runs ``fn`` as the code of ``parent``'s method does: with it as the call served."""
    ctx = contextvars.copy_context()
    return ctx.run(lambda: (lineage.serving.set(parent), fn())[1])


def test_a_call_made_outside_any_call_is_nobodys_child():
    lineage.made(Child())  # the driver's own code: nothing to record, no error
    assert lineage.serving.get() is None


def test_calls_made_while_serving_are_cancelled_with_their_parent_once_each():
    parent = Parent()
    kept = [Child(), Child()]
    _serving(parent, lambda: [lineage.made(c) for c in kept])
    lineage.cancel_children(parent)
    assert [c.cancelled for c in kept] == [1, 1]


def test_a_child_whose_ref_is_gone_is_forgotten():
    parent = Parent()
    kept = Child()
    _serving(parent, lambda: [lineage.made(Child()) for _ in range(1000)] + [lineage.made(kept)])
    gc.collect()
    assert len(parent.children) == 1  # a method making calls for hours holds no old ones
    lineage.cancel_children(parent)
    assert kept.cancelled == 1


def test_one_child_failing_to_cancel_stops_none_of_the_others():
    parent = Parent()
    children = [Child(fail=True), Child(), Child(fail=True), Child()]
    _serving(parent, lambda: [lineage.made(c) for c in children])
    lineage.cancel_children(parent)
    assert [c.cancelled for c in children] == [1, 1, 1, 1]


def test_children_made_while_a_cancel_reads_them_are_not_lost_or_raised_on():
    parent = Parent()
    kept = [Child() for _ in range(20000)]

    def make():
        _serving(parent, lambda: [lineage.made(c) for c in kept])

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # the threads take turns within a round, not between
    try:
        maker = threading.Thread(target=make)
        maker.start()
        while maker.is_alive():  # each round reads the set while the other thread adds
            lineage.cancel_children(parent)
        maker.join()
    finally:
        sys.setswitchinterval(interval)
    lineage.cancel_children(parent)
    assert all(c.cancelled >= 1 for c in kept)  # the last cancel reached every one
