"""Label layouts on GPUs: GPU slots get GPUs, fractions share one, CPU slots get CUDA
tensors staged through host memory; ``actorrt.actors()`` / ``actorrt.nodes()`` say where.

``actorrt.start(labels={...})`` starts one local worker process per slot. Each test runs
its cluster in a driver script (see gpu_testlib.run_driver): the script always shuts the
cluster down, dies by SIGALRM if it hangs, and its workers are killed by pid at the end.
"""

from __future__ import annotations

import pytest
from gpu_testlib import (
    cuda_count,
    need_api,
    need_gpus,
    need_start_option,
    requires_cuda,
    run_driver,
)

pytestmark = [requires_cuda, pytest.mark.timeout(330)]

N = 1 << 20  # elements: 4 MiB of float32 (a CPU tensor this large takes the shm road)


def _processes(rep):
    return {p["name"]: p for p in rep["processes"]}


_PLAN_REPORT = """
def plan_report(rt):
    return [
        dict(name=p.name, rank=p.rank, labels=list(p.labels), gpus=list(p.gpus),
             devices=list(p.devices), device_maps=p.device_maps,
             slots=[dict(label=s.label, gpus=list(s.gpus), num_gpus=s.num_gpus)
                    for s in p.slots])
        for p in rt.plan.processes
    ]
"""


def test_cuda_tensors_to_a_cpu_slot_arrive_as_cpu_tensors(tmp_path):
    """transport="auto": the GPU slot's process has no device map to the CPU slot's, so
    CUDA tensors sent there (by an actor or by the driver) are staged to the CPU."""
    need_start_option("labels")
    rep = run_driver(
        tmp_path,
        f"""
        N = {N}
        LABELS = {{"learner": {{"count": 1, "num_gpus": 1}},
                  "collector": {{"count": 1, "num_gpus": 0}}}}

        def payload(t, tag):
            return {{"big": t, "small": t[:3].clone(), "meta": [t[:5].clone(), tag]}}

        @actorrt.actor(label="learner", num_gpus=1)
        class GpuSide:
            def where(self):
                return torch.cuda.current_device()

            def send(self, other, n):
                t = torch.arange(n, dtype=torch.float32, device="cuda")  # our GPU
                got = actorrt.get(other.receive.remote(payload(t, "actor")), timeout=60)
                back = got.pop("back")
                got.update(
                    sender_device=str(t.device),
                    back_device=str(back.device),
                    back_ok=bool(torch.equal(back.cpu(), (t + 1).cpu())),
                )
                return got

        @actorrt.actor(label="collector", num_gpus=0)
        class CpuSide:
            def receive(self, p):
                big = p["big"]
                return {{
                    "devices": [str(big.device), str(p["small"].device),
                                str(p["meta"][0].device)],
                    "tag": p["meta"][1],
                    "small": p["small"].tolist(),
                    "meta": p["meta"][0].tolist(),
                    "sum": float(big.double().sum()),
                    "back": big + 1,
                }}

        with actorrt.start(labels=LABELS, transport="auto", timeout=120) as rt:
            started(rt)
            report(processes=plan_report(rt))
            g = GpuSide.remote()
            c = CpuSide.remote()
            gpu = actorrt.get(g.where.remote(), timeout=60)
            sent = {{str(n): actorrt.get(g.send.remote(c, n), timeout=60) for n in (1000, N)}}
            x = torch.arange(1000, dtype=torch.float32, device="cuda:0")
            direct = actorrt.get(c.receive.remote(payload(x, "driver")), timeout=60)
            back = direct.pop("back")
            direct.update(back_device=str(back.device),
                          back_ok=bool(torch.equal(back, (x + 1).cpu())))
            report(g=g.worker, c=c.worker, gpu=gpu, sent=sent, direct=direct)
        """,
        prelude=_PLAN_REPORT,
    )
    procs = _processes(rep)
    workers = [p for p in procs.values() if p["rank"] != 0]
    assert len(workers) == 2, "one worker process per slot"
    (gp,) = [p for p in workers if "learner" in p["labels"]]
    (cp,) = [p for p in workers if "collector" in p["labels"]]
    assert rep["g"] == gp["name"] and rep["c"] == cp["name"]
    # the plan: the GPU slot got a GPU, the CPU slot's process offers none to RPC
    assert len(gp["gpus"]) == 1 and rep["gpu"] == gp["gpus"][0], (gp, rep["gpu"])
    assert cp["gpus"] == [] and cp["device_maps"] == {} and cp["devices"] == [], cp
    assert all(cp["name"] not in p["device_maps"] for p in procs.values())
    for n_str, got in rep["sent"].items():
        n = int(n_str)
        assert got["devices"] == ["cpu", "cpu", "cpu"], got  # staged, nested ones too
        assert got["tag"] == "actor" and got["small"] == [0.0, 1.0, 2.0]
        assert got["meta"] == [0.0, 1.0, 2.0, 3.0, 4.0]
        assert got["sum"] == n * (n - 1) / 2, (n, got)
        assert got["sender_device"] == f"cuda:{rep['gpu']}"
        assert got["back_device"] == "cpu" and got["back_ok"], got
    direct = rep["direct"]
    assert direct["devices"] == ["cpu", "cpu", "cpu"] and direct["tag"] == "driver", direct
    assert direct["sum"] == 1000 * 999 / 2
    assert direct["back_device"] == "cpu" and direct["back_ok"], direct


LAYOUTS = {
    # a whole GPU for the learner; the two collectors share the other GPU
    "whole_gpu_learner": (2, {"learner": (1, 1), "collector": (2, 0.5)}),
    # one GPU for all: a half for the learner, a quarter for each collector
    "one_shared_gpu": (1, {"learner": (1, 0.5), "collector": (2, 0.25)}),
}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_layout_places_gpu_slots_and_actors_nodes_report_it(tmp_path, layout):
    gpus_needed, spec = LAYOUTS[layout]
    need_gpus(gpus_needed)
    need_start_option("labels")
    need_api("actors", "nodes")
    labels = {k: {"count": c, "num_gpus": g} for k, (c, g) in spec.items()}
    rep = run_driver(
        tmp_path,
        f"""
        N = {N}
        LABELS = {labels!r}

        def where():
            cur = torch.cuda.current_device()
            return [os.getpid(), cur, str(torch.cuda.get_device_properties(cur).uuid)]

        @actorrt.actor(label="learner", num_gpus=LABELS["learner"]["num_gpus"])
        class Learner:
            def where(self):
                return where()

            def receive(self, t):
                return {{"device": str(t.device), "current": torch.cuda.current_device(),
                         "sum": float(t.double().sum())}}

        @actorrt.actor(label="collector", num_gpus=LABELS["collector"]["num_gpus"])
        class Collector:
            def where(self):
                return where()

            def push(self, learner, n):
                t = torch.arange(n, dtype=torch.float32, device="cuda")
                got = actorrt.get(learner.receive.remote(t), timeout=60)
                got["sender_device"] = str(t.device)
                return got

        ACTOR_FIELDS = ("actor_id", "class_name", "name", "label", "process", "rank", "host",
                        "gpus", "state")
        NODE_FIELDS = ("process", "rank", "host", "labels", "gpus", "alive")

        with actorrt.start(labels=LABELS, timeout=120) as rt:
            started(rt)
            report(processes=plan_report(rt),
                   buses=[{{g["index"]: g.get("pci_bus_id", "") for g in d.get("gpus", [])}}
                          for d in rt.descriptions])
            learner = Learner.options(name="the-learner").remote()
            collectors = [Collector.remote() for _ in range(2)]
            handles = [learner, *collectors]
            where_ = actorrt.get([h.where.remote() for h in handles], timeout=60)
            pushes = actorrt.get([c.push.remote(learner, N) for c in collectors], timeout=60)
            actors = [{{k: field(r, k) for k in ACTOR_FIELDS}} for r in actorrt.actors()]
            nodes = [{{k: field(r, k) for k in NODE_FIELDS}} for r in actorrt.nodes()]
            report(handles=[dict(actor_id=h.actor_id, worker=h.worker) for h in handles],
                   where=where_, pushes=pushes, actors=actors, nodes=nodes)
        """,
        prelude=_PLAN_REPORT,
    )
    procs = _processes(rep)
    workers = [p for p in procs.values() if p["rank"] != 0]
    assert len(workers) == 3, "one worker process per slot"
    lps = [p for p in workers if p["labels"] == ["learner"]]
    cps = [p for p in workers if p["labels"] == ["collector"]]
    assert len(lps) == 1 and len(cps) == 2, workers
    (lp,) = lps

    # -- the plan: every GPU slot got one GPU; capacity is counted per physical GPU
    def bus(proc, index):
        b = rep["buses"][proc["rank"]][str(index)]  # JSON keys are strings
        assert b, f"no PCI bus id for GPU {index} of {proc['name']}"
        return b

    load: dict[str, float] = {}
    for p in workers:
        assert len(p["gpus"]) == 1, p  # "the learner's process gets a GPU" (and so on)
        for s in p["slots"]:
            assert len(s["gpus"]) == 1, s
            b = bus(p, s["gpus"][0])
            load[b] = load.get(b, 0.0) + min(1.0, s["num_gpus"])
    assert max(load.values()) <= 1.0 + 1e-9, load
    whole = spec["learner"][1] >= 1
    if whole:
        collector_buses = {bus(p, p["gpus"][0]) for p in cps}
        assert bus(lp, lp["gpus"][0]) not in collector_buses, "the learner's GPU is whole"
        if cuda_count() == 2:  # one GPU left: the two half-GPU collectors must share it
            assert len(collector_buses) == 1, "the two half-GPU collectors share one GPU"

    # -- the actors: where the plan says, on the GPU the plan gave their process
    (lh, *chs) = rep["handles"]
    (l_pid, l_cur, l_uuid), *c_where = rep["where"]
    assert lh["worker"] == lp["name"] and l_cur == lp["gpus"][0]
    assert sorted(h["worker"] for h in chs) == sorted(p["name"] for p in cps)
    for h, (_, cur, _) in zip(chs, c_where, strict=True):
        assert cur == procs[h["worker"]]["gpus"][0], (h, cur)
    if whole:
        c_uuids = {u for _, _, u in c_where}
        assert l_uuid not in c_uuids, rep["where"]
        if cuda_count() == 2:
            assert len(c_uuids) == 1, rep["where"]
    # collectors push CUDA tensors GPU to GPU into the learner's GPU
    for got, (_, cur, _) in zip(rep["pushes"], c_where, strict=True):
        assert got["sender_device"] == f"cuda:{cur}"
        assert got["device"] == f"cuda:{l_cur}" and got["current"] == l_cur, got
        assert got["sum"] == N * (N - 1) / 2
    for p in cps:  # a device map joins each collector's process with the learner's
        assert lp["name"] in p["device_maps"] and p["name"] in lp["device_maps"], (p, lp)

    # -- actorrt.actors(): one record per actor, matching its handle and the plan
    records = {r["actor_id"]: r for r in rep["actors"]}
    expected = [
        (lh, "Learner", "the-learner", "learner", [lp["gpus"][0]]),
        *((h, "Collector", None, "collector", [procs[h["worker"]]["gpus"][0]]) for h in chs),
    ]
    hosts = set()
    for h, cls, name, label, gpus in expected:
        assert h["actor_id"] in records, (h, sorted(records))
        r = records[h["actor_id"]]
        assert (r["class_name"], r["label"], r["process"]) == (cls, label, h["worker"]), r
        assert r["rank"] == procs[h["worker"]]["rank"], r
        assert list(r["gpus"]) == gpus, r
        assert "dead" not in str(r["state"]).lower(), r
        if name is not None:
            assert r["name"] == name, r
        assert r["host"], r
        hosts.add(r["host"])
    assert len(hosts) == 1, hosts  # one machine

    # -- actorrt.nodes(): every worker process, alive, with its label and GPUs
    nodes = {n["process"]: n for n in rep["nodes"]}
    for p in workers:
        assert p["name"] in nodes, (p["name"], sorted(nodes))
        n = nodes[p["name"]]
        assert n["rank"] == p["rank"] and n["alive"] is True, n
        assert p["labels"][0] in n["labels"], n
        assert n["gpus"], f"{p['name']} hosts a GPU slot but nodes() lists no GPU: {n}"
        assert n["host"] in hosts, (n, hosts)
