"""docs/multinode.md's SLURM recipe, run for real on a one-node SLURM cluster.

The test starts its own cluster: munged, slurmctld and slurmd (Debian's ``slurm-wlm``),
with a configuration, key, state and logs of their own in a fresh directory, on ports it
picked, so nothing of a system SLURM is read or touched (clients find it through
``SLURM_CONF``). Every address in it is 127.0.0.1, so all its traffic stays on loopback
(the daemons still listen on every interface, as SLURM does). It then submits the
documentation's batch script and driver, as they are written there, with ``sbatch
--wait``: three srun-started workers beside the driver, one actor answering from each,
and every process gone after the job.

slurmd launches jobs as their users, so it needs root; CI runs as root and installs
``slurm-wlm`` (.ci/run). Elsewhere, or when a daemon does not start, the test skips and
says why.
"""

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest
from procutil import kill_pids, pid_alive
from scripts import wait_gone

pytestmark = pytest.mark.timeout(300)

DOC = Path(__file__).resolve().parents[2] / "docs" / "multinode.md"
TOOLS = ("munged", "slurmctld", "slurmd", "sbatch", "srun", "sinfo", "scontrol", "squeue")
START_S = 30  # for the daemons to come up and the node to be idle
JOB_S = 180  # for the whole job: the workers, the driver, the actors
# The daemons live in sbin, which a non-login PATH may leave out.
SEARCH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])


def tool(name: str) -> str | None:
    return shutil.which(name, path=SEARCH)


def doc_recipe() -> tuple[str, str]:
    """The SLURM section's batch script and driver, exactly as docs/multinode.md has them."""
    text = DOC.read_text()
    section = text[text.index("## SLURM\n") : text.index("## Which network interface")]
    bash = re.findall(r"```bash\n(.*?)```", section, re.S)
    python = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(bash) == 1 and len(python) == 1, "the SLURM section has one script, one driver"
    return bash[0], python[0]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def tail(path: Path, n: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return f"({path.name}: none)"


class SlurmCluster:
    """munged + slurmctld + slurmd of one node, all under ``root``; stopped by pid."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.procs: list[subprocess.Popen] = []
        self.conf = root / "slurm.conf"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}

    def start(self) -> str | None:
        """Starts the daemons; None when the node is idle, else why it did not come up."""
        root = self.root
        # munged wants every directory above its socket searchable by all, and its key
        # readable by it only.
        root.chmod(0o711)
        key = root / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        sock = root / "munge.sock"
        host = socket.gethostname().split(".")[0]
        (root / "state").mkdir()
        (root / "spool").mkdir()
        self.conf.write_text(
            f"""\
ClusterName=actorrt
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={sock}
SlurmUser=root
SlurmdUser=root
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
# No cgroups: the test must run in containers too.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
SwitchType=switch/none
MpiDefault=none
ReturnToService=2
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
# Four CPUs whatever the machine has: the job needs three tasks and CI may have two cores.
SlurmdParameters=config_overrides
NodeName={host} NodeAddr=127.0.0.1 CPUs=4 State=UNKNOWN
PartitionName=actorrt Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""
        )
        munged = [
            tool("munged"), "-F", f"--socket={sock}", f"--key-file={key}",
            f"--pid-file={root}/munged.pid", f"--log-file={root}/munged.log",
            f"--seed-file={root}/munged.seed",
        ]  # fmt: skip
        for name, cmd in (
            ("munged", munged),
            ("slurmctld", [tool("slurmctld"), "-D", "-f", str(self.conf)]),
            ("slurmd", [tool("slurmd"), "-D", "-f", str(self.conf), "-N", host]),
        ):
            with open(root / f"{name}.out", "wb") as out:
                self.procs.append(
                    subprocess.Popen(cmd, env=self.env, stdout=out, stderr=subprocess.STDOUT)
                )
            if name == "munged" and not self._wait(lambda: sock.exists(), 10):
                return f"munged did not start:\n{tail(root / 'munged.out')}"
        if not self._wait(lambda: self._node_state() == "idle", START_S):
            logs = "\n".join(
                f"--- {n}\n{tail(root / n)}" for n in ("slurmctld.out", "slurmctld.log",
                                                       "slurmd.out", "slurmd.log")
            )  # fmt: skip
            return f"the node was not idle within {START_S} s ({self._node_state()!r}):\n{logs}"
        return None

    def _wait(self, ready, within: float) -> bool:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            if any(p.poll() is not None for p in self.procs):
                return False  # a daemon exited
            if ready():
                return True
            time.sleep(0.2)
        return False

    def _node_state(self) -> str:
        out = self.run(["sinfo", "-h", "-o", "%T"], timeout=10)
        return out.stdout.strip() if out.returncode == 0 else f"sinfo: {out.stderr.strip()}"

    def run(self, cmd: list[str], timeout: float, **kw) -> subprocess.CompletedProcess:
        try:
            return subprocess.run(
                cmd, env=kw.pop("env", self.env), capture_output=True, text=True,
                timeout=timeout, **kw,
            )  # fmt: skip
        except subprocess.TimeoutExpired as exc:
            return subprocess.CompletedProcess(cmd, 124, exc.stdout or "", "timed out")

    def job_processes(self) -> list[int]:
        """Pids of every process that runs with this cluster's SLURM_CONF (steps, tasks)."""
        mine = {p.pid for p in self.procs}
        found = []
        for proc in psutil.process_iter():
            try:
                if proc.pid not in mine and proc.environ().get("SLURM_CONF") == str(self.conf):
                    found.append(proc.pid)
            except (psutil.Error, OSError):
                pass
        found = [p for p in found if p != os.getpid() and pid_alive(p)]
        return found

    def stop(self) -> None:
        """Stops the job's leftovers and the daemons, by pid (TERM, then KILL)."""
        kill_pids(self.job_processes())
        for proc in reversed(self.procs):  # slurmd, slurmctld, then munged
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in reversed(self.procs):
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


@pytest.fixture
def slurm():
    """A one-node SLURM cluster of this test's own; skips where it cannot run."""
    missing = [t for t in TOOLS if tool(t) is None]
    if missing:
        pytest.skip(
            f"SLURM is not installed (no {', '.join(missing)}): apt-get install slurm-wlm "
            "munge (.ci/run does, as root)"
        )
    if os.geteuid() != 0:
        pytest.skip("slurmd launches jobs as their users, so it must run as root")
    # Not the test's tmp_path: munged needs every directory above its socket searchable
    # by all, and pytest's base directory is private.
    root = Path(tempfile.mkdtemp(prefix="actorrt-slurm-"))
    cluster = SlurmCluster(root)
    try:
        why = cluster.start()
        if why is not None:
            pytest.skip(f"SLURM could not start here: {why}")
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


def test_the_docs_slurm_recipe_runs_end_to_end(slurm, tmp_path):
    script, driver = doc_recipe()
    job = slurm.root / "job"
    job.mkdir()
    (job / "job.sbatch").write_text(script)
    (job / "my_driver.py").write_text(driver)
    env = {
        **slurm.env,
        # `python` in the script is this interpreter (sbatch passes the environment on)
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "DRIVER_HOST": "127.0.0.1",  # loopback only
        "DRIVER_PORT": str(free_port()),
    }
    started = time.monotonic()
    out = slurm.run(
        ["sbatch", "--wait", "--nodes=1", "--ntasks-per-node=3", "--output=job.out",
         "--parsable", "job.sbatch"],
        timeout=JOB_S, env=env, cwd=job,
    )  # fmt: skip
    took = time.monotonic() - started
    job_out = tail(job / "job.out", 60)
    job_id = out.stdout.strip().split(";")[0]
    if out.returncode == 124 and job_id:
        slurm.run(["scancel", job_id], timeout=10)
    assert out.returncode == 0, (
        f"sbatch --wait: {out.returncode} after {took:.0f} s: {out.stderr}\n--- job.out\n"
        f"{job_out}\n--- slurmd.log\n{tail(slurm.root / 'slurmd.log')}"
    )
    # One actor answered from each srun task: three workers, three pids, tasks 0, 1, 2.
    lines = re.findall(r"actor on (\S+), pid (\d+), SLURM task (\d+)", job_out)
    assert sorted(task for _, _, task in lines) == ["0", "1", "2"], job_out
    pids = [int(pid) for _, pid, _ in lines]
    assert len(set(pids)) == 3 and os.getpid() not in pids, job_out
    state = slurm.run(["scontrol", "show", "job", job_id], timeout=10).stdout
    assert "JobState=COMPLETED" in state and "ExitCode=0:0" in state, state
    # Everything gone after: the workers, the steps, the queue.
    assert not wait_gone(pids, 10), f"workers still running after the job: {pids}"
    queue = slurm.run(["squeue", "-h"], timeout=10)
    assert queue.returncode == 0 and not queue.stdout.strip(), queue.stdout
    left = wait_gone(slurm.job_processes(), 10)
    assert not left, f"processes of the job left after it: {left}"
