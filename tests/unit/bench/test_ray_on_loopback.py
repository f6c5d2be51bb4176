"""The Ray instances the benchmarks and the DQN example start listen on loopback only.

Ray takes a Linux node's routable IP as its address and binds every interface; the
packages set ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` before Ray is imported, which keeps
a local instance on 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("ray", reason="ray is not installed (the bench extra): no Ray to check")

ROOT = Path(__file__).resolve().parents[3]

SCRIPT = """
import json, os
import psutil
from benchmarks import sys_ray
import examples.atari_dqn  # noqa: F401 - sets the same, and must not undo it
import ray

sys_ray.init(1)
try:
    ray.get(sys_ray.RTarget.remote().ping.remote(1))  # a worker process too
    procs = [psutil.Process(), *psutil.Process().children(recursive=True)]
    listening = []
    for p in procs:
        try:
            conns = p.net_connections(kind="inet")
        except psutil.Error:
            continue
        listening += [[p.name(), c.laddr.ip] for c in conns if c.status == psutil.CONN_LISTEN]
    node = ray.util.get_node_ip_address()
finally:
    ray.shutdown()
print("RESULT " + json.dumps({"listening": listening, "node": node,
                              "env": os.environ.get("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER")}))
"""


def test_ray_listens_on_loopback_only():
    env = {k: v for k, v in os.environ.items() if k != "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"}
    proc = subprocess.Popen(
        [sys.executable, "-c", SCRIPT],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=150)
    finally:
        try:  # Ray's processes joined the script's group: kill by the group's id
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(10)
    lines = [line for line in out.splitlines() if line.startswith("RESULT ")]
    assert lines, f"exit {proc.returncode}\n{out[-2000:]}\n{err[-3000:]}"
    got = json.loads(lines[-1][len("RESULT ") :])
    assert got["env"] == "0" and got["node"] == "127.0.0.1", got
    assert len(got["listening"]) >= 3, got  # the GCS, the raylet, the worker at least
    wide = [
        (name, ip)
        for name, ip in got["listening"]
        if ip not in ("127.0.0.1", "::ffff:127.0.0.1", "::1")
    ]
    assert wide == [], f"Ray listens beyond loopback: {wide}"
