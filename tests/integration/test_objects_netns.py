"""A ref passed between two hosts goes producer -> consumer, not over the driver's link.

Three network namespaces on one bridge (tests/integration/netns.py); the driver's host
has its link shaped to 20 Mbit/s both ways with ``tc``, the two workers' links are not.
A 64 MB result of an actor on host 1, passed by the driver to an actor on host 2, must
arrive in less time than one crossing of the driver's link takes (about 27 s), and the
driver must receive none of its bytes. A 1 MB tensor sent by the driver itself shows
that the shaping is in force.

Needs root, iproute2 and tc (CI runs as root); skips with the reason otherwise.
"""

import shutil
import subprocess

import pytest
from netns import HERE, PY, Hosts, require_netns, worker_argv

pytestmark = [pytest.mark.timeout(240), pytest.mark.netns]

PORT = 29500
RATE = "20mbit"
TOKEN = "objects-netns-token"


def _shape(hosts: Hosts, i: int) -> None:
    """Limits host ``i``'s link to RATE both ways (its egress, and the switch port's)."""
    for ns, dev in ((hosts.names[i], hosts.ifnames[i]), (hosts.switch, f"p{i}")):
        subprocess.run(
            ["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root", "tbf",
             "rate", RATE, "burst", "32kbit", "latency", "400ms"],
            check=True, capture_output=True,
        )  # fmt: skip


def test_a_64mb_ref_between_two_hosts_does_not_cross_the_slow_driver_link(procs):
    require_netns()
    if shutil.which("tc") is None:
        pytest.skip("needs iproute2's `tc` to shape a link")
    hosts = Hosts(3)
    try:
        _shape(hosts, 0)
        init = f"tcp://{hosts.addrs[0]}:{PORT}"
        # The namespaces share this machine's memory: actorrt's shared-memory road and
        # TensorPipe's cma channel would carry tensors past the links. TCP only, as
        # between real hosts.
        env = {
            "ACTORRT_TOKEN": TOKEN,
            "ACTORRT_SHM": "0",
            "ACTORRT_TP_TRANSPORTS": "uv",
            "ACTORRT_TP_CHANNELS": "basic",
        }
        procs.start(
            "driver",
            [*hosts.exec_prefix(0), PY, str(HERE / "objects_driver.py"),
             f'{{"init": "{init}", "world": 3}}'],
            env,
        )  # fmt: skip
        for rank, label in ((1, "producer"), (2, "consumer")):
            procs.start(
                f"worker{rank}",
                worker_argv(init, rank, 3, "--labels", label, prefix=hosts.exec_prefix(rank)),
                {**env, "TP_SOCKET_IFNAME": hosts.ifnames[rank]},
            )
        res = procs.result("driver", 200)
        assert procs.wait("driver", 60) == 0, procs.logs()
    finally:
        procs.close()
        hosts.close()
    assert res["total"] == 64 << 20
    # 64 MB over 20 Mbit/s takes about 27 s each way: a hop through the driver could not
    # arrive in under 13 s.
    assert res["ref_s"] < 13, res
    assert res["received"] < 1 << 20, res
    assert res["driver_1mb_s"] > 0.3, f"the driver's link was not shaped: {res}"
