"""Multi-node clusters on loopback: ``actorrt worker``, torchrun, srun's environment, errors.

The driver is a script (``multinode_driver.py``, or ``scripts.run_script`` where the
start must fail): a second RPC agent in one process cannot use RRefs, and this process
may hold the shared ``cluster`` fixture, so no test here starts a cluster in it. Workers
are real
``python -m actorrt worker`` processes. Every wait is bounded and every process is
killed by pid (and process group) at the end.
"""

import os
import signal
import subprocess
import sys
import time

import pytest
import torch
from netns import PY, driver_argv, free_port, pids_gone, worker_argv
from scripts import run_script

pytestmark = pytest.mark.timeout(120)

TOKEN = "loopback-test-token"


HEADER = """
import socket
import actorrt

def refused(call):
    try:
        call()
    except Exception as exc:
        return [type(exc).__name__, str(exc)]
    return None
"""


def run_in_a_fresh_process(tmp_path, body, timeout=90):
    """Runs a failing start() in its own process: this one may hold the shared cluster."""
    (rep,) = run_script(tmp_path, HEADER, body, timeout=timeout)
    return rep


def _init(port):
    return f"tcp://127.0.0.1:{port}"


def test_wrong_token_is_refused_and_the_cluster_goes_on(procs):
    """An intruder with another token is told why; a worker started the srun way joins."""
    port = free_port()
    config = {"init": _init(port), "world": 2, "scenario": "simple", "token": TOKEN}
    procs.start("driver", driver_argv(config))
    procs.start(
        "intruder", worker_argv(_init(port), 1, 2, "--token", "not-the-token", "--timeout", "30")
    )
    assert procs.wait("intruder", 30) == 2, procs.logs()
    assert "rank 1 was refused by the cluster: wrong cluster token" in procs.log("intruder")
    # srun's environment, no flags: SLURM_PROCID 0 of 1 -> rank 1 of 2 (the driver is 0)
    slurm = {"SLURM_PROCID": "0", "SLURM_NTASKS": "1", "SLURM_LOCALID": "0"}
    procs.start(
        "worker1",
        [PY, "-m", "actorrt", "worker"],
        {**slurm, "ACTORRT_INIT_METHOD": _init(port), "ACTORRT_TOKEN": TOKEN},
    )
    res = procs.result("driver", 60)
    (info,) = res["where"]
    assert info["rank"] == 1 and info["env"]["SLURM_PROCID"] == "0"
    assert info["ifname"] == info["env"]["GLOO_SOCKET_IFNAME"] == "lo"  # found, not told
    assert res["echo_ok"]
    # Claims (descriptions, proofs) and the plan left the store once read: a client
    # without the token finds only the session id there.
    assert res["store_keys"] == ["actorrt/session"], res["store_keys"]
    # One host: shared memory, or CUDA IPC where the plan (auto) put GPUs on both; tcp on
    # a host with one CPU for the two processes (shm's reactor would busy-poll it away).
    one_cpu = len(os.sched_getaffinity(0)) < 2
    same_host = "cuda_ipc" if torch.cuda.is_available() else "tcp" if one_cpu else "shm"
    assert res["plan_pairs"] == [["driver", "worker1", same_host]]
    assert procs.wait("driver", 30) == 0, procs.logs()
    assert procs.wait("worker1", 20) == 0, procs.logs()


def test_each_refused_claim_hears_why_and_a_missing_rank_fails_start(procs, tmp_path):
    """Duplicate rank, other world size, other transport, other token; rank 2 never comes."""
    port = free_port()
    init = _init(port)
    env = {"ACTORRT_TOKEN": TOKEN}
    procs.start("good", worker_argv(init, 1, 3), env)
    procs.start("dup", worker_argv(init, 1, 3), env)
    procs.start("world", worker_argv(init, 2, 4), env)
    procs.start("transport", worker_argv(init, 2, 3, "--transport", "cpu"), env)
    procs.start("token", worker_argv(init, 2, 3), {"ACTORRT_TOKEN": "another-job"})
    procs.start("grow", [PY, "-m", "actorrt", "worker", "--init-method", init, "--grow"], env)
    names = ("good", "dup", "world", "transport", "token", "grow")
    rep = run_in_a_fresh_process(
        tmp_path,
        f"""
        error = refused(lambda: actorrt.start(
            init_method={init!r}, world_size=3, token={TOKEN!r}, timeout=20))
        report(error=error, initialized=actorrt.is_initialized())
        """,
    )
    assert rep["error"][0] == "ClusterError", rep
    assert "rank(s) 2 of 3 never joined within 20 s" in rep["error"][1]
    assert rep["initialized"] is False
    codes = {n: procs.wait(n, 20) for n in names}
    assert codes == dict.fromkeys(names, 2), procs.logs()
    logs = {n: procs.log(n) for n in names}
    dup_msg = "rank 1 is already taken by pid"
    assert (dup_msg in logs["good"]) != (dup_msg in logs["dup"]), procs.logs()
    accepted = "good" if dup_msg in logs["dup"] else "dup"
    assert "the driver aborted the start: rank(s) 2 of 3 never joined" in logs[accepted]
    assert "world size 4 does not match the driver's 3" in logs["world"]
    assert "asks for --transport cpu but the driver uses transport='auto'" in logs["transport"]
    assert "wrong cluster token" in logs["token"]
    # a --grow worker has no rank yet: it is not called rank 0 (the driver's)
    assert (
        "actorrt worker --grow: a new rank was refused by the cluster: the cluster is still"
        in (logs["grow"])
    ), procs.logs()


def _wait_for_text(procs, name, text, times, timeout=60):
    deadline = time.monotonic() + timeout
    while procs.log(name).count(text) < times:
        if time.monotonic() > deadline:
            pytest.fail(f"{name} said {text!r} fewer than {times} times\n{procs.logs()}")
        time.sleep(0.1)


def test_a_rank_whose_worker_left_before_the_cluster_formed_is_taken_again(procs):
    """A worker that gave up waiting (its own --timeout), or was killed, while the driver
    waited for other ranks let its rank go: the same command takes it again (was: refused
    as "already taken" by the dead pid, and the cluster could not form)."""
    port = free_port()
    init = _init(port)
    env = {"ACTORRT_TOKEN": TOKEN}
    config = {
        "init": init, "world": 3, "scenario": "simple", "token": TOKEN, "timeout": 90,
        "log_level": "INFO",
    }  # fmt: skip
    procs.start("driver", driver_argv(config))
    procs.start("quitter", worker_argv(init, 1, 3, "--timeout", "4"), env)
    assert procs.wait("quitter", 60) == 2, procs.logs()
    assert "did not answer within 4 s" in procs.log("quitter"), procs.logs()
    _wait_for_text(procs, "driver", "gave up before the cluster formed", 1)
    procs.start("killed", worker_argv(init, 1, 3), env)
    _wait_for_text(procs, "driver", "rank 1 joined", 2)
    os.killpg(procs.procs["killed"].pid, signal.SIGKILL)
    procs.wait("killed", 10)
    procs.start("again", worker_argv(init, 1, 3), env)  # at once: it takes the silent one's
    _wait_for_text(procs, "driver", "rank 1 joined", 3)
    assert "rank 1 (pid" in procs.log("driver") and "was silent for" in procs.log("driver")
    procs.start("rank2", worker_argv(init, 2, 3), env)
    res = procs.result("driver", 90)
    assert res["echo_ok"] and sorted(w["rank"] for w in res["where"]) == [1, 2], res
    assert procs.wait("driver", 30) == 0, procs.logs()
    assert procs.wait("again", 20) == 0 and procs.wait("rank2", 20) == 0, procs.logs()


def test_cuda_transport_without_gpus_is_a_placement_error(procs, tmp_path):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: transport='cuda' is feasible here")
    port = free_port()
    procs.start("worker1", worker_argv(_init(port), 1, 2), {"ACTORRT_TOKEN": TOKEN})
    rep = run_in_a_fresh_process(
        tmp_path,
        f"""
        error = refused(lambda: actorrt.start(init_method={_init(port)!r}, world_size=2,
                                              token={TOKEN!r}, transport="cuda", timeout=60))
        report(error=error)
        """,
    )
    assert rep["error"][0] == "PlacementError", rep
    assert "transport='cuda' needs a GPU in every process" in rep["error"][1]
    assert procs.wait("worker1", 20) == 2
    assert "the driver aborted the start: transport='cuda' needs a GPU" in procs.log("worker1")


def test_port_in_use_and_bad_driver_arguments_fail_at_once(tmp_path):
    rep = run_in_a_fresh_process(
        tmp_path,
        """
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            s.listen()
            port = s.getsockname()[1]
            in_use = refused(lambda: actorrt.start(
                init_method=f"tcp://127.0.0.1:{port}", world_size=2, timeout=5))
        errors = [
            in_use,
            refused(lambda: actorrt.start(
                init_method="tcp://10.77.255.254:29500", world_size=2, timeout=5)),
            refused(lambda: actorrt.start(init_method="tcp://127.0.0.1:29500", timeout=5)),
            refused(lambda: actorrt.start(
                init_method="tcp://127.0.0.1:29500", rank=1, world_size=2)),
        ]
        report(port=port, errors=errors, initialized=actorrt.is_initialized())
        """,
    )
    in_use, foreign, no_world, not_rank0 = rep["errors"]
    assert in_use[0] == "ClusterError"
    assert f"port {rep['port']} on 127.0.0.1 is already in use" in in_use[1]
    assert foreign[0] == "ClusterError"
    assert "HOST in init_method must be an address of this" in foreign[1]
    assert no_world[0] == "ValueError" and "needs world_size=W >= 2" in no_world[1]
    assert not_rank0[0] == "ValueError" and "the driver, rank 0" in not_rank0[1]
    assert rep["initialized"] is False


def test_worker_errors_without_a_driver_are_clear_and_fast(procs):
    port = free_port()
    cases = {
        "rank0": (worker_argv(_init(port), 0, 3), "rank 0 is out of range for world size 3"),
        "rank3": (worker_argv(_init(port), 3, 3), "rank 3 is out of range for world size 3"),
        "nowhere": (
            worker_argv(_init(port), 1, 2, "--timeout", "2"),
            f"could not reach rank 0's rendezvous at 127.0.0.1:{port} within 2 s",
        ),
        "noflags": ([PY, "-m", "actorrt", "worker"], "--rank and --world-size are needed"),
        "badinit": (
            worker_argv("http://x:1", 1, 2),
            "must look like 'tcp://HOST:PORT'",
        ),
        "badifname": (  # was: joined, TensorPipe listening on 127.0.0.1 with a warning
            worker_argv(_init(port), 1, 2, "--socket-ifname", "bogus0"),
            "--socket-ifname bogus0: no such interface here; this host has ",
        ),
    }
    for name, (argv, _) in cases.items():
        procs.start(name, argv)
    for name, (_, message) in cases.items():
        assert procs.wait(name, 30) == 2, procs.logs()
        assert message in procs.log(name), procs.logs()


def test_a_worker_stopped_with_ctrl_c_says_so_without_a_traceback(procs):
    argv = worker_argv(_init(free_port()), 1, 2, "--timeout", "60", "--log-level", "info")
    # A process started in the background of a non-interactive shell (CI) inherits
    # SIGINT ignored, and Python then installs no handler: restore the terminal's default.
    restore = (
        "import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
        "sys.argv = ['actorrt', *sys.argv[1:]]; runpy.run_module('actorrt', run_name='__main__')"
    )
    procs.start("waiting", [PY, "-c", restore, *argv[3:]])
    _wait_for_text(procs, "waiting", "does not answer yet", 1)  # waits for a driver
    os.kill(procs.procs["waiting"].pid, signal.SIGINT)
    assert procs.wait("waiting", 30) == 130, procs.logs()
    assert "actorrt worker rank 1: interrupted" in procs.log("waiting")
    assert "Traceback" not in procs.log("waiting"), procs.logs()


def test_workers_exit_when_the_driver_is_killed(procs):
    port = free_port()
    init = _init(port)
    env = {"ACTORRT_TOKEN": TOKEN}
    procs.start("driver", driver_argv({"init": init, "world": 3, "scenario": "idle"}), env)
    for rank in (1, 2):
        procs.start(f"worker{rank}", worker_argv(init, rank, 3), env)
    procs.wait_for_line("driver", "READY ", 60)
    worker_pids = [procs.procs[f"worker{r}"].pid for r in (1, 2)]
    os.kill(procs.procs["driver"].pid, signal.SIGKILL)
    assert pids_gone(worker_pids, 10) == [], f"workers outlived the driver\n{procs.logs()}"
    for rank in (1, 2):
        assert procs.wait(f"worker{rank}", 5) == 1
        assert "lost the connection to the driver" in procs.log(f"worker{rank}")


def _driver_and_workers(procs, world, scenario, **cfg):
    """Starts the driver script on ``scenario`` and its ``world - 1`` workers, on loopback."""
    init = _init(free_port())
    env = {"ACTORRT_TOKEN": TOKEN}
    cfg = {"init": init, "world": world, "scenario": scenario, **cfg}
    procs.start("driver", driver_argv(cfg), env)
    for rank in range(1, world):
        procs.start(f"worker{rank}", worker_argv(init, rank, world), env)


def test_a_killed_worker_is_marked_dead_by_the_heartbeat(procs):
    """Was: never marked dead (new actors kept going to it) and shutdown took 11.4 s."""
    _driver_and_workers(procs, 3, "dead_worker", heartbeat_timeout=2.0, shutdown_timeout=4.0)
    res = procs.result("driver", 90)
    assert res["marked_after"] is not None, procs.logs()
    assert res["marked_after"] < 2.0 + 3.0, res
    assert res["victim"] not in res["fresh"] and all(res["fresh_ok"]), res
    assert res["shutdown_s"] < 4.0 + 1.5, res
    assert procs.wait("driver", 30) == 0, procs.logs()


def test_a_killed_worker_nobody_calls_is_marked_dead_by_its_failed_ping(procs):
    """Was: only the heartbeat's silence (here 30 s) marked it, its pings failing with
    EPIPE meanwhile; a failed ping now has it probed, as a failed call does."""
    _driver_and_workers(procs, 3, "dead_worker", heartbeat_timeout=30.0, shutdown_timeout=4.0)
    res = procs.result("driver", 90)
    assert res["marked_after"] is not None and res["marked_after"] < 15.0, res
    assert res["victim"] not in res["fresh"] and all(res["fresh_ok"]), res
    assert procs.wait("driver", 30) == 0, procs.logs()


def test_a_worker_stuck_with_the_gil_is_ended_by_its_watchdog(procs):
    """Was: a worker stuck in C code holding the GIL was marked dead, but on another node
    nothing ended it (its own exit is Python's, and no Python thread ran): it outlived
    the driver, holding its GPU. Now a kernel timer its heartbeat thread pushes back
    ends it, after writing where it hung."""
    _driver_and_workers(procs, 2, "gil_stuck", heartbeat_timeout=1.0, shutdown_timeout=4.0)
    res = procs.result("driver", 90)
    assert res["marked_after"] is not None and res["marked_after"] < 1.0 + 3.0, res
    assert res["stuck_call"] == "ActorDiedError", res
    assert procs.wait("driver", 30) == 0, procs.logs()
    # Its watchdog: 3 heartbeat timeouts (its own exit's bound) and one more, from the
    # last time its heartbeat thread ran; the method holds the GIL for 300 s.
    assert procs.wait("worker1", 4.0 + 20) == -signal.SIGUSR2, procs.logs()
    lines = [ln.strip() for ln in procs.log("worker1").splitlines()]
    frames = [ln for ln in lines if ln.startswith('File "')]
    assert any(f.endswith(" in stuck_in_c_with_the_gil") for f in frames), procs.logs()


def test_a_dead_named_actor_frees_its_name(procs):
    """Was: get_actor() still found the DEAD actor, and its name raised ValueError."""
    port = free_port()
    init = _init(port)
    env = {"ACTORRT_TOKEN": TOKEN}
    cfg = {"init": init, "world": 3, "scenario": "dead_name", "heartbeat_timeout": 2.0}
    procs.start("driver", driver_argv(cfg), env)
    for rank in (1, 2):
        procs.start(f"worker{rank}", worker_argv(init, rank, 3), env)
    res = procs.result("driver", 90)
    assert res["marked"] and res["state"] == "DEAD", res
    assert "no actor named 'keeper' is alive" in res["lookup"], res
    assert res["again"] != res["victim"] and res["again_rank"] in (1, 2), res
    assert procs.wait("driver", 30) == 0, procs.logs()


def test_a_claim_for_a_running_rank_hears_its_refusal_before_it_gives_up(procs):
    """Was: refused only after two heartbeat timeouts (20 s), so a claimant waiting 8 s
    read "rank 0 did not answer within 8 s" instead of the refusal and its fix."""
    port = free_port()
    init = _init(port)
    env = {"ACTORRT_TOKEN": TOKEN}
    procs.start("driver", driver_argv({"init": init, "world": 2, "scenario": "idle"}), env)
    procs.start("worker1", worker_argv(init, 1, 2), env)
    procs.wait_for_line("driver", "READY ", 60)
    procs.start("duplicate", worker_argv(init, 1, 2, "--timeout", "8"), env)
    assert procs.wait("duplicate", 20) == 2, procs.logs()
    log = procs.log("duplicate")
    assert "rank 1 (worker1) is running" in log and "--grow" in log, log
    assert procs.procs["worker1"].poll() is None, procs.logs()  # the running one goes on


def test_actors_made_right_after_a_worker_died_avoid_it(procs):
    """Was: both the actor made right after the error and one made 2 s later went to the
    dead worker (and failed) until the heartbeat marked it dead."""
    port = free_port()
    init = _init(port)
    env = {"ACTORRT_TOKEN": TOKEN}
    cfg = {"init": init, "world": 3, "scenario": "suspect", "heartbeat_timeout": 60.0}
    procs.start("driver", driver_argv(cfg), env)
    for rank in (1, 2):
        procs.start(f"worker{rank}", worker_argv(init, rank, 3), env)
    res = procs.result("driver", 120)
    assert res["error"] == "ActorDiedError", res
    assert res["b"] != res["victim"] and isinstance(res["b_rank"], int), res
    assert res["c"] != res["victim"] and isinstance(res["c_rank"], int), res
    # Judged by a probe, well inside heartbeat_timeout (60 s here).
    assert res["marked_after"] is not None and res["marked_after"] < 5.0, res
    assert procs.wait("driver", 30) == 0, procs.logs()


def test_a_restart_goes_on_when_the_process_it_chose_is_dead_too(procs):
    """Was: recreated on a worker dead but not yet marked, the restart failed (EPIPE) and
    the actor was declared gone with max_restarts=-1 (Ray's test_multiple_actor_restart)."""
    port = free_port()
    init = _init(port)
    env = {"ACTORRT_TOKEN": TOKEN}
    cfg = {
        "init": init,
        "world": 4,
        "scenario": "restart_moves_on",
        "heartbeat_timeout": 60.0,
        "labels": {"r": {"count": 3}},
    }
    procs.start("driver", driver_argv(cfg), env)
    for rank in (1, 2, 3):
        procs.start(f"worker{rank}", worker_argv(init, rank, 4), env)
    res = procs.result("driver", 120)
    assert sorted(res["ranks"]) == [1, 2, 3], res
    third = res["ranks"][2]
    assert res["first"] in (third,) or res["first"].startswith("ActorDiedError"), res
    assert res["second"] == third and res["second_s"] < 10.0, res
    assert res["f1_marked"], res
    (r,) = [a for a in res["actors"] if a["restarts"]]
    assert r["state"] == "ALIVE" and r["rank"] == third and r["restarts"] == 1, res
    assert procs.wait("driver", 30) == 0, procs.logs()


def test_torchrun_launches_the_workers(procs):
    """``torchrun --nproc-per-node 2 -m actorrt worker``: RANK r -> rank r+1, MASTER_PORT+1."""
    port = free_port(pair=True)
    procs.start(
        "torchrun",
        [
            PY,
            "-m",
            "torch.distributed.run",
            "--nnodes",
            "1",
            "--nproc-per-node",
            "2",
            "--master-addr",
            "127.0.0.1",
            "--master-port",
            str(port),
            "-m",
            "actorrt",
            "worker",
            "--labels",
            "collector",
        ],
        {"ACTORRT_TOKEN": TOKEN},
    )
    config = {"init": _init(port + 1), "world": 3, "scenario": "simple", "label": "collector"}
    procs.start("driver", driver_argv(config), {"ACTORRT_TOKEN": TOKEN})
    res = procs.result("driver", 60)
    got = sorted((i["rank"], i["env"]["RANK"], i["env"]["LOCAL_RANK"]) for i in res["where"])
    assert got == [(1, "0", "0"), (2, "1", "1")]
    assert res["echo_ok"]
    # what the workers offer (no layout), as actorrt.nodes() and status() show it
    assert sorted(res["labels"].values()) == [[], ["collector"], ["collector"]], res["labels"]
    assert procs.wait("driver", 30) == 0, procs.logs()
    assert procs.wait("torchrun", 30) == 0, procs.logs()


def test_node_labels_of_a_worker_are_those_it_offers_with_dash_dash_labels(procs):
    """``actorrt worker --labels collector,replay``: its actors and functions see them.

    As Ray's ``get_node_labels()`` of a node started with labels; actorrt's have no
    values, so each maps to ``""``. Without a layout they come from the worker itself,
    from each of ``--nproc`` workers too.
    """
    port = free_port()
    init = _init(port)
    env = {"ACTORRT_TOKEN": TOKEN}
    probe_labels = ["collector", "replay", "learner", "learner"]
    cfg = {"init": init, "world": 4, "scenario": "node_labels", "probe_labels": probe_labels}
    procs.start("driver", driver_argv(cfg), env)
    procs.start("worker1", worker_argv(init, 1, 4, "--labels", "collector,replay"), env)
    procs.start("workers2-3", worker_argv(init, 2, 4, "--nproc", "2", "--labels", "learner"), env)
    res = procs.result("driver", 90)
    job = res["driver"]["job"]
    assert res["driver"]["labels"] == {} and job, res  # the driver offers none
    offered = {
        "worker1": {"collector": "", "replay": ""},
        "worker2": {"learner": ""},
        "worker3": {"learner": ""},
    }
    for where in ("actors", "functions"):
        for label, got in zip(probe_labels, res[where], strict=True):
            assert label in got["labels"], (where, res)  # placed by the label it offers
            assert got["labels"] == offered[got["worker"]], (where, res)
            assert got["job"] == job, res  # one cluster, one job id
    # Two learners spread over the two --nproc workers: each reported its own.
    assert {a["worker"] for a in res["actors"][2:]} == {"worker2", "worker3"}, res
    nodes = {process: dict.fromkeys(labels, "") for process, labels in res["nodes"].items()}
    assert {k: v for k, v in nodes.items() if k in offered} == offered, res  # as nodes()
    assert procs.wait("driver", 30) == 0, procs.logs()


def test_python_dash_m_actorrt_worker_help():
    out = subprocess.run(
        [sys.executable, "-m", "actorrt", "worker", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0
    for flag in ("--init-method", "--rank", "--world-size", "--labels", "--gpus", "--transport"):
        assert flag in out.stdout


def test_a_dead_rank_comes_back_and_a_running_cluster_grows(procs, tmp_path):
    """Was: every claim after the start was refused ("the cluster is already running")."""
    port = free_port()
    init = _init(port)
    env = {"ACTORRT_TOKEN": TOKEN}
    gate = tmp_path / "gate"
    cfg = {"init": init, "world": 3, "scenario": "rejoin", "heartbeat_timeout": 2.0}
    procs.start("driver", driver_argv({**cfg, "gate": str(gate)}), env)
    procs.start("worker1", worker_argv(init, 1, 3, "--labels", "a"), env)
    procs.start("worker2", worker_argv(init, 2, 3, "--labels", "b"), env)
    victim = int(procs.wait_for_line("driver", "READY ", 60))
    assert victim == procs.procs["worker2"].pid
    os.kill(victim, signal.SIGKILL)
    # Started at once, as a supervisor would: its claim waits until rank 2 is marked dead.
    procs.start("worker2-again", worker_argv(init, 2, 3, "--labels", "b"), env)
    # A rank that runs is not taken over (refused once two heartbeat timeouts have passed).
    procs.start("duplicate", worker_argv(init, 1, 3, "--timeout", "30"), env)
    procs.wait_for_line("driver", "GROW", 60)
    procs.start("grower", [PY, "-m", "actorrt", "worker", "--init-method", init, "--grow",
                           "--labels", "c"], env)  # fmt: skip
    procs.wait_for_line("driver", "GROWN", 60)
    assert procs.wait("duplicate", 40) == 2, procs.logs()
    gate.touch()
    res = procs.result("driver", 60)
    again = procs.procs["worker2-again"].pid
    grower = procs.procs["grower"].pid
    assert res["marked_dead"] and res["back"], res
    assert res["old_handle"] == "ActorDiedError", res
    assert res["b2_worker"] == "worker2" and res["second"]["pid"] == again, res
    assert res["relay_to_b2"] == [True, again], res
    assert res["grown"] == ["worker3"] and res["c_worker"] == "worker3", res
    assert res["third"]["pid"] == grower and res["third"]["rank"] == 3, res
    assert res["relay_to_c"] == [True, grower] and res["relay_from_c"] == [True, again], res
    assert res["plan_names"][1:] == ["worker1", "worker2", "worker3"], res
    assert "rank 1 (worker1) is running" in procs.log("duplicate"), procs.log("duplicate")
    assert procs.wait("driver", 30) == 0, procs.logs()
    for name in ("worker1", "worker2-again", "grower"):
        assert procs.wait(name, 20) == 0, procs.logs()
