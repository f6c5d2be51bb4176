"""The local cluster's zygote: one fresh interpreter imports torch once and forks the workers.

Importing torch is most of a worker's start-up (about 1.5 s of CPU here). Four fresh
workers on two cores import it side by side; one zygote imports it once and forks four
workers that have it already. The workers are still not forks of the user's driver: the
zygote is a fresh ``python -m actorrt.cluster.zygote`` with its environment set at exec
(``IBV_FORK_SAFE``, ``THP_MEM_ALLOC_ENABLE``, ``OMP_NUM_THREADS``), and it forks before it
starts any thread or touches CUDA or ibverbs (importing torch does neither).

Protocol with the driver (:class:`~actorrt.cluster.local.LocalCluster`):

- stdin: one JSON line, the list of worker configs; then nothing. The zygote and every
  worker read the same pipe to its end: EOF means the driver is gone.
- ``--report-fd N``: lines ``pid RANK PID`` as workers are forked, ``exit RANK CODE``
  as they end (the zygote is their parent, so it reaps them and knows their status).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
import traceback
from typing import Any, TextIO

__all__ = ["main"]

_GRACE_AFTER_DRIVER_EXIT = 10.0  # seconds workers get to notice EOF and exit by themselves


def _preload() -> None:
    # What every worker imports before it can answer: torch, its RPC package, and ours.
    import torch.distributed.rpc  # noqa: F401

    import actorrt.cluster.process_setup  # noqa: F401
    import actorrt.cluster.rendezvous  # noqa: F401
    import actorrt.runtime.runtime  # noqa: F401


def _in_child(config: dict[str, Any], report_fd: int) -> None:
    os.close(report_fd)
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
    args = p.parse_args(argv)
    report = os.fdopen(args.report_fd, "w", buffering=1)
    _preload()
    line = sys.stdin.buffer.readline()
    if not line:
        return  # the driver gave up before sending the configs
    children: dict[int, int] = {}  # pid -> rank
    for config in json.loads(line):
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _in_child(config, args.report_fd)
        children[pid] = config["rank"]
        report.write(f"pid {config['rank']} {pid}\n")
    _reap(children, report)
    try:
        report.close()
        sys.stderr.flush()
    except OSError:  # the driver is gone
        pass
    os._exit(0)  # no teardown: the driver-watch thread may still be blocked reading stdin


def _reap(children: dict[int, int], report: TextIO) -> None:
    """Reports each worker's exit; if the driver goes, gives workers a grace, then kills."""
    lock = threading.Lock()  # a pid in `children` under it is unreaped, so still that worker's

    def watch_driver() -> None:
        # The raw fd, not sys.stdin: a daemon thread blocked inside the buffered reader
        # holds its lock, and interpreter teardown would then abort on it.
        while os.read(0, 1):
            pass
        deadline = time.monotonic() + _GRACE_AFTER_DRIVER_EXIT
        while children and time.monotonic() < deadline:
            time.sleep(0.1)
        with lock:
            for pid in children:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    threading.Thread(target=watch_driver, name="actorrt-zygote-watch", daemon=True).start()
    while children:
        try:
            # Wait without reaping, then reap under the lock (see `lock`).
            info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOWAIT)
        except ChildProcessError:
            break
        if info is None:
            continue
        with lock:
            _, status = os.waitpid(info.si_pid, 0)
            rank = children.pop(info.si_pid, None)
        if rank is None:
            continue
        try:
            report.write(f"exit {rank} {os.waitstatus_to_exitcode(status)}\n")
        except OSError:  # the driver is gone; nobody reads the reports
            pass


if __name__ == "__main__":
    main()
