import os
import signal

import pytest

import actorrt


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (exited, not yet reaped) counts as gone
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def kill_pids(pids) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.fixture(scope="module")
def cluster():
    """A 2-worker local cluster shared by one test module; always shut down."""
    rt = actorrt.start(num_workers=2, timeout=90)
    pids = list(rt_pids())
    try:
        yield rt
    finally:
        actorrt.shutdown()
        kill_pids(p for p in pids if pid_alive(p))


def rt_pids():
    from actorrt.runtime import runtime as rt_mod

    rt = rt_mod._current
    return rt.local_worker_pids if rt is not None else []
