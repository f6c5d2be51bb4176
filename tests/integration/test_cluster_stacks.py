"""actorrt.stacks(): every live process's thread stacks, an actor's stuck method among them."""

import os
import time

import pytest

import actorrt

pytestmark = pytest.mark.timeout(120)


@actorrt.actor
class Gatekeeper:
    def wait_at_the_gate(self, path):
        # Stands for a method that waits on something that never comes (another actor's
        # result, a lock); bounded here so that the test cannot leave it running.
        deadline = time.monotonic() + 30
        while not os.path.exists(path) and time.monotonic() < deadline:
            time.sleep(0.01)  # the line stacks() must show
        return os.path.exists(path)

    def ready(self):
        return True


def test_stacks_shows_each_process_and_the_method_an_actor_is_stuck_in(cluster, tmp_path):
    gate = tmp_path / "open"
    keeper = Gatekeeper.remote()
    actorrt.get(keeper.ready.remote(), timeout=30)
    waiting = keeper.wait_at_the_gate.remote(str(gate))
    try:
        deadline = time.monotonic() + 20
        text = ""
        while "in wait_at_the_gate" not in text and time.monotonic() < deadline:
            text = actorrt.stacks(timeout=10)  # the call may not have started yet
    finally:
        gate.touch()
    assert actorrt.get(waiting, timeout=30) is True
    sections = {s.split(" ", 1)[0]: s for s in text.split("=== ")[1:]}
    names = {n.process for n in actorrt.nodes() if n.alive}
    assert names <= set(sections), (names, list(sections))  # the driver's own too
    (mine,) = [a for a in actorrt.actors() if a.actor_id == keeper.actor_id]
    section = sections[mine.process]
    assert section.startswith(f"{mine.process} (rank {mine.rank}, pid "), section[:200]
    # The actor's thread, by name, in its method, at the waiting line with its source.
    thread = f'Thread "Gatekeeper-{keeper.actor_id[:8]}'
    assert thread in section, section
    after = section[section.index(thread) :]
    assert "in wait_at_the_gate" in after.split("Thread ", 2)[1], section
    assert "time.sleep(0.01)  # the line stacks() must show" in section


def test_stacks_refuses_a_timeout_that_is_not_positive(cluster):
    with pytest.raises(ValueError, match="timeout=0 must be > 0"):
        actorrt.stacks(timeout=0)
