"""Helpers of the multi-node tests: hosts made of network namespaces, and process groups.

``Hosts(n)`` builds ``n`` "hosts" on this machine: one network namespace each, joined by
veth pairs to a bridge that lives in a namespace of its own. Host ``i`` has the address
``10.77.<net>.<i + 1>`` on an interface named ``arth<i>`` (names differ on purpose, so
every process needs its own ``TP_SOCKET_IFNAME``). The subnet exists only inside these
namespaces: nothing is added to the machine's own namespace, and no packet can leave.
Names carry the pid of the test process; everything is deleted on ``close()``.

``Procs`` starts processes in their own session and always kills them (by pid and by
their process group id) and reaps them on ``close()``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

PY = sys.executable
HERE = Path(__file__).resolve().parent
_counter = [0]


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=20, check=check)


def netns_unavailable() -> str | None:
    """Why namespaces cannot be built here (None when they can)."""
    if os.geteuid() != 0:
        return "needs root to create network namespaces (CI runs these as root)"
    if shutil.which("ip") is None:
        return "needs iproute2's `ip` command to create network namespaces"
    probe = f"actorrt-probe-{os.getpid()}"
    try:
        res = _ip("netns", "add", probe, check=False)
        if res.returncode != 0:
            return f"`ip netns add` failed: {res.stderr.strip()}"
        res = _ip("-n", probe, "link", "add", "br0", "type", "bridge", check=False)
        if res.returncode != 0:
            return f"cannot create a bridge in a namespace: {res.stderr.strip()}"
    finally:
        _ip("netns", "del", probe, check=False)
    return None


def require_netns() -> None:
    reason = netns_unavailable()
    if reason:
        pytest.skip(reason)


def require_unshare() -> None:
    if shutil.which("unshare") is None:
        pytest.skip("needs util-linux's `unshare` to make container boundaries")


class Hosts:
    """``n`` network namespaces on one bridge, 10.77.<net>.0/24, deleted on ``close()``."""

    def __init__(self, n: int) -> None:
        _counter[0] += 1
        tag = f"{os.getpid()}-{_counter[0]}"
        self.net = _counter[0] % 250 + 1
        self.switch = f"actorrt-{tag}-sw"
        self.names = [f"actorrt-{tag}-h{i}" for i in range(n)]
        self.addrs = [f"10.77.{self.net}.{i + 1}" for i in range(n)]
        self.ifnames = [f"arth{i}" for i in range(n)]
        self._made: list[str] = []
        self._inodes: list[str] = []
        try:
            self._build()
        except BaseException:
            self.close()
            raise

    def _build(self) -> None:
        _ip("netns", "add", self.switch)
        self._made.append(self.switch)
        _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.switch, "link", "set", "br0", "up")
        for i, ns in enumerate(self.names):
            _ip("netns", "add", ns)
            self._made.append(ns)
            port, ifname = f"p{i}", self.ifnames[i]
            _ip("-n", self.switch, "link", "add", port, "type", "veth", "peer", "name", ifname,
                "netns", ns)  # fmt: skip
            _ip("-n", self.switch, "link", "set", port, "master", "br0")
            _ip("-n", self.switch, "link", "set", port, "up")
            _ip("-n", ns, "addr", "add", f"{self.addrs[i]}/24", "dev", ifname)
            _ip("-n", ns, "link", "set", ifname, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            self._inodes.append(f"net:[{os.stat(f'/run/netns/{ns}').st_ino}]")

    def inode(self, i: int) -> str:
        """The network namespace of host ``i`` as /proc/<pid>/ns/net names it."""
        return self._inodes[i]

    def cut(self, i: int) -> None:
        """Cuts host ``i`` off the bridge (its port down): a partition, nothing closes."""
        _ip("-n", self.switch, "link", "set", f"p{i}", "down")

    def throttle(self, i: int, rate: str) -> None:
        """Limits host ``i``'s link to ``rate`` (``tc`` syntax, e.g. ``20mbit``) both ways.

        A token bucket on each end of its veth pair: the bridge's port (towards the host)
        and the host's interface (away from it). Deleted with the namespaces.
        """
        bucket = ["root", "tbf", "rate", rate, "burst", "32kbit", "latency", "400ms"]
        for ns, dev in ((self.switch, f"p{i}"), (self.names[i], self.ifnames[i])):
            subprocess.run(
                ["tc", "-n", ns, "qdisc", "add", "dev", dev, *bucket],
                capture_output=True, text=True, timeout=20, check=True,
            )  # fmt: skip

    def exec_prefix(self, i: int) -> list[str]:
        return ["ip", "netns", "exec", self.names[i]]

    def close(self) -> None:
        for ns in reversed(self._made):
            _ip("netns", "del", ns, check=False)
        self._made.clear()


class Procs:
    """Processes of one test; ``close()`` kills every one still alive and reaps it."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.procs: dict[str, subprocess.Popen] = {}

    def start(self, name: str, argv: list[str], env: dict | None = None) -> subprocess.Popen:
        full_env = dict(os.environ)
        for var in ("TP_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "ACTORRT_TOKEN"):
            full_env.pop(var, None)  # each process gets its own, or finds it
        full_env["PYTHONUNBUFFERED"] = "1"
        full_env["OMP_NUM_THREADS"] = "1"
        full_env.update(env or {})
        out = open(self.log_dir / f"{name}.log", "w")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=full_env,
            cwd=HERE,
            start_new_session=True,  # its own process group: killed as one in close()
        )
        out.close()
        self.procs[name] = proc
        return proc

    def log(self, name: str) -> str:
        path = self.log_dir / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def logs(self) -> str:
        return "\n".join(f"--- {n} ---\n{self.log(n)[-3000:]}" for n in self.procs)

    def wait(self, name: str, timeout: float) -> int:
        """The exit status of ``name``; fails the test (with every log) past ``timeout``."""
        try:
            return self.procs[name].wait(timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{name} did not exit within {timeout:g} s\n{self.logs()}")

    def wait_for_line(self, name: str, prefix: str, timeout: float) -> str:
        """The first line of ``name``'s output starting with ``prefix``, within ``timeout``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.log(name)
            # complete lines only: a long line (a 128-process result) is written in parts
            for line in text[: text.rfind("\n") + 1].splitlines():
                if line.startswith(prefix):
                    return line[len(prefix) :].strip()
            if self.procs[name].poll() is not None:
                break
            time.sleep(0.1)
        pytest.fail(f"{name} printed no {prefix!r} line within {timeout:g} s\n{self.logs()}")

    def result(self, name: str, timeout: float) -> dict:
        return json.loads(self.wait_for_line(name, "RESULT ", timeout))

    def close(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            alive = [p for p in self.procs.values() if p.poll() is None]
            for p in alive:
                for kill in (os.killpg, os.kill):
                    try:
                        kill(p.pid, sig)
                    except (ProcessLookupError, PermissionError):
                        pass
            for p in alive:
                try:
                    p.wait(3)
                except subprocess.TimeoutExpired:
                    pass
        for p in self.procs.values():  # children left in the group (unshare's child)
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def worker_argv(
    init: str, rank: int, world: int, *extra: str, prefix: list[str] | None = None
) -> list[str]:
    return [
        *(prefix or []),
        PY,
        "-m",
        "actorrt",
        "worker",
        "--init-method",
        init,
        "--rank",
        str(rank),
        "--world-size",
        str(world),
        *extra,
    ]


def driver_argv(config: dict, prefix: list[str] | None = None) -> list[str]:
    return [*(prefix or []), PY, str(HERE / "multinode_driver.py"), json.dumps(config)]


def free_port(host: str = "127.0.0.1", pair: bool = False) -> int:
    """A free TCP port on ``host`` (with ``pair``, the next one is free too).

    Taken below the kernel's ephemeral range: a port the kernel handed out (``bind`` to
    0) was taken again, between this check and the listener's bind, by another test's
    process binding or connecting at that moment (torchrun's store failed with
    EADDRINUSE in CI). No ephemeral port is ever given below that range.
    """
    import random
    import socket

    low = 32768
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        pass
    for _ in range(200):
        port = random.randrange(max(1024, low - 12000), low - 1)
        try:
            for p in (port, port + 1) if pair else (port,):
                with socket.socket() as s:
                    s.bind((host, p))
            return port
        except OSError:
            continue
    raise RuntimeError("no free port (pair) found below the ephemeral range")


def pids_gone(pids: list[int], within: float) -> list[int]:
    """Waits up to ``within`` s for ``pids`` to exit; returns those still alive."""
    from procutil import pid_alive

    deadline = time.monotonic() + within
    while time.monotonic() < deadline and any(pid_alive(p) for p in pids):
        time.sleep(0.1)
    return [p for p in pids if pid_alive(p)]
