"""A world of 128 processes over three network-namespace hosts (issue 15).

Host 0 runs the driver and ``actorrt worker --nproc 43`` (ranks 1..43), hosts 1 and 2
one ``actorrt worker --nproc 42`` each (ranks 44..85 and 86..127): three commands, three
zygotes, 127 workers. It must form, an actor on every worker must answer from its own
process in its host's namespace, and at the end no process may be left.

Needs root and iproute2 (CI runs as root); skips with the reason otherwise. Every wait
is bounded; processes are killed by pid and the namespaces removed whatever happens.
The driver prints how long the world took to form and its RSS (docs/performance.md).
"""

import pytest
from netns import Hosts, driver_argv, pids_gone, require_netns, worker_argv
from procutil import descendants, kill_pids

pytestmark = [pytest.mark.timeout(580), pytest.mark.netns, pytest.mark.slow]

TOKEN = "scale-netns-token"
PORT = 29500  # fresh namespaces: nothing else listens there
WORLD = 128
SHARES = [(0, 1, 43), (1, 44, 42), (2, 86, 42)]  # (host, first rank, --nproc)
FORM_S = 400  # bound on start() (the driver's and the workers' timeout)


def test_128_processes_over_three_hosts_form_answer_and_end(procs):
    require_netns()
    hosts = Hosts(3)
    init = f"tcp://{hosts.addrs[0]}:{PORT}"
    cfg = {
        "init": init,
        "world": WORLD,
        "scenario": "scale",
        "timeout": FORM_S,
        "call_timeout": 120,
        "heartbeat_timeout": 120,
        "shutdown_timeout": 60,
        "num_worker_threads": 4,
        "alarm": 560,
    }
    env = {"ACTORRT_TOKEN": TOKEN}
    nodes = {}
    below = []
    try:
        procs.start("driver", driver_argv(cfg, hosts.exec_prefix(0)), env)
        for host, first, nproc in SHARES:
            argv = worker_argv(
                init, first, WORLD, "--nproc", str(nproc), "--timeout", str(FORM_S),
                "--num-worker-threads", "4", prefix=hosts.exec_prefix(host),
            )  # fmt: skip
            # Host 0's workers find their interface; the others are told theirs.
            wenv = {**env, "TP_SOCKET_IFNAME": hosts.ifnames[host]} if host else env
            nodes[host] = procs.start(f"node{host}", argv, wenv)
        res = procs.result("driver", 480)
        for node in nodes.values():
            below += descendants(node.pid)  # the zygotes and workers, while still there
        assert procs.wait("driver", 60) == 0, procs.logs()
        for host in nodes:
            assert procs.wait(f"node{host}", 30) == 0, procs.logs()
        ours = [w[k] for w in res["where"] for k in ("pid", "ppid")]
        left = pids_gone(below + ours + [p.pid for p in nodes.values()], 15)
    finally:
        for node in nodes.values():
            below += descendants(node.pid)
        kill_pids(below)  # the zygotes have sessions of their own
        procs.close()
        hosts.close()
    pss = res["pss_mb"]
    print(
        f"world {WORLD} over 3 hosts: start() {res['start_s']:.1f} s, all answered "
        f"{res['answered_s']:.1f} s later, driver RSS {res['driver_rss_mb']:.0f} MB, "
        f"median worker RSS {res['worker_rss_mb']:.0f} MB, PSS summed: workers "
        f"{pss['workers']:.0f} MB, zygotes {pss['zygotes']:.0f} MB, --nproc commands "
        f"{pss['commands']:.0f} MB"
    )

    assert res["nodes_alive"] == WORLD
    assert len(res["workers"]) == WORLD - 1  # one actor on every worker
    where = {w["rank"]: w for w in res["where"]}
    assert sorted(where) == list(range(1, WORLD))
    assert len({w["pid"] for w in where.values()}) == WORLD - 1  # each its own process
    for host, first, nproc in SHARES:
        share = [where[r] for r in range(first, first + nproc)]
        # in its host's namespace, forked by that host's one zygote
        assert {w["net"] for w in share} == {hosts.inode(host)}, (host, share[0])
        assert len({w["ppid"] for w in share}) == 1, host
    assert len({w["ppid"] for w in where.values()}) == 3
    assert left == [], "processes left after the driver and the three commands exited"
