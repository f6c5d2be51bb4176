"""A local cluster started from a layout: the plan decides the processes and the labels.

Each test runs its driver as a script (a process starts one cluster; see
test_lifecycle.py), reads its REPORT lines, and checks that no process of it is left.
"""

import pytest
from scripts import run_script

pytestmark = pytest.mark.timeout(240)

HEADER = """
import dataclasses, os, signal, time
import actorrt

signal.alarm(150)  # a bounded life even if the test that started us is gone

@actorrt.actor(label="learner")
class Learner:
    def where(self):
        return os.getpid()

@actorrt.actor(label="collector")
class Collector:
    def where(self):
        return os.getpid()

@actorrt.actor
class Free:
    def where(self):
        return os.getpid()

"""


def run_driver(tmp_path, body, timeout=180):
    return run_script(tmp_path, HEADER, body, timeout=timeout, name="layout_driver.py")


def test_layout_places_labels_on_the_planned_processes_and_refuses_unknown_ones(tmp_path):
    (rep,) = run_driver(
        tmp_path,
        """
        layout = {"learner": {"count": 1}, "collector": {"count": 3}}
        with actorrt.start(labels=layout, talks=[("collector", "learner")], timeout=90) as rt:
            pids = list(rt.local_worker_pids)
            learner = Learner.remote()
            collectors = [Collector.remote() for _ in range(3)]
            free = Free.remote()
            where = actorrt.get(
                [h.where.remote() for h in (learner, *collectors, free)], timeout=60
            )
            try:
                Collector.options(label="evaluator").remote()
                refused = "no error"
            except actorrt.PlacementError as exc:
                refused = str(exc)
            report(
                pids=pids,
                worker_pids=pids,
                where=where,
                ids=[h.actor_id for h in (learner, *collectors, free)],
                actors=[dataclasses.asdict(a) for a in actorrt.actors()],
                nodes=[dataclasses.asdict(n) for n in actorrt.nodes()],
                plan=actorrt.plan(),
                refused=refused,
            )
        """,
    )
    plan = rep["plan"]
    # One worker process per slot, and the driver (rank 0) holds none.
    assert len(rep["worker_pids"]) == 4
    labels = {p["rank"]: p["labels"] for p in plan["processes"]}
    assert labels == {0: [], 1: ["learner"], 2: ["collector"], 3: ["collector"], 4: ["collector"]}
    pid_of_rank = {r + 1: pid for r, pid in enumerate(rep["worker_pids"])}
    infos = {a["actor_id"]: a for a in rep["actors"]}
    learner_id, *collector_ids, free_id = rep["ids"]
    learner_pid, *collector_pids, free_pid = rep["where"]
    # Each actor runs in the process the plan gave its label (checked by pid, not by name).
    assert pid_of_rank[infos[learner_id]["rank"]] == learner_pid
    assert labels[infos[learner_id]["rank"]] == ["learner"]
    for cid, cpid in zip(collector_ids, collector_pids, strict=True):
        assert labels[infos[cid]["rank"]] == ["collector"]
        assert pid_of_rank[infos[cid]["rank"]] == cpid
    assert len(set(collector_pids)) == 3  # one slot each, three processes
    assert {infos[c]["slot"] for c in collector_ids} == {
        "collector/0",
        "collector/1",
        "collector/2",
    }
    assert infos[free_id]["label"] is None and infos[free_id]["slot"] is None
    assert free_pid in rep["worker_pids"]
    assert all(a["state"] == "ALIVE" for a in rep["actors"])
    nodes = {n["rank"]: n for n in rep["nodes"]}
    assert nodes[0]["hosts_actors"] is False and nodes[0]["actors"] == 0
    assert all(nodes[r]["labels"] == labels[r] and nodes[r]["alive"] for r in range(1, 5))
    # talks: no collector <-> collector pair is planned
    pairs = {(p["src"], p["dst"]) for p in plan["pairs"]}
    names = {p["rank"]: p["name"] for p in plan["processes"]}
    assert (names[2], names[3]) not in pairs and (names[1], names[2]) in pairs
    assert "label 'evaluator' is not in the cluster's layout" in rep["refused"]
    assert "learner, collector" in rep["refused"]


def test_an_infeasible_layout_fails_start_before_any_worker_exists(tmp_path):
    (rep,) = run_driver(
        tmp_path,
        """
        def children():
            mine = []
            for entry in os.listdir("/proc"):
                try:
                    with open(f"/proc/{entry}/stat") as f:
                        ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                except (OSError, ValueError, IndexError):
                    continue
                if ppid == os.getpid():
                    mine.append(int(entry))
            return mine
        before = children()
        import torch
        learners = torch.cuda.device_count() + 1  # one GPU each: one more than this machine has
        try:
            actorrt.start(labels={"learner": {"count": learners, "num_gpus": 1}})
            error = "started"
        except actorrt.PlacementError as exc:
            error = str(exc)
        spawned = [p for p in children() if p not in before]
        report(error=error, spawned=spawned, initialized=actorrt.is_initialized(), pids=spawned)
        """,
    )
    # Either wording names the fix: "set num_gpus=0" (no GPU here) or "lower count or num_gpus".
    assert "label 'learner' needs 1 GPU" in rep["error"] and "num_gpus" in rep["error"]
    assert rep["spawned"] == [] and rep["initialized"] is False


def test_num_workers_with_a_layout_packs_slots_onto_fewer_processes(tmp_path):
    (rep,) = run_driver(
        tmp_path,
        """
        with actorrt.start(labels={"collector": 4}, num_workers=2, timeout=90) as rt:
            pids = list(rt.local_worker_pids)
            hs = [Collector.remote() for _ in range(4)]
            where = actorrt.get([h.where.remote() for h in hs], timeout=60)
            report(pids=pids, where=where, plan=actorrt.plan())
        """,
    )
    assert len(rep["pids"]) == 2
    assert [len(p["slots"]) for p in rep["plan"]["processes"]] == [0, 2, 2]
    assert sorted(rep["where"].count(p) for p in rep["pids"]) == [2, 2]


def test_cluster_and_available_resources_follow_the_layout_and_the_actors(tmp_path):
    # As Ray's: the host's CPUs once, whatever the worker count; reserved as placed.
    (rep,) = run_driver(
        tmp_path,
        """
        from actorrt.placement.discovery import _allowed_cpus
        rt = actorrt.start(labels={"collector": {"count": 2, "num_cpus": 0.25}}, timeout=90)
        pids = list(rt.local_worker_pids)
        total = actorrt.cluster_resources()
        at_start = actorrt.available_resources()
        free = Free.options(num_cpus=0.25).remote()
        with_free = actorrt.available_resources()
        actorrt.kill(free)
        after_kill = actorrt.available_resources()
        actorrt.shutdown()
        report(pids=pids, cpus=_allowed_cpus(), total=total, at_start=at_start,
               with_free=with_free, after_kill=after_kill)
        """,
    )
    cpus = float(rep["cpus"])
    assert rep["total"] == {"CPU": cpus}  # no GPU here: no "GPU" key, as in Ray
    assert rep["at_start"] == {"CPU": cpus - 0.5}  # the two collector slots, taken at start
    assert rep["with_free"] == {"CPU": cpus - 0.75}
    assert rep["after_kill"] == {"CPU": cpus - 0.5}


def test_an_actor_in_a_layouts_slot_has_its_label_as_a_node_label(tmp_path):
    (rep,) = run_driver(
        tmp_path,
        """
        @actorrt.actor(label="collector")
        class Labelled:
            def parts(self):
                ctx = actorrt.get_runtime_context()
                return ctx.get_node_labels(), ctx.get_job_id()

        with actorrt.start(labels={"collector": 2}, num_workers=1, timeout=90) as rt:
            ctx = actorrt.get_runtime_context()
            report(
                pids=list(rt.local_worker_pids),
                driver=[ctx.get_node_labels(), ctx.get_job_id()],
                actor=actorrt.get(Labelled.remote().parts.remote(), timeout=60),
            )
        """,
    )
    labels, job = rep["actor"]
    assert labels == {"collector": ""}  # actorrt's labels have no values
    assert rep["driver"] == [{}, job]  # the driver holds no slot; one job in the cluster
