"""Multi-node clusters across real network boundaries, built from namespaces on this host.

* three "hosts": three network namespaces on one bridge (10.77.N.0/24, which exists only
  inside them), a driver and a worker in the first, a worker in each of the others;
* two "containers": separate net / pid / ipc / mount namespaces sharing the boot id.

Needs root and iproute2 (CI runs as root); skips with the reason otherwise.
"""

import json
import os
import subprocess

import pytest
from netns import PY, Hosts, driver_argv, require_netns, require_unshare, worker_argv

pytestmark = [pytest.mark.timeout(150), pytest.mark.netns]

TOKEN = "netns-test-token"
PORT = 29500  # fresh namespaces: nothing else listens there


def _hosts(n):
    require_netns()
    return Hosts(n)


def _run_cluster(
    procs, hosts, cfg, workers, *, driver_wrap=(), worker_wrap=(), driver_env=None, timeout=90
):
    """Runs the driver on host 0 and each ``(rank, host, extra args)`` worker; its result.

    Workers off host 0 are told their interface; on host 0 they find it themselves (the
    one holding the rendezvous address). Every process must exit 0; all are cleaned up.
    """
    env = {"ACTORRT_TOKEN": TOKEN}
    try:
        procs.start(
            "driver",
            driver_argv(cfg, hosts.exec_prefix(0) + list(driver_wrap)),
            {**env, **(driver_env or {})},
        )
        for rank, host, extra in workers:
            wenv = {**env, "TP_SOCKET_IFNAME": hosts.ifnames[host]} if host else env
            prefix = hosts.exec_prefix(host) + list(worker_wrap)
            procs.start(
                f"worker{rank}",
                worker_argv(cfg["init"], rank, cfg["world"], *extra, prefix=prefix),
                wenv,
            )
        res = procs.result("driver", timeout)
        assert procs.wait("driver", 30) == 0, procs.logs()
        for rank, _, _ in workers:
            assert procs.wait(f"worker{rank}", 20) == 0, procs.logs()
        return res
    finally:
        procs.close()
        hosts.close()


def test_three_hosts_labels_calls_and_64mb_tensors(procs):
    hosts = _hosts(3)
    # Host 0: the driver and a worker find their interface themselves (the one holding /
    # reaching the rendezvous address); hosts 1 and 2 are told.
    cfg = {"init": f"tcp://{hosts.addrs[0]}:{PORT}", "world": 4, "scenario": "hosts"}
    workers = [
        (rank, host, ("--labels", label))
        for rank, host, label in ((1, 0, "hostA"), (2, 1, "collector"), (3, 2, "learner"))
    ]
    res = _run_cluster(procs, hosts, cfg, workers, timeout=120)

    a, coll, learn = res["where"]
    # labels honoured: each actor runs on the worker, and in the namespace, offering it
    assert (a["rank"], coll["rank"], learn["rank"]) == (1, 2, 3)
    assert [a["net"], coll["net"], learn["net"]] == [hosts.inode(i) for i in range(3)]
    assert res["driver_net"] == hosts.inode(0)
    assert res["driver_ifname"] == "arth0" and a["ifname"] == "arth0"  # found, not told
    assert (coll["ifname"], learn["ifname"]) == ("arth1", "arth2")
    assert res["echo_ok"]
    assert res["relay_collector_to_learner"][0] is True
    assert res["relay_collector_to_learner"][1]["rank"] == 3
    assert res["relay_learner_to_a"][0] is True
    assert "no process offers label 'nowhere'" in res["missing_label"]
    pairs = {(s, d): t for s, d, t in res["plan_pairs"]}
    # same host, same namespaces: shm, unless the host has fewer CPUs than the 4 processes
    # the plan puts on it (every namespace here is one kernel, one boot id: one host)
    crowded = len(os.sched_getaffinity(0)) < 4
    assert pairs[("driver", "worker1")] == ("tcp" if crowded else "shm")
    for other in ("worker2", "worker3"):
        assert pairs[("driver", other)] == "tcp"
    assert pairs[("worker1", "worker2")] == pairs[("worker2", "worker3")] == "tcp"
    # the driver's interface name is not forced on the others: no TP_SOCKET_IFNAME in the plan
    assert all("TP_SOCKET_IFNAME" not in env for env in res["plan_env"].values())


def test_three_hosts_layout_without_worker_labels(procs, tmp_path):
    """A layout given to the driver; workers start without --labels and get theirs from the plan.

    The slots land where the plan says (spread: the collectors in different namespaces),
    and ``actorrt plan`` run on ``dump_cluster()``'s file prints the live plan exactly.
    """
    hosts = _hosts(3)
    dump = tmp_path / "cluster.toml"
    cfg = {
        "init": f"tcp://{hosts.addrs[0]}:{PORT}",
        "world": 4,
        "scenario": "layout",
        "labels": {"learner": {"count": 1}, "collector": {"count": 2}},
        "talks": [["collector", "learner"]],
        "dump": str(dump),
    }
    workers = [(1, 0, ()), (2, 1, ()), (3, 2, ())]  # no --labels
    res = _run_cluster(procs, hosts, cfg, workers, timeout=120)

    plan, where = res["plan"], res["where"]
    # The placer keys hosts by boot id, which these namespaces share: it sees one host
    # (rank 0's host position 0, ranks 1-3 at 1-3) and balances slots over processes:
    # the learner on rank 1 (load 0, first position after the driver), then the
    # collectors on ranks 2 and 3 (load 0 before rank 1's load 1).
    learn, *colls = where
    assert learn["rank"] == 1
    assert [c["rank"] for c in colls] == [2, 3]
    assert learn["net"] == res["driver_net"] == hosts.inode(0)
    assert [c["net"] for c in colls] == [hosts.inode(1), hosts.inode(2)]  # different hosts

    # actorrt.actors(): each actor runs where its record says, in its slot
    infos = {a["actor_id"]: a for a in res["actors"]}
    assert len(infos) == 3, res["actors"]
    for w, label in zip(where, ("learner", "collector", "collector"), strict=True):
        info = infos[w["actor_id"]]
        assert info["rank"] == w["rank"], info
        assert info["label"] == label and info["class_name"] == "Probe", info
        assert info["state"] == "ALIVE" and info["slot"].startswith(f"{label}/"), info
    assert sorted(infos[c["actor_id"]]["slot"] for c in colls) == ["collector/0", "collector/1"]

    # the plan: its processes carry the labels of the slots placed on them
    by_rank = {p["rank"]: p for p in plan["processes"]}
    assert sorted(by_rank) == [0, 1, 2, 3]
    assert by_rank[0]["labels"] == []
    assert by_rank[1]["labels"] == ["learner"]
    assert by_rank[2]["labels"] == by_rank[3]["labels"] == ["collector"]
    assert plan["strategy"] == "spread"
    assert plan["talks"] == [["collector", "learner"]]
    assert [(s["label"], s["count"]) for s in plan["specs"]] == [("learner", 1), ("collector", 2)]
    for w in where:
        assert infos[w["actor_id"]]["process"] == by_rank[w["rank"]]["name"]

    # actorrt.nodes(): the same labels, one actor on each worker, none on the driver
    nodes = {n["rank"]: n for n in res["nodes"]}
    assert sorted(nodes) == [0, 1, 2, 3]
    assert (
        nodes[0]["hosts_actors"] is False and nodes[0]["labels"] == [] and nodes[0]["actors"] == 0
    )
    assert nodes[1]["labels"] == ["learner"]
    assert nodes[2]["labels"] == nodes[3]["labels"] == ["collector"]
    for rank in (1, 2, 3):
        assert nodes[rank]["alive"] and nodes[rank]["actors"] == 1, nodes[rank]
        assert nodes[rank]["process"] == by_rank[rank]["name"]

    # talks: collectors do not talk to each other; learner <-> collector and the driver do
    pairs = {frozenset((p["src"], p["dst"])) for p in plan["pairs"]}
    name = {r: by_rank[r]["name"] for r in by_rank}
    assert frozenset((name[2], name[3])) not in pairs, plan["pairs"]
    for c in (2, 3):
        assert frozenset((name[1], name[c])) in pairs, plan["pairs"]
    for r in (1, 2, 3):
        assert frozenset((name[0], name[r])) in pairs, plan["pairs"]
    assert len(pairs) == 5, plan["pairs"]

    msg = res["missing_label"]
    assert "'nowhere'" in msg and "learner, collector" in msg, msg

    # `actorrt plan` on the dumped descriptions computes the running cluster's plan
    assert dump.is_file(), procs.logs()
    cli = subprocess.run(
        [PY, "-m", "actorrt", "plan", str(dump), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert cli.returncode == 0, cli.stderr
    assert json.loads(cli.stdout) == plan


def test_two_containers_on_one_host(procs):
    """Separate net/pid/ipc/mnt namespaces, one boot id: a container boundary.

    actorrt sees it (ContainerIdentity differs, boot_id is equal) and the plan keeps the
    CUDA IPC channels (cuda_ipc, cuda_xth) out of both processes: TensorPipe would pick
    them because the boot ids match, and fail. On the CPU, plain torch RPC (TensorPipe
    defaults) also works across this boundary: shm needs one network namespace and cma
    one pid namespace, so it falls back to uv (TCP) and mpt_uv / basic (checked in
    ``test_plain_torch_rpc_across_containers`` below).
    """
    require_unshare()  # before the hosts exist: a skip leaves nothing behind
    hosts = _hosts(2)
    box = ["unshare", "--pid", "--ipc", "--mount", "--fork", "--kill-child", "--mount-proc"]
    cfg = {"init": f"tcp://{hosts.addrs[0]}:{PORT}", "world": 2, "scenario": "container"}
    res = _run_cluster(procs, hosts, cfg, [(1, 1, ())], driver_wrap=box, worker_wrap=box)

    d0, d1 = res["descriptions"]
    assert d0["boot_id"] == d1["boot_id"]  # one host...
    for ns in ("net", "pid", "ipc", "mnt"):  # ...two containers
        assert d0["container"][ns] != d1["container"][ns], ns
    assert res["where"]["pidns"] != res["driver_pidns"]
    assert res["echo_ok"]
    assert res["plan_pairs"] == [["driver", "worker1", "tcp"]]
    for name, channels in res["plan_channels"].items():
        assert channels is not None, f"{name}: TensorPipe's default channels include cuda_ipc"
        assert "cuda_ipc" not in channels and "cuda_xth" not in channels


PLAIN_RPC = """
import os, signal, sys, torch, torch.distributed.rpc as rpc
signal.alarm(120)  # a bounded life even if the test process is gone: plain RPC waits forever
rank, init = int(sys.argv[1]), sys.argv[2]
opts = rpc.TensorPipeRpcBackendOptions(init_method=init, rpc_timeout=30)
rpc.init_rpc(f"p{rank}", rank=rank, world_size=2, rpc_backend_options=opts)
if rank == 0:
    t = torch.randn(1 << 20)
    back = rpc.rpc_sync("p1", torch.add, args=(t, 1))
    print("PLAIN", bool(torch.equal(back, t + 1)), flush=True)
rpc.shutdown()
"""


def test_plain_torch_rpc_across_containers(procs, tmp_path):
    """What torch RPC does by itself across the boundary, on the CPU: it works."""
    require_unshare()  # before the hosts exist: a skip leaves nothing behind
    hosts = _hosts(2)
    script = tmp_path / "plain_rpc.py"
    script.write_text(PLAIN_RPC)
    try:
        init = f"tcp://{hosts.addrs[0]}:{PORT}"
        box = ["unshare", "--pid", "--ipc", "--mount", "--fork", "--kill-child", "--mount-proc"]
        for rank in (0, 1):
            ifname = hosts.ifnames[rank]
            procs.start(
                f"plain{rank}",
                [*hosts.exec_prefix(rank), *box, PY, str(script), str(rank), init],
                # Gloo (inside init_rpc) needs its interface too: the host name resolves
                # to 127.0.0.1 here, and namespaces cannot reach each other's loopback.
                {"TP_SOCKET_IFNAME": ifname, "GLOO_SOCKET_IFNAME": ifname},
            )
        assert procs.wait_for_line("plain0", "PLAIN ", 60) == "True"
        assert procs.wait("plain0", 30) == 0, procs.logs()
        assert procs.wait("plain1", 30) == 0, procs.logs()
    finally:
        procs.close()
        hosts.close()


def test_two_hosts_actor_output_reaches_the_driver(procs):
    """An actor on another host prints; its lines reach the driver's output, host= that host.

    The worker's host gets a name of its own (a UTS namespace), as a real second machine
    has; the driver logs the rank joining from it (ACTORRT_LOG_LEVEL=info).
    """
    require_unshare()  # before the hosts exist: a skip leaves nothing behind
    hosts = _hosts(2)
    remote = "remote-host-1"
    named = ["unshare", "--uts", "sh", "-c", f'hostname {remote} && exec "$@"', "sh"]
    init = f"tcp://{hosts.addrs[0]}:{PORT}"
    cfg = {"init": init, "world": 2, "scenario": "output", "tag": "over-the-wire"}
    res = _run_cluster(
        procs, hosts, cfg, [(1, 1, ())], worker_wrap=named, driver_env={"ACTORRT_LOG_LEVEL": "info"}
    )

    talker = res["talker"]
    assert talker["host"] == remote
    driver_log, worker_log = procs.log("driver"), procs.log("worker1")
    tag = f"(Talker pid={talker['pid']} host={remote})"
    lines = [f"{tag} over-the-wire {kind} {i}" for i in range(3) for kind in ("out", "err")]
    positions = [driver_log.find(line + "\n") for line in lines]
    assert -1 not in positions, driver_log
    assert positions == sorted(positions), driver_log  # in the order they were printed
    assert "over-the-wire" not in worker_log, worker_log  # sent, not printed there too
    assert f"rank 1 joined from host {remote}" in driver_log, driver_log
    status_rows = [r for r in res["status"].splitlines() if r.startswith("worker1")]
    assert status_rows and remote in status_rows[0] and "1: Talker" in status_rows[0], res["status"]


def _driver_and_worker(procs, hosts, cfg):
    """Starts the driver on host 0 and worker 1 on host 1; the driver's READY line."""
    env = {"ACTORRT_TOKEN": TOKEN}
    procs.start("driver", driver_argv(cfg, hosts.exec_prefix(0)), env)
    procs.start(
        "worker1",
        worker_argv(cfg["init"], 1, 2, prefix=hosts.exec_prefix(1)),
        {**env, "TP_SOCKET_IFNAME": hosts.ifnames[1]},
    )
    return procs.wait_for_line("driver", "READY ", 90)


def test_a_worker_cut_off_by_a_link_down_is_marked_dead_and_exits_on_its_own(procs):
    """Was: calls to it never failed, shutdown took 17 s, and the worker still ran 120 s
    later. Now the heartbeat marks it dead, the call it held fails (a get() without a
    timeout), later calls fail at once, shutdown keeps its bound, and the worker, no longer
    pinged, exits on its own."""
    hosts = _hosts(2)
    cfg = {
        "init": f"tcp://{hosts.addrs[0]}:{PORT}",
        "world": 2,
        "scenario": "partition",
        "heartbeat_timeout": 2.0,
        "shutdown_timeout": 4.0,
    }
    try:
        _driver_and_worker(procs, hosts, cfg)
        hosts.cut(1)
        res = procs.result("driver", 60)
        assert procs.wait("driver", 30) == 0, procs.logs()
        # No ping for 3 heartbeat timeouts (6 s here): the worker ends itself.
        assert procs.wait("worker1", 6 + 10) == 1, procs.logs()
        assert "no heartbeat from the driver" in procs.log("worker1")
    finally:
        procs.close()
        hosts.close()
    assert res["marked_after"] is not None and res["marked_after"] < 2.0 + 3.0, res
    assert res["pending_call"] == "ActorDiedError", res
    assert res["pending_failed_after"] < 2.0 + 3.0, res
    assert res["late_call"] == "ActorDiedError", res
    assert res["shutdown_s"] < 4.0 + 1.5, res


@pytest.mark.timeout(300)
def test_a_64mb_result_over_a_20mbit_link_arrives_and_the_worker_lives_on(procs, tmp_path):
    """Was: the heartbeat queued behind the reply on the one pipe per pair, the driver
    marked the worker dead after 10 s ("answered no heartbeat"), and the call failed with
    ActorDiedError. Liveness now also travels on the worker's own store connection."""
    hosts = _hosts(2)
    gate = tmp_path / "gate"
    cfg = {
        "init": f"tcp://{hosts.addrs[0]}:{PORT}",
        "world": 2,
        "scenario": "slow_link",
        "heartbeat_timeout": 10.0,
        "gate": str(gate),
    }
    try:
        _driver_and_worker(procs, hosts, cfg)
        hosts.throttle(0, "20mbit")  # the driver's link: about 27 s for 64 MB
        gate.touch()
        res = procs.result("driver", 240)
        assert procs.wait("driver", 30) == 0, procs.logs()
        assert procs.wait("worker1", 20) == 0, procs.logs()
    finally:
        procs.close()
        hosts.close()
    assert res["result"] == [(64 << 20) // 4, 4096.0], res
    assert res["took"] > 10.0, res  # it did take longer than heartbeat_timeout
    assert res["alive"] and res["after"], res


@pytest.mark.parametrize("sig", ["SIGSTOP", "SIGKILL"])
def test_a_stopped_or_killed_worker_behind_a_slow_link_is_still_marked_dead_in_time(procs, sig):
    """The store heartbeat must not keep a dead or stopped worker alive: over the same
    20 Mbit/s link, SIGSTOP and kill -9 are detected within heartbeat_timeout (plus the
    heartbeat's period), as before it."""
    import signal

    hosts = _hosts(2)
    cfg = {
        "init": f"tcp://{hosts.addrs[0]}:{PORT}",
        "world": 2,
        "scenario": "partition",
        "heartbeat_timeout": 2.0,
        "shutdown_timeout": 4.0,
    }
    try:
        pid = int(_driver_and_worker(procs, hosts, cfg))
        hosts.throttle(0, "20mbit")
        os.kill(pid, getattr(signal, sig))
        res = procs.result("driver", 60)
        assert procs.wait("driver", 30) == 0, procs.logs()
    finally:
        procs.close()
        hosts.close()
    assert res["marked_after"] is not None and res["marked_after"] < 2.0 + 3.0, res
    assert res["pending_call"] == "ActorDiedError", res
    assert res["late_call"] == "ActorDiedError", res
