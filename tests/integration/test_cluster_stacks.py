"""actorrt.stacks(): every live process's thread stacks, an actor's stuck method among them."""

import threading
import time

import pytest

import actorrt

pytestmark = pytest.mark.timeout(120)


@actorrt.actor(max_concurrency=2)  # open() runs beside the waiting method
class Gatekeeper:
    def __init__(self):
        self.gate = threading.Event()

    def wait_at_the_gate(self):
        # Stands for a method that waits on something that never comes (another actor's
        # result, a lock); bounded here so that the test cannot leave it running. One
        # line, so that a snapshot always finds the method on it.
        return self.gate.wait(30)  # the line stacks() must show

    def open(self):
        self.gate.set()

    def ready(self):
        return True


def test_stacks_shows_each_process_and_the_method_an_actor_is_stuck_in(cluster):
    keeper = Gatekeeper.remote()
    actorrt.get(keeper.ready.remote(), timeout=30)
    waiting = keeper.wait_at_the_gate.remote()
    try:
        deadline = time.monotonic() + 20
        text = ""
        while "in wait_at_the_gate" not in text and time.monotonic() < deadline:
            text = actorrt.stacks(timeout=10)  # the call may not have started yet
    finally:
        keeper.open.remote()
    assert actorrt.get(waiting, timeout=30) is True
    sections = {s.split(" ", 1)[0]: s for s in text.split("=== ")[1:]}
    names = {n.process for n in actorrt.nodes() if n.alive}
    assert names <= set(sections), (names, list(sections))  # the driver's own too
    (mine,) = [a for a in actorrt.actors() if a.actor_id == keeper.actor_id]
    section = sections[mine.process]
    assert section.startswith(f"{mine.process} (rank {mine.rank}, pid "), section[:200]
    # The actor's thread, by name, in its method, at the waiting line with its source.
    threads = section.split('Thread "')[1:]
    in_method = [t for t in threads if "in wait_at_the_gate" in t]
    assert len(in_method) == 1, section
    assert in_method[0].startswith(f"Gatekeeper-{keeper.actor_id[:8]}_"), in_method[0]
    assert "return self.gate.wait(30)  # the line stacks() must show" in in_method[0]


def test_stacks_refuses_a_timeout_that_is_not_positive(cluster):
    with pytest.raises(ValueError, match="timeout=0 must be > 0"):
        actorrt.stacks(timeout=0)
