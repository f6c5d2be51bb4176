"""``actorrt worker --nproc N``: this node's share of a multi-node cluster, from one zygote.

One ``actorrt worker`` process is one worker, and each imports torch (about 200 MB and
1.5 s of CPU). With ``--nproc N`` the command starts ranks ``R..R+N-1`` (``R`` being
``--rank``) the way the driver starts a local cluster: one zygote imports torch once and
forks the N workers (:class:`~actorrt.cluster.local.LocalCluster`). Each child joins
the driver's rendezvous exactly as its own ``actorrt worker --rank R+i`` would: same
token, labels, transport, timeouts and log level, and the interface that reaches the
driver (``--socket-ifname`` / ``TP_SOCKET_IFNAME`` if given).

GPUs: each child offers one, in turn: child ``i`` takes the ``i % len``-th of ``--gpus``,
or without ``--gpus`` the visible GPU ``i % count`` (none where there is no GPU), as the
driver's local cluster and torchrun's ``LOCAL_RANK`` do. ``--gpus ''`` offers none.

This process imports no torch. It waits for its children and exits 0 once every one
has exited 0; a child that fails is named (rank, pid, exit code) when it does, and the
exit status is then the first failed rank's (1 for one killed by a signal). SIGINT and
SIGTERM are passed on to the children (the zygote runs in a session of its own, so a
terminal's Ctrl-C reaches them once, through here); those still running
:data:`SIGNAL_GRACE_S` later are killed, a last line sums up how each ended, and the
status is ``128 + signal``. If this process is killed, its end of the children's stdin
closes and they end by themselves (the zygote kills those still running after its
grace).
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from collections.abc import Iterable, Mapping
from types import FrameType
from typing import TYPE_CHECKING

from actorrt.cluster.local import LocalCluster, exit_text
from actorrt.logs import get_logger

if TYPE_CHECKING:
    from actorrt.cluster.worker import WorkerConfig

__all__ = ["SIGNAL_GRACE_S", "child_gpus", "run_node"]

log = get_logger("node")

#: Seconds the children get to exit after a SIGINT / SIGTERM passed on, before SIGKILL.
SIGNAL_GRACE_S = 10.0

_POLL_S = 0.5  # how often the wait looks at signals received meanwhile


def child_gpus(gpus: tuple[int, ...] | None, nproc: int) -> list[tuple[int, ...] | None]:
    """What each of ``nproc`` children offers, from the parsed ``--gpus``.

    Args:
        gpus: ``--gpus`` as parsed (None: not given).
        nproc: Children.

    Returns:
        By child: one GPU in turn of ``gpus``; ``()`` for none; None where the child
        picks visible GPU ``local_rank % count`` itself (``--gpus`` not given).
    """
    if gpus is None:
        return [None] * nproc
    return [(gpus[i % len(gpus)],) if gpus else () for i in range(nproc)]


def run_node(cfg: WorkerConfig, nproc: int) -> int:
    """Runs ranks ``cfg.rank..cfg.rank+nproc-1`` until all have exited; the exit status.

    Args:
        cfg: The first child's configuration (checked by ``config_from_args``); the
            others differ in rank and GPU only.
        nproc: Children to start (at least 2; one is a plain ``actorrt worker``).
    """
    first, last = cfg.rank, cfg.rank + nproc - 1
    received: list[int] = []

    def on_signal(signum: int, frame: FrameType | None) -> None:
        received.append(signum)

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, on_signal)
    cluster = LocalCluster(
        nproc,
        cfg.port,
        cfg.token,
        gpus_per_worker=child_gpus(cfg.gpus, nproc),
        labels_per_worker=[cfg.labels] * nproc,
        timeout=cfg.timeout,
        rpc_timeout=cfg.rpc_timeout,
        num_worker_threads=cfg.num_worker_threads,
        host=cfg.host,
        first_rank=first,
        world_size=cfg.world_size,
        socket_ifname=None,  # each child finds the interface towards the driver
        options={
            "transport": cfg.transport,
            "log_level": cfg.log_level,
            "local_rank": 0 if cfg.gpus is None else None,
        },
        own_session=True,
    )

    named: set[int] = set()
    lock = threading.Lock()
    forwarded: int | None = None  # the signal passed on, once one was

    def on_exit(rank: int) -> None:  # on the zygote's report thread, or here
        pid, code = cluster.exit_of(rank)
        with lock:
            # Exits after a signal passed on are its doing: summed up at the end.
            if not code or rank in named or forwarded is not None:
                return
            named.add(rank)
        _say(f"rank {rank} (pid {pid}) failed: {exit_text(code)}")

    cluster.on_exit = on_exit
    for rank in cluster.dead_ranks():  # exits reported before on_exit was set
        on_exit(rank)
    log.info("ranks %d..%d: forked from a zygote, pids %s", first, last, cluster.pids)
    kill_at = float("inf")
    while (exits := cluster.wait(timeout=_POLL_S)) is None:
        if received:
            with lock:
                forwarded = received[-1]
            received.clear()
            ranks = cluster.signal_all(forwarded)
            kill_at = min(kill_at, time.monotonic() + SIGNAL_GRACE_S)
            log.info("passed %s on to ranks %s", signal.Signals(forwarded).name, ranks)
        if time.monotonic() > kill_at:
            ranks = cluster.signal_all(signal.SIGKILL)
            _say(f"ranks {_ranks(ranks)} still ran {SIGNAL_GRACE_S:g} s after the signal: killed")
            kill_at = float("inf")
    cluster.stop(timeout=5.0)  # every child has exited: this ends the zygote
    unreported = [r for r in exits if cluster.exit_of(r)[1] is None]
    if unreported:
        _say(f"the zygote ended before ranks {_ranks(unreported)} did (see its error above)")
    if forwarded is not None:
        _say(f"stopped by {signal.Signals(forwarded).name}: {_outcomes(exits)}")
        return 128 + forwarded
    failed = {rank: code for rank, code in exits.items() if code != 0}
    if not failed:
        return 0
    _say(
        f"{len(failed)} of the {nproc} worker processes (ranks {first}..{last}) failed; "
        f"{_outcomes(exits)}"
    )
    code = failed[min(failed)]
    return code if code > 0 else 1


def _ranks(ranks: Iterable[int]) -> str:
    return ", ".join(map(str, sorted(ranks)))


def _outcomes(exits: Mapping[int, int]) -> str:
    """``exit code 0: ranks 1, 3; killed by SIGKILL: ranks 2``: the ranks by how they ended."""
    by_text: dict[str, list[int]] = {}
    for rank in sorted(exits):
        by_text.setdefault(exit_text(exits[rank]), []).append(rank)
    return "; ".join(f"{text}: ranks {_ranks(ranks)}" for text, ranks in by_text.items())


def _say(line: str) -> None:
    print(f"actorrt worker: {line}", file=sys.stderr, flush=True)
