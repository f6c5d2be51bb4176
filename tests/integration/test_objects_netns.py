"""Objects across hosts: producer -> consumer, not over the driver's link; one copy per host.

Three network namespaces on one bridge (tests/integration/netns.py); the driver's host
has its link shaped to 20 Mbit/s both ways with ``tc``, the workers' links are not.

- A 64 MB result of an actor on host 1, passed by the driver to an actor on host 2, must
  arrive in less time than one crossing of the driver's link takes (about 27 s), and the
  driver must receive none of its bytes. A 1 MB tensor sent by the driver itself shows
  that the shaping is in force.
- An 8 MB put on the driver, got by four actors on four processes, two on each of hosts
  1 and 2 (``actorrt worker --nproc 2`` on each): the driver's link carries one copy per
  host (the other process of the host gets it from the first), two in all, not four.

Needs root, iproute2 and tc (CI runs as root); skips with the reason otherwise.
"""

import json
import shutil

import pytest
from netns import HERE, PY, Hosts, require_netns, worker_argv

pytestmark = [pytest.mark.timeout(240), pytest.mark.netns]

PORT = 29500
RATE = "20mbit"
TOKEN = "objects-netns-token"


def _run(procs, scenario, workers):
    """Runs objects_driver.py's ``scenario`` on host 0 (shaped) and its workers, each
    ``(first rank, host, label, processes)`` one ``actorrt worker`` command; its result."""
    require_netns()
    if shutil.which("tc") is None:
        pytest.skip("needs iproute2's `tc` to shape a link")
    hosts = Hosts(3)
    try:
        hosts.throttle(0, RATE)
        init = f"tcp://{hosts.addrs[0]}:{PORT}"
        world = sum(nproc for *_, nproc in workers) + 1
        # The namespaces share this machine's memory: actorrt's shared-memory road and
        # TensorPipe's cma channel would carry tensors past the links. TCP only, as
        # between real hosts.
        env = {
            "ACTORRT_TOKEN": TOKEN,
            "ACTORRT_SHM": "0",
            "ACTORRT_TP_TRANSPORTS": "uv",
            "ACTORRT_TP_CHANNELS": "basic",
        }
        cfg = json.dumps({"init": init, "world": world, "scenario": scenario})
        procs.start(
            "driver", [*hosts.exec_prefix(0), PY, str(HERE / "objects_driver.py"), cfg], env
        )
        for rank, host, label, nproc in workers:
            extra = ("--labels", label, "--nproc", str(nproc))
            procs.start(
                f"worker{rank}",
                worker_argv(init, rank, world, *extra, prefix=hosts.exec_prefix(host)),
                {**env, "TP_SOCKET_IFNAME": hosts.ifnames[host]},
            )
        res = procs.result("driver", 200)
        assert procs.wait("driver", 60) == 0, procs.logs()
        return res
    finally:
        procs.close()
        hosts.close()


def test_a_64mb_ref_between_two_hosts_does_not_cross_the_slow_driver_link(procs):
    res = _run(procs, "pass", [(1, 1, "producer", 1), (2, 2, "consumer", 1)])
    assert res["total"] == 64 << 20
    # 64 MB over 20 Mbit/s takes about 27 s each way: a hop through the driver could not
    # arrive in under 13 s.
    assert res["ref_s"] < 13, res
    assert res["received"] < 1 << 20, res
    assert res["driver_1mb_s"] > 0.3, f"the driver's link was not shaped: {res}"


def test_a_put_got_by_four_actors_on_two_hosts_crosses_the_slow_link_twice(procs):
    # two processes per host from one command (`--nproc 2`), as a node runs its share
    res = _run(procs, "fanout", [(1, 1, "h1", 2), (3, 2, "h2", 2)])
    assert res["totals"] == [8 << 20] * 4
    assert res["served"] == 2, res  # one fetch per host; each host's second got a copy
    # 8 MB over 20 Mbit/s is about 3.4 s: four copies would take 13 s at least.
    assert res["seconds"] < 10, res
