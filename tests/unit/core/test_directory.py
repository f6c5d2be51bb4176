"""The cluster directory: slots of the layout, the plan's placer for the rest, names, records.

No processes: the directory is built from a plan made over synthetic node descriptions.
"""

import sys
from dataclasses import replace
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "placement"))
from placement_testlib import node  # noqa: E402

from actorrt.errors import PlacementError  # noqa: E402
from actorrt.options import ActorOptions  # noqa: E402
from actorrt.placement import LabelSpec, Layout, ProcessInfo, make_plan  # noqa: E402
from actorrt.runtime.directory import ClusterDirectory  # noqa: E402
from actorrt.runtime.protocol import ActorRecord  # noqa: E402


def _cluster(*workers, layout=None):
    """A driver (rank 0, hosts no actors) and the given worker nodes, planned with ``layout``."""
    driver = replace(workers[0], labels=(), hosts_actors=False)  # on the first worker's host
    ps = [ProcessInfo(0, "driver", driver)]
    ps += [ProcessInfo(i + 1, f"w{i + 1}", n) for i, n in enumerate(workers)]
    plan = make_plan(ps, layout or Layout())
    return ClusterDirectory(plan, ps), plan


def test_without_layout_least_loaded_process_first_then_lowest_rank_never_the_driver():
    d, _ = _cluster(node("a"), node("a"))
    got = [d.place(f"a{i}", ActorOptions(), "A").worker for i in range(4)]
    assert got == ["w1", "w2", "w1", "w2"]
    d.release("a0")
    assert d.place("a4", ActorOptions(), "A").worker == "w1"


def test_without_layout_worker_labels_constrain():
    d, _ = _cluster(node("a", labels=("learner",)), node("a", labels=("collector",)))
    assert d.place("l", ActorOptions(label="learner"), "L").worker == "w1"
    assert d.place("c", ActorOptions(label="collector"), "C").worker == "w2"
    with pytest.raises(PlacementError, match="no process offers label 'evaluator'") as caught:
        d.place("e", ActorOptions(label="evaluator"), "E")
    # the fix for each way a cluster is made: start(), a node's worker, a cluster file
    for fix in (
        "actorrt.start(labels={'evaluator': 1})",
        "actorrt worker --labels evaluator",
        "labels = ['evaluator'] on a node",
    ):
        assert fix in str(caught.value)
    free, _ = _cluster(node("a"), node("a"))
    assert free.place("l", ActorOptions(label="learner"), "L").worker == "w1"


def test_gpu_capacity_is_per_physical_gpu_not_per_process():
    # Two processes see the same two GPUs: three whole-GPU actors cannot fit, and two
    # halves share one GPU wherever they run.
    d, _ = _cluster(node("a", 2), node("a", 2))
    a = d.place("a", ActorOptions(num_gpus=1), "A")
    b = d.place("b", ActorOptions(num_gpus=1), "B")
    assert {a.gpu_ids, b.gpu_ids} == {(0,), (1,)} and a.worker != b.worker
    with pytest.raises(PlacementError, match="needs 1 GPU; no node with a free GPU"):
        d.place("c", ActorOptions(num_gpus=1), "C")
    d.release("a")
    h1 = d.place("h1", ActorOptions(num_gpus=0.5), "H")
    h2 = d.place("h2", ActorOptions(num_gpus=0.5), "H")
    assert h1.gpu_ids == h2.gpu_ids == a.gpu_ids
    with pytest.raises(PlacementError):
        d.place("h3", ActorOptions(num_gpus=0.5), "H")


def test_gpu_request_on_a_cpu_cluster_says_what_to_do():
    d, _ = _cluster(node("a"))
    with pytest.raises(PlacementError, match=r"Learner: .*needs 1 GPU; no process .* num_gpus=0"):
        d.place("a", ActorOptions(num_gpus=1), "Learner")


def test_cpu_reservations_per_host_and_dead_processes():
    one_cpu = replace(node("a"), num_cpus=1)
    d, _ = _cluster(one_cpu, replace(node("b"), num_cpus=1))
    assert d.place("a", ActorOptions(num_cpus=1), "A").worker == "w1"
    d.mark_dead("w2")
    with pytest.raises(PlacementError, match="num_cpus=1; no host has that many CPUs free"):
        d.place("b", ActorOptions(num_cpus=1), "B")
    assert d.place("c", ActorOptions(), "C").worker == "w1"  # 0 CPUs reserves nothing
    states = {a.actor_id: a.state for a in d.actors()}
    assert states == {"a": "ALIVE", "c": "ALIVE"}


def test_labelled_actors_go_into_the_plans_slots():
    layout = Layout((LabelSpec("learner", 1, num_gpus=1), LabelSpec("collector", 2, 0.5)))
    d, plan = _cluster(node("a", 1), node("b", 1), node("b", 1), layout=layout)
    slot_of = {(s.label, s.index): pp.name for pp in plan.processes for s in pp.slots}
    learner = d.place("L", ActorOptions(label="learner", num_gpus=1), "Learner")
    c0 = d.place("c0", ActorOptions(label="collector", num_gpus=0.5), "Collector")
    c1 = d.place("c1", ActorOptions(label="collector", num_gpus=0.5), "Collector")
    assert learner.worker == slot_of[("learner", 0)] and learner.gpu_ids == (0,)
    assert {c0.worker, c1.worker} == {slot_of[("collector", 0)], slot_of[("collector", 1)]}
    infos = {a.actor_id: a for a in d.actors()}
    assert infos["L"].slot == "learner/0" and infos["L"].host == "a"
    assert {infos["c0"].slot, infos["c1"].slot} == {"collector/0", "collector/1"}
    # A slot's GPU share is reserved in the plan: an unlabelled GPU actor cannot take it.
    with pytest.raises(PlacementError, match="no node with a free GPU"):
        d.place("x", ActorOptions(num_gpus=1), "X")
    # Slots are full: a third GPU collector is refused with the fix named.
    with pytest.raises(PlacementError, match="all 2 slot\\(s\\) of label 'collector'.*raise count"):
        d.place("c2", ActorOptions(label="collector", num_gpus=0.5), "Collector")
    # Zero-resource actors share a slot (as actors share a Ray placement-group bundle).
    assert d.place("c3", ActorOptions(label="collector"), "Collector").worker in (
        c0.worker,
        c1.worker,
    )
    d.release("c0")
    assert d.place("c4", ActorOptions(label="collector", num_gpus=0.5), "C").worker == c0.worker


def test_label_outside_the_layout_and_too_big_a_request_are_refused():
    layout = Layout((LabelSpec("learner"), LabelSpec("collector", 2)))
    d, _ = _cluster(node("a"), node("a"), node("a"), layout=layout)
    with pytest.raises(
        PlacementError, match="label 'evaluator' is not in the cluster's layout.*learner, collector"
    ):
        d.place("e", ActorOptions(label="evaluator"), "Evaluator")
    with pytest.raises(PlacementError, match="asks num_cpus=0, num_gpus=1, more than a 'learner'"):
        d.place("l", ActorOptions(label="learner", num_gpus=1), "Learner")


def test_nodes_report_the_plan_and_liveness():
    layout = Layout((LabelSpec("learner"),))
    d, _ = _cluster(node("a"), node("b"), layout=layout)
    d.place("l", ActorOptions(label="learner"), "L")
    d.mark_dead("w2")
    nodes = {n.process: n for n in d.nodes()}
    assert not nodes["driver"].hosts_actors and nodes["driver"].rank == 0
    assert nodes["w1"].labels == ("learner",) and nodes["w1"].actors == 1
    assert nodes["w2"].alive is False and nodes["w1"].alive is True


def test_names_register_lookup_and_go_with_the_actor():
    d, _ = _cluster(node("a"))
    d.place("x", ActorOptions(name="svc"), "A")

    record = ActorRecord("x", "worker1", "A", "")
    d.register_name("svc", record)
    assert d.lookup("svc") is record
    with pytest.raises(ValueError, match="already exists"):
        d.register_name("svc", record)
    d.release("x")
    assert d.lookup("svc") is None


def test_a_process_that_grows_the_cluster_takes_actors_but_no_slot_or_device_map():
    layout = Layout((LabelSpec("learner", 1, num_gpus=1),))
    workers = [node("a", 2), node("a", 2)]
    driver = replace(workers[0], labels=(), hosts_actors=False)
    ps = [ProcessInfo(0, "driver", driver)]
    ps += [ProcessInfo(i + 1, f"worker{i + 1}", n) for i, n in enumerate(workers)]
    plan = make_plan(ps, layout)
    d = ClusterDirectory(plan, ps)
    for i in range(2):
        d.place(f"x{i}", ActorOptions(), "X")  # one each on worker1 and worker2
    newcomer = ProcessInfo(3, "worker3", node("b", 2, labels=("collector",)))
    bigger = make_plan([*ps, newcomer], Layout())
    grown = plan.grown(bigger, 3)
    d.grow(grown, newcomer)
    new = grown.for_rank(3)
    assert [p.name for p in grown.processes] == ["driver", "worker1", "worker2", "worker3"]
    assert new.device_maps == {} and new.slots == () and new.devices == []
    assert grown.processes[:3] == plan.processes  # the running ones keep theirs
    assert {(p.src, p.dst) for p in grown.pairs} - {(p.src, p.dst) for p in plan.pairs} == {
        (a, b) for a, b in {(p.src, p.dst) for p in bigger.pairs} if "worker3" in (a, b)
    }
    # actors outside the slots: the least loaded process, the newcomer
    assert d.place("y", ActorOptions(), "Y").worker == "worker3"
    assert [n.process for n in d.nodes()][-1] == "worker3" and d.nodes()[-1].alive
    # the layout's slots stay where start() put them
    assert d.place("l", ActorOptions(label="learner", num_gpus=1), "L").worker != "worker3"
    with pytest.raises(PlacementError, match="rank 3 is already in the plan"):
        grown.grown(bigger, 3)


def test_without_layout_a_grown_process_offers_its_labels():
    learner = node("a", labels=("learner",))
    d, plan = _cluster(learner, learner)
    with pytest.raises(PlacementError, match="no process offers label 'collector'"):
        d.place("c0", ActorOptions(label="collector"), "C")
    newcomer = ProcessInfo(3, "w3", node("b", labels=("collector",)))
    ps = [ProcessInfo(p.rank, p.name, learner) for p in plan.processes]
    d.grow(plan.grown(make_plan([*ps, newcomer], Layout()), 3), newcomer)
    assert d.place("c", ActorOptions(label="collector"), "C").worker == "w3"
    assert d.place("l", ActorOptions(label="learner"), "L").worker == "w1"


class _NotMadeAgain(Exception):
    def __init__(self, code, msg):
        super().__init__(f"code {code}: {msg}")


def _raises(exc):
    raise exc


def test_a_directory_call_sends_its_exception_back_as_a_value():
    from actorrt.errors import ActorRtError, PlacementError
    from actorrt.runtime.directory import rpc_directory

    assert rpc_directory(lambda a, b: a + b, 1, 2) == (True, 3)
    ok, exc = rpc_directory(_raises, PlacementError("no room"))
    assert not ok and type(exc) is PlacementError and str(exc) == "no room"
    assert exc.__traceback__ is None
    ok, exc = rpc_directory(_raises, _NotMadeAgain(7, "full"))  # cannot be unpickled
    assert not ok and type(exc) is ActorRtError and str(exc) == "_NotMadeAgain: code 7: full"


def test_a_nodes_actor_count_leaves_out_those_that_died_there():
    """Was: a replaced worker's node counted the actors that died with its old process."""
    d, _ = _cluster(node("a"), node("a"))
    for i in range(3):
        d.place(f"a{i}", ActorOptions(), "A")  # w1, w2, w1
    d.mark_dead("w1")
    d.revive("w1")  # a new process took the name
    counts = {n.process: n.actors for n in d.nodes()}
    assert counts == {"driver": 0, "w1": 0, "w2": 1}
    assert d.place("b", ActorOptions(), "B").worker == "w1"
    assert {n.process: n.actors for n in d.nodes()}["w1"] == 1


def test_an_ended_actor_keeps_a_dead_row_that_says_why():
    """Was: a killed, exited or released actor vanished from actors(), and so did a
    restartable one whose restart's constructor failed; only those whose process died
    stayed, as DEAD, with no cause."""
    d, _ = _cluster(node("a"), node("a"))
    for i in range(3):
        d.place(f"a{i}", ActorOptions(), "A")  # w1, w2, w1
    d.release("a0", "A actor a0 failed in __init__: ValueError: no\n\nTraceback ...")
    d.release("a0", "no handle refers to the actor any more")  # the first cause stays
    d.mark_dead("w2")
    rows = {a.actor_id: (a.state, a.death_cause) for a in d.actors()}
    assert rows == {
        "a0": ("DEAD", "A actor a0 failed in __init__: ValueError: no"),
        "a1": ("DEAD", "its process 'w2' died"),
        "a2": ("ALIVE", None),
    }
    assert d.death_cause("a0") == "A actor a0 failed in __init__: ValueError: no"
    assert d.where("a0") == ("w1", "DEAD")
    with pytest.raises(KeyError):  # an ended actor is not restarted
        d.replace("a0", ActorOptions(), "A")
    d.release("x", "")  # unknown: nothing
    d.place("never", ActorOptions(), "A")
    d.release("never")  # it never came to be (its creation failed): no row
    assert "never" not in {a.actor_id for a in d.actors()}


def test_an_ended_actor_gives_back_its_place_once():
    """Was: an actor that died with a replaced process gave back its place at the
    replacement and again when it was killed, so its process counted one actor fewer than
    it hosted, and the next actor went there instead of to the emptier process."""
    d, _ = _cluster(node("a"), node("a"))
    assert d.place("a", ActorOptions(), "A").worker == "w1"
    d.mark_dead("w1")
    d.revive("w1")
    assert d.place("b", ActorOptions(), "B").worker == "w1"
    d.release("a", "killed")
    assert d.place("c", ActorOptions(), "C").worker == "w2"


def test_only_the_newest_ended_rows_are_kept(monkeypatch):
    """What an ended actor took is given back once, however often it is released, and
    only the newest ended rows are kept."""
    monkeypatch.setattr("actorrt.runtime.directory.MAX_ENDED_ROWS", 2)
    d, _ = _cluster(replace(node("a"), num_cpus=1))
    d.place("a", ActorOptions(num_cpus=1), "A")
    d.mark_dead("w1")
    d.revive("w1")  # gives back a's CPU
    d.release("a", "killed")  # again: nothing more to give back
    d.place("b", ActorOptions(num_cpus=1), "B")
    with pytest.raises(PlacementError, match="no host has that many CPUs free"):
        d.place("c", ActorOptions(num_cpus=1), "C")
    for name in ("b", "d", "e"):
        if name != "b":
            d.place(name, ActorOptions(), "D")
        d.release(name, "killed")
    assert [a.actor_id for a in d.actors()] == ["d", "e"]  # "a" and "b" went, oldest first


def test_an_actor_that_died_with_its_process_gives_back_its_cpus_on_that_host():
    """Was: an actor whose process died (and was not replaced) kept its CPUs reserved on
    its host, which its live neighbours there share: an actor needing all of them could
    never be placed again. Also once its row is pruned (it was dropped unfreed)."""
    d, _ = _cluster(replace(node("a"), num_cpus=2), replace(node("a"), num_cpus=2))
    assert d.place("a", ActorOptions(num_cpus=1), "A").worker == "w1"
    d.mark_dead("w1")
    assert d.place("b", ActorOptions(num_cpus=2), "B").worker == "w2"


@pytest.mark.parametrize("first_registers", [True, False])
def test_a_get_if_exists_creator_without_room_waits_for_the_one_creating_its_name(
    first_registers,
):
    """Two creators of one name race with get_if_exists, and only one fits. Was: the
    second's placement failed (PlacementError) while the first, placed, had not yet
    registered the name, so it never learnt the actor existed. Now its placement waits
    for the first to register (it then fails, and the caller finds the name) or to give
    up (it then takes the room)."""
    import threading

    d, _ = _cluster(replace(node("a"), num_cpus=1))
    opts = ActorOptions(num_cpus=1, name="x", get_if_exists=True)
    assert d.place("first", opts, "A").worker == "w1"
    outcome = []

    def second():
        try:
            outcome.append(d.place("second", opts, "A").worker)
        except PlacementError as exc:
            outcome.append(f"PlacementError: {exc}")

    t = threading.Thread(target=second)
    t.start()
    t.join(0.3)
    assert t.is_alive() and not outcome  # it waits for the first to settle
    if first_registers:
        assert d.register_name("x", ActorRecord("first", "w1", "A", "", 0), True) is None
    else:
        d.release("first")  # its creation failed
    t.join(10)
    assert not t.is_alive()
    if first_registers:
        assert outcome[0].startswith("PlacementError") and d.lookup("x").actor_id == "first"
    else:
        assert outcome == ["w1"]
