"""The DQN example across three hosts, run the way its README says, on network namespaces.

Host 0 runs the driver (``python -m examples.atari_dqn --init-method ... --world-size 4``),
host 1 one ``actorrt worker``, host 2 two; no worker gets ``--labels``: the example's
layout (one learner, two collectors) reaches them through the plan. Strategy ``spread``
puts the learner on host 1's worker and the collectors on host 2's, and the run
finishes with its outputs and ``plan.json``.

Needs root and iproute2 (CI runs as root); skips with the reason otherwise. Every wait
is bounded; processes and namespaces are removed whatever happens.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from netns import PY, Hosts, require_netns, worker_argv

pytest.importorskip("gymnasium", reason="needs the atari extra: pip install -e '.[atari]'")
pytest.importorskip("tqdm", reason="needs the atari extra: pip install -e '.[atari]'")

pytestmark = [pytest.mark.timeout(300), pytest.mark.netns, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "dqn-netns-token"
PORT = 29500  # fresh namespaces: nothing else listens there
WORLD = 4  # the driver + 3 workers
WORKER_HOST = {1: 1, 2: 2, 3: 2}  # rank -> the host (namespace) it is started in
RUN_S = 200  # bound on the whole run (cluster start, training, evaluation, shutdown)


def _net_ns(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/net")
    except OSError:
        return None


def test_dqn_driver_and_workers_on_three_hosts(procs, tmp_path):
    require_netns()
    hosts = Hosts(3)
    logdir = tmp_path / "run"
    # workers unpickle the example's classes: the repository must be importable there
    env = {"ACTORRT_TOKEN": TOKEN, "PYTHONPATH": str(ROOT)}
    init = f"tcp://{hosts.addrs[0]}:{PORT}"
    try:
        # The driver finds its interface itself (the one holding the rendezvous address).
        driver = procs.start(
            "driver",
            [
                *hosts.exec_prefix(0), PY, "-m", "examples.atari_dqn", "--env", "CartPole-v1",
                "--init-method", init, "--world-size", str(WORLD), "--collectors", "2",
                "--total-frames", "2000", "--learning-starts", "200", "--eval-episodes", "2",
                "--no-progress", "--logdir", str(logdir),
            ],
            env,
        )  # fmt: skip
        workers = {}
        for rank, host in WORKER_HOST.items():
            workers[rank] = procs.start(
                f"worker{rank}",
                # no --labels: the labels come from the driver's plan
                worker_argv(init, rank, WORLD, prefix=hosts.exec_prefix(host)),
                {**env, "TP_SOCKET_IFNAME": hosts.ifnames[host]},
            )
        # Once the plan is out every process runs in its namespace (ip netns exec has
        # exec'd Python): check each rank is where this test put it.
        placement = procs.wait_for_line("driver", "placement (spread, transport cpu): ", 120)
        where = {rank: _net_ns(p.pid) for rank, p in workers.items()}
        where[0] = _net_ns(driver.pid)
        actors = procs.wait_for_line("driver", "actors: ", 120)
        t0 = time.monotonic()
        rc = procs.wait("driver", RUN_S)
        run_s = time.monotonic() - t0
        assert rc == 0, procs.logs()
        for rank in WORKER_HOST:
            assert procs.wait(f"worker{rank}", 30) == 0, procs.logs()
        out = procs.log("driver")
    finally:
        procs.close()
        hosts.close()

    assert where == {0: hosts.inode(0), **{r: hosts.inode(h) for r, h in WORKER_HOST.items()}}
    # the run finished with every output, plan.json included
    assert "final evaluation: env=CartPole-v1 episodes=2" in out, out[-3000:]
    for name in ("metrics.csv", "checkpoint.pt", "learning_curve.png", "plan.json"):
        path = logdir / name
        assert path.is_file() and path.stat().st_size > 0, f"{name} missing ({run_s:.0f} s run)"

    plan = json.loads((logdir / "plan.json").read_text())
    procs_by_rank = {p["rank"]: p for p in plan["processes"]}
    assert sorted(procs_by_rank) == [0, 1, 2, 3]
    # the layout reached workers started without --labels
    assert [procs_by_rank[r]["labels"] for r in range(WORLD)] == [
        [],
        ["learner"],
        ["collector"],
        ["collector"],
    ]
    learner = [p["rank"] for p in plan["processes"] for s in p["slots"] if s["label"] == "learner"]
    collectors = [
        p["rank"] for p in plan["processes"] for s in p["slots"] if s["label"] == "collector"
    ]
    # spread: the learner on host 1's worker, the collectors on host 2's two workers
    assert learner == [1] and collectors == [2, 3]
    assert {WORKER_HOST[r] for r in learner}.isdisjoint(WORKER_HOST[r] for r in collectors)
    # The hosts share the boot id, so the plan's node ids are "<hostname>/cN" by container;
    # `ip netns exec` also gives every process its own mount namespace, so here each
    # process is a container of its own (c0..c3), the learner apart from the collectors.
    nodes = {r: procs_by_rank[r]["node"] for r in range(WORLD)}
    assert len(set(nodes.values())) == WORLD, nodes
    # cross-host pairs go over TCP; the two collectors do not talk (no pair planned)
    pairs = {(p["src"], p["dst"]): p["transport"] for p in plan["pairs"]}
    name = {r: procs_by_rank[r]["name"] for r in range(WORLD)}
    assert pairs[(name[1], name[2])] == pairs[(name[1], name[3])] == "tcp"
    assert (name[2], name[3]) not in pairs

    # the driver's two lines: the plan's placement and where the actors really ran
    assert placement == (
        f"learner={name[1]}@{nodes[1]} collector={name[2]}@{nodes[2]},{name[3]}@{nodes[3]}"
    )
    ran = sorted(item.split("@")[0] for item in actors.split())
    assert ran == sorted([f"learner={name[1]}", f"collector={name[2]}", f"collector={name[3]}"])
