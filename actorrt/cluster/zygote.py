"""The zygote: one fresh interpreter imports torch once and forks the workers of a host.

Importing torch is most of a worker's start-up (about 1.5 s of CPU here). Four fresh
workers on two cores import it side by side; one zygote imports it once and forks four
workers that have it already. The workers are still not forks of the user's driver: the
zygote is a fresh ``python -m actorrt.cluster.zygote`` with its environment set at exec
(``IBV_FORK_SAFE``, ``THP_MEM_ALLOC_ENABLE``, ``OMP_NUM_THREADS``), and it never touches
CUDA or ibverbs (importing torch does neither); its other threads only wait. Its objects
are frozen before each fork, so the workers' garbage collections leave their pages shared.

Protocol with its parent, the driver or ``actorrt worker --nproc``
(:class:`~actorrt.cluster.local.LocalCluster`):

- ``--config-fd N``: JSON lines, each a list of worker configs to fork: the cluster's
  workers first, later one line per worker that replaces a dead one. EOF: fork no more,
  and exit once every worker has.
- stdin: nothing is written to it. The zygote and every worker read it to its end: EOF
  means the parent (driver) is gone.
- ``--report-fd N``: lines ``pid RANK PID`` as workers are forked, ``exit RANK CODE``
  as they end (the zygote is their parent, so it reaps them and knows their status).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import signal
import sys
import threading
import time
import traceback
from typing import Any, TextIO

__all__ = ["command", "main"]

_GRACE_AFTER_DRIVER_EXIT = 10.0  # seconds workers get to notice EOF and exit by themselves


def command(report_fd: int, config_fd: int) -> list[str]:
    """The command line that runs a zygote reading configs and writing reports on these fds."""
    return [
        sys.executable,
        "-m",
        "actorrt.cluster.zygote",
        "--report-fd",
        str(report_fd),
        "--config-fd",
        str(config_fd),
    ]


def _preload() -> None:
    # What every worker imports before it can answer: torch, its RPC package, and ours.
    import torch.distributed.rpc  # noqa: F401

    import actorrt.cluster.process_setup  # noqa: F401
    import actorrt.cluster.rendezvous  # noqa: F401
    import actorrt.runtime.runtime  # noqa: F401


def _in_child(config: dict[str, Any], report_fd: int, config_fd: int) -> None:
    gc.enable()  # the zygote's objects stay frozen: collections here leave their pages shared
    os.close(report_fd)
    os.close(config_fd)
    # Python reseeds `random` after fork by itself; numpy's global generator it does not,
    # and fresh workers would each have drawn their own seed. (numpy.random is loaded
    # lazily and the preload does not load it today; this keeps a future preload honest.)
    np_random = sys.modules.get("numpy.random")
    if np_random is not None:
        np_random.seed()
    from actorrt.cluster.worker import run_config

    code = 1
    try:
        code = run_config(config)
    except KeyboardInterrupt:  # Ctrl-C (or SIGINT passed on): an ending, not a bug
        code = 128 + signal.SIGINT
    except SystemExit as exc:  # what `python -m` would print and return
        if isinstance(exc.code, int):
            code = exc.code
        elif exc.code is not None:
            print(exc.code, file=sys.stderr)
    except BaseException:  # print it before os._exit, which would lose it
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)  # skip interpreter teardown: actor threads may still be blocked


def main(argv: list[str] | None = None) -> None:
    """Entry point of ``python -m actorrt.cluster.zygote`` (see the module's protocol)."""
    p = argparse.ArgumentParser(prog="python -m actorrt.cluster.zygote")
    p.add_argument("--report-fd", type=int, required=True)
    p.add_argument("--config-fd", type=int, required=True)
    args = p.parse_args(argv)
    report = os.fdopen(args.report_fd, "w", buffering=1)
    # A full collection in a worker writes to every object it inherited, copying the
    # page each lives on: at 64 workers that was 37 MB per worker (docs/performance.md).
    # So the zygote collects nothing while it imports (no freed holes for a worker to
    # fill) and freezes what it has before each fork, as Python's gc docs advise.
    gc.disable()
    _preload()
    cond = threading.Condition()  # guards `children` (pid -> rank) and `report`
    children: dict[int, int] = {}
    threading.Thread(
        target=_reap, args=(children, cond, report), name="actorrt-zygote-reap", daemon=True
    ).start()
    threading.Thread(
        target=_watch_driver, args=(children, cond), name="actorrt-zygote-watch", daemon=True
    ).start()
    with os.fdopen(args.config_fd, "rb") as configs:
        for line in configs:
            for config in json.loads(line):
                sys.stdout.flush()
                sys.stderr.flush()
                # Forked under the lock: the reaper cannot see this child's exit before
                # it is in `children` (the child never touches the lock).
                gc.freeze()
                with cond:
                    pid = os.fork()
                    if pid == 0:
                        _in_child(config, args.report_fd, args.config_fd)
                    children[pid] = config["rank"]
                    _report(report, f"pid {config['rank']} {pid}")
                    cond.notify_all()
    with cond:  # no more forks: end once every worker has (the watch kills them if need be)
        cond.wait_for(lambda: not children)
    try:
        report.close()
        sys.stderr.flush()
    except OSError:  # the driver is gone
        pass
    os._exit(0)  # no teardown: the watch thread may still be blocked reading stdin


def _report(report: TextIO, line: str) -> None:
    try:
        report.write(line + "\n")
    except OSError:  # the driver is gone; nobody reads the reports
        pass


def _watch_driver(children: dict[int, int], cond: threading.Condition) -> None:
    """Once the driver is gone (stdin EOF), gives the workers a grace, then kills them."""
    # The raw fd, not sys.stdin: a daemon thread blocked inside the buffered reader
    # holds its lock, and interpreter teardown would then abort on it.
    while os.read(0, 1):
        pass
    with cond:
        cond.wait_for(lambda: not children, timeout=_GRACE_AFTER_DRIVER_EXIT)
        for pid in children:  # under the lock: each is unreaped, so still that worker
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _reap(children: dict[int, int], cond: threading.Condition, report: TextIO) -> None:
    """Reaps each worker and reports its exit."""
    while True:
        with cond:
            cond.wait_for(lambda: bool(children))
        try:
            # Wait without reaping, then reap under the lock (see _watch_driver).
            info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOWAIT)
        except ChildProcessError:
            time.sleep(0.01)
            continue
        if info is None:
            continue
        with cond:
            _, status = os.waitpid(info.si_pid, 0)
            rank = children.pop(info.si_pid, None)
            if rank is not None:
                _report(report, f"exit {rank} {os.waitstatus_to_exitcode(status)}")
            cond.notify_all()


if __name__ == "__main__":
    main()
