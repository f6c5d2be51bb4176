"""Restarts: an actor recreated on a process that dies at that very moment goes on again.

No processes: the directory is planned over synthetic nodes and ``create_remote`` (the
creation on the new process) is replaced by a stand-in that reports that process dead.
"""

import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "placement"))
from placement_testlib import node  # noqa: E402

from actorrt.options import ActorOptions  # noqa: E402
from actorrt.placement import Layout, ProcessInfo, make_plan  # noqa: E402
from actorrt.runtime import restarts as restarts_mod  # noqa: E402
from actorrt.runtime.directory import ClusterDirectory  # noqa: E402
from actorrt.runtime.lives import Lives  # noqa: E402
from actorrt.runtime.protocol import ActorRecord  # noqa: E402
from actorrt.runtime.restarts import Recipe, Restarts  # noqa: E402


class _OwnRRef:
    """What the faked ``rpc.remote`` returns: an RRef as the RRef keeper sees one."""

    def is_owner(self) -> bool:
        return True  # never held by the keeper


def _cluster(workers: int, max_restarts: int) -> tuple[ClusterDirectory, Restarts]:
    """A directory over a driver and ``workers`` processes, actor ``a1`` placed on
    ``w1``, and rank 0's restarts keeping its recipe."""
    nodes = [node("a") for _ in range(workers)]
    driver = replace(nodes[0], labels=(), hosts_actors=False)
    ps = [ProcessInfo(0, "driver", driver)]
    ps += [ProcessInfo(i + 1, f"w{i + 1}", n) for i, n in enumerate(nodes)]
    directory = ClusterDirectory(make_plan(ps, Layout()), ps)
    options = ActorOptions(max_restarts=max_restarts)
    assert directory.place("a1", options, "A").worker == "w1"
    restarts = Restarts(directory, pack=lambda peer, value: value, lives=Lives())
    record = ActorRecord("a1", "w1", "A", "", 0)
    restarts.keep(Recipe(record, "k", b"", (), {}, options, {}, left=max_restarts))
    return directory, restarts


def test_a_process_dying_while_the_actor_is_recreated_there_sends_it_on(monkeypatch):
    directory, restarts = _cluster(3, max_restarts=3)
    created_on = []

    def create(worker, actor_id, class_key, class_blob, wire, meta):
        created_on.append(worker)
        if len(created_on) == 1:  # the first new home dies before the actor is up there
            directory.mark_dead(worker)
            restarts.worker_died(worker)
        return object()

    monkeypatch.setattr(restarts_mod, "create_remote", create)
    monkeypatch.setattr(restarts_mod.rpc, "rpc_sync", lambda *a, **k: None)  # it answers
    directory.mark_dead("w1")
    restarts.worker_died("w1")
    deadline = time.monotonic() + 10
    while len(created_on) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    record, why = restarts.locate("a1", timeout=10)
    assert created_on[0] != "w1" and len(created_on) == 2, created_on
    assert record is not None and record.worker == created_on[1] != created_on[0], (record, why)


def test_a_restart_on_a_process_that_cannot_be_reached_goes_on_to_another(monkeypatch):
    """The process chosen is dead but not yet marked: it is judged, and the actor goes on
    (was: declared gone, "recreating it failed", with restarts left)."""
    directory, restarts = _cluster(3, max_restarts=-1)
    judged = []
    restarts.on_unreachable = lambda worker: (judged.append(worker), directory.suspect(worker))
    sent_to = []

    def ping(worker, fn, timeout):
        sent_to.append(worker)
        if len(sent_to) == 1:
            raise RuntimeError("EPIPE: broken pipe")

    monkeypatch.setattr(restarts_mod.rpc, "remote", lambda worker, fn, args: _OwnRRef())
    monkeypatch.setattr(restarts_mod.rpc, "rpc_sync", ping)
    directory.mark_dead("w1")
    restarts.worker_died("w1")
    record, why = restarts.locate("a1", timeout=10)
    # The dead one got no further than the ping before the actor; the other, both pings.
    assert judged == sent_to[:1] and sent_to[1:] == [sent_to[1]] * 2, (judged, sent_to)
    assert record is not None and record.worker == sent_to[1] not in ("w1", sent_to[0]), why
    (info,) = directory.actors()
    assert info.state == "ALIVE" and info.restarts == 1, info  # the failed try is no restart


def test_a_restart_whose_every_process_is_dead_already_says_so(monkeypatch):
    """Each process chosen is dead before it gets the actor (not marked yet): after
    CREATE_TRIES it ends, saying that (was: the last try's error only)."""
    directory, restarts = _cluster(3, max_restarts=-1)
    restarts.on_unreachable = lambda worker: None  # judged alive: it may be chosen again
    sent = []

    def ping(worker, fn, timeout):
        raise RuntimeError("EPIPE: broken pipe")

    monkeypatch.setattr(restarts_mod.rpc, "remote", lambda *a, **k: sent.append(1))
    monkeypatch.setattr(restarts_mod.rpc, "rpc_sync", ping)
    directory.mark_dead("w1")
    restarts.worker_died("w1")
    record, why = restarts.locate("a1", timeout=10)
    assert record is None, record
    assert f"{restarts_mod.CREATE_TRIES} tries to recreate it failed" in why, why
    assert "no process it was sent to could be reached" in why and "EPIPE" in why, why
    assert not sent  # none was sent the actor


def _new_instances_die(monkeypatch, directory, restarts, survivors_from: int):
    """Every process answers the ping before the actor; the new instance's process dies
    before the ping after it (a constructor that ends its process, a kill), except from
    the ``survivors_from``-th creation on. Returns the processes sent the actor."""
    created_on: list[str] = []
    restarts.on_unreachable = lambda worker: directory.suspect(worker)

    def create(worker, actor_id, class_key, class_blob, wire, meta):
        created_on.append(worker)
        return object()

    def ping(worker, fn, timeout):
        if created_on and len(created_on) < survivors_from and worker == created_on[-1]:
            raise RuntimeError("EPIPE: broken pipe")

    monkeypatch.setattr(restarts_mod, "create_remote", create)
    monkeypatch.setattr(restarts_mod.rpc, "rpc_sync", ping)
    directory.mark_dead("w1")
    restarts.worker_died("w1")
    return created_on


def test_a_new_instance_whose_process_dies_as_it_is_made_uses_its_restart(monkeypatch):
    """max_restarts=1: the restarted instance's process dies before the restart's last
    ping. That instance died, so the actor has no restarts left and ends, as in Ray (was:
    taken for a process dead before it got the actor, a try that uses no restart, so the
    actor came back once more, after taking up to 8 processes)."""
    directory, restarts = _cluster(4, max_restarts=1)
    created_on = _new_instances_die(monkeypatch, directory, restarts, survivors_from=99)
    record, why = restarts.locate("a1", timeout=10)
    assert record is None and len(created_on) == 1, (record, created_on)
    assert f"its new instance's process {created_on[0]!r} died as it was made" in why, why
    assert "no restarts left (max_restarts=1)" in why and "EPIPE" in why, why
    (info,) = directory.actors()
    assert info.state == "DEAD" and info.restarts == 1, info


def test_a_restart_after_a_new_instance_died_as_it_was_made_counts_again(monkeypatch):
    """max_restarts=2: the first new instance dies as it is made, the second lives: two
    restarts used, none left."""
    directory, restarts = _cluster(4, max_restarts=2)
    created_on = _new_instances_die(monkeypatch, directory, restarts, survivors_from=2)
    record, why = restarts.locate("a1", timeout=10)
    assert record is not None and len(created_on) == 2, (why, created_on)
    assert record.worker == created_on[1] != created_on[0], (record, created_on)
    (info,) = directory.actors()
    assert info.state == "ALIVE" and info.restarts == 2, info
    assert restarts._recipes["a1"].left == 0


def test_a_restart_whose_every_new_instance_dies_as_it_is_made_says_so(monkeypatch):
    """Unlimited restarts, a constructor that ends every process it runs on: the restart
    stops after CREATE_TRIES processes, saying why."""
    directory, restarts = _cluster(9, max_restarts=-1)
    created_on = _new_instances_die(monkeypatch, directory, restarts, survivors_from=99)
    record, why = restarts.locate("a1", timeout=10)
    assert record is None and len(created_on) == restarts_mod.CREATE_TRIES, created_on
    assert "each new instance's process dying as it was made" in why, why
    assert "a constructor that ends or crashes its process" in why, why


def test_a_restart_that_waits_for_a_replacement_process_counts_once(monkeypatch):
    """Every process died: the first try finds none to place the actor on, waits for a
    replacement, and places it there. That is one restart (was: the try after the wait
    was taken for a retry of a counted one, so actors() said restarts=0)."""
    directory, restarts = _cluster(2, max_restarts=-1)
    waits = []

    def replacement_joins():
        waits.append(1)
        directory.revive("w2")
        restarts.lives.bump("w2")  # as the runtime does first
        restarts.worker_back("w2")
        return True

    directory.await_capacity = replacement_joins
    monkeypatch.setattr(restarts_mod, "create_remote", lambda *a: object())
    monkeypatch.setattr(restarts_mod.rpc, "rpc_sync", lambda *a, **k: None)  # it answers
    directory.mark_dead("w2")
    directory.mark_dead("w1")
    restarts.worker_died("w1")
    record, why = restarts.locate("a1", timeout=10)
    assert waits == [1] and record is not None and record.worker == "w2", (waits, why)
    (info,) = directory.actors()
    assert info.state == "ALIVE" and info.restarts == 1, info


def _one_worker_replaced_under_its_name(monkeypatch, replaced_again: bool):
    """One worker, dead: its replacement takes the name ``w1`` and the actor goes there.
    With ``replaced_again``, that process too dies and is replaced while the actor is
    being created on it."""
    directory, restarts = _cluster(1, max_restarts=-1)
    # The replacement joins once a caller asked where the actor is (as in a real cluster,
    # where the caller's call fails at once and a replacement takes a second).
    asked = threading.Event()
    restarts.on_unreachable = lambda worker: asked.set()

    def replacement_joins():
        asked.wait(10)
        directory.revive("w1")
        restarts.lives.bump("w1")  # as the runtime does first
        restarts.worker_back("w1")
        return True

    created = []

    def create(worker, actor_id, class_key, class_blob, wire, meta):
        created.append(worker)
        if replaced_again and len(created) == 1:
            directory.mark_dead("w1")  # dies before the actor is up, and is replaced
            replacement_joins()
        return object()

    directory.await_capacity = replacement_joins
    monkeypatch.setattr(restarts_mod, "create_remote", create)
    monkeypatch.setattr(restarts_mod.rpc, "rpc_sync", lambda *a, **k: None)  # it answers
    directory.mark_dead("w1")
    restarts.worker_died("w1")
    return restarts, created


def test_a_caller_that_could_not_reach_a_process_finds_the_actor_on_the_one_that_took_its_name(
    monkeypatch,
):
    """The caller's call failed on the dead ``w1``; the actor now lives on the new ``w1``:
    that is where it is, once there (was: rank 0 waited its whole timeout for the actor to
    leave ``w1``, then said it could not find the process dead)."""
    restarts, created = _one_worker_replaced_under_its_name(monkeypatch, replaced_again=False)
    record, why = restarts.locate("a1", timeout=5, away_from="w1")
    assert record is not None and record.worker == "w1" and created == ["w1"], (why, created)
    # One that failed on the new process (not judged yet) still waits for its verdict.
    record, why = restarts.locate("a1", timeout=0.2, away_from="w1")
    assert record is None and "could not be reached" in why, why


def test_an_actor_whose_new_process_was_replaced_while_it_was_created_there_goes_on(
    monkeypatch,
):
    """The process of its name died and was replaced while the actor was created on it:
    the instance died with it, so the actor is created again (was: taken for one living
    on the newest process)."""
    restarts, created = _one_worker_replaced_under_its_name(monkeypatch, replaced_again=True)
    deadline = time.monotonic() + 10
    while len(created) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    record, why = restarts.locate("a1", timeout=5, away_from="w1")
    assert created == ["w1", "w1"] and record is not None, (created, why)


def test_a_caller_waiting_for_a_restart_goes_when_the_cluster_shuts_down(monkeypatch):
    """Its wait would otherwise last the whole timeout (30 s) past the shutdown."""
    directory, restarts = _cluster(1, max_restarts=-1)
    release = threading.Event()
    directory.await_capacity = lambda: release.wait(20)  # a replacement that never comes
    directory.mark_dead("w1")
    restarts.worker_died("w1")
    found = []
    waiter = threading.Thread(target=lambda: found.append(restarts.locate("a1", timeout=20)))
    waiter.start()
    waiter.join(0.3)
    assert not found, found  # waiting for the restart
    restarts.close()
    waiter.join(5)
    release.set()
    assert found == [(None, "the cluster is shutting down")], found


def test_a_restart_in_place_counts_and_is_told_why_not(monkeypatch):
    # actorrt.kill(no_restart=False): the recipe goes to the actor's own process.
    directory, restarts = _cluster(2, max_restarts=1)
    sent = []

    def rpc_sync(worker, fn, args, timeout):
        sent.append((worker, fn, args[0]))
        return True  # restarted there

    monkeypatch.setattr(restarts_mod.rpc, "rpc_sync", rpc_sync)
    assert restarts.restart_in_place("a1", "asked") is None
    assert sent == [("w1", restarts_mod.rpc_restart, "a1")]
    (info,) = [a for a in directory.actors() if a.actor_id == "a1"]
    assert info.restarts == 1
    assert "no restarts left" in restarts.restart_in_place("a1", "asked")  # used up
    assert "no max_restarts" in restarts.restart_in_place("nobody", "asked")
    assert len(sent) == 1


def test_a_restart_in_place_of_an_actor_being_recreated_leaves_it_be(monkeypatch):
    _, restarts = _cluster(2, max_restarts=2)
    restarts._restarting.add("a1")  # its process died: a new instance is on its way
    monkeypatch.setattr(restarts_mod.rpc, "rpc_sync", lambda *a, **k: 1 / 0)  # not called
    assert restarts.restart_in_place("a1", "asked") is None  # not killed
    assert restarts._recipes["a1"].left == 2


def test_a_restart_in_place_that_cannot_reach_the_process_gives_its_restart_back(
    monkeypatch,
):
    _, restarts = _cluster(2, max_restarts=1)

    def unreachable(*_a, **_k):
        raise RuntimeError("connection refused")

    monkeypatch.setattr(restarts_mod.rpc, "rpc_sync", unreachable)
    assert "could not be reached" in restarts.restart_in_place("a1", "asked")
    assert restarts._recipes["a1"].left == 1


def test_an_actor_out_of_restarts_lets_go_of_its_constructor_arguments():
    """Was: rank 0 kept a recipe's constructor arguments (and class) for as long as the
    cluster ran, after its actor had used up its restarts."""
    directory, restarts = _cluster(2, max_restarts=1)
    big = bytearray(1 << 20)
    recipe = Recipe(ActorRecord("a1", "w1", "A", "", 0), "k", b"cls", (big,), {"x": big},
                    ActorOptions(max_restarts=1), {}, left=0)  # fmt: skip
    restarts.keep(recipe)  # in place of _cluster's: its one restart was used
    directory.mark_dead("w1")
    restarts.worker_died("w1")
    assert (recipe.args, recipe.kwargs, recipe.class_blob) == ((), {}, b"")
    record, why = restarts.locate("a1", timeout=1)
    assert record is None and "no restarts left (max_restarts=1)" in why, why
    (info,) = directory.actors()
    assert info.state == "DEAD" and info.death_cause == why, info
