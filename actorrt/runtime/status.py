"""``actorrt.status()``: the cluster as a readable table, built from ``nodes()`` and ``actors()``.

The directory on rank 0 knows every process and actor. What only a process itself knows
(its pid, the calls queued or running on its actors) comes from one short RPC to each
live process, sent to all at once and bounded: a process that does not answer within
the bound shows as ``unresponsive``, which is how a multi-node worker that vanished
without its death being noticed shows up.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from actorrt.errors import NotInitializedError
from actorrt.runtime import context
from actorrt.runtime.directory import ActorInfo, NodeInfo
from actorrt.runtime.host import ActorHost
from actorrt.runtime.objects import ObjectStore

__all__ = ["ask_live", "cluster_status", "format_status", "local_stats", "rpc_process_stats"]

QUERY_TIMEOUT_S = 2.0

T = TypeVar("T")


def local_stats(host: ActorHost) -> dict[str, Any]:
    """This process's pid, its actors' calls queued or running, and the objects it owns.

    Returns:
        ``{"pid": int, "calls": {actor_id: int}, "running": {actor_id: [name, seconds,
        count]}, "objects": [count, bytes]}``: per actor running calls now, the one that
        has run longest (its name, for how many seconds) and how many run.
    """
    try:
        objects = list(context.part(ObjectStore).stats())
    except NotInitializedError:  # no runtime installed (a bare host in tests)
        objects = [0, 0]
    now = time.monotonic()
    running = {}
    for actor_id, calls in host.calls_running().items():
        name, began = min(calls, key=lambda call: call[1])
        running[actor_id] = [name, now - began, len(calls)]
    return {
        "pid": os.getpid(),
        "calls": host.calls_in_flight(),
        "running": running,
        "objects": objects,
    }


def rpc_process_stats() -> dict[str, Any]:
    """Runs on each process when a status is asked for: see :func:`local_stats`."""
    return local_stats(context.part(ActorHost))


def ask_live(
    own: str,
    nodes: Sequence[NodeInfo],
    fn: Callable[..., T],
    args: tuple[Any, ...] = (),
    *,
    timeout: float = QUERY_TIMEOUT_S,
    here: Callable[[], T] | None = None,
) -> dict[str, T]:
    """``fn(*args)`` on every live process at once, each call bounded by ``timeout``.

    Args:
        own: This process's RPC name: its answer is ``here()`` (default: ``fn(*args)``),
            read directly.
        nodes: The directory's processes (dead ones are not asked).
        fn: A module-level function every process can resolve.
        args: Its arguments.
        timeout: Seconds each process has to answer.
        here: What this process answers, when not ``fn(*args)``.

    Returns:
        The answers by process name; a process that did not answer is left out.
    """
    import torch.distributed.rpc as rpc

    futures = {}
    out: dict[str, T] = {}
    for node in nodes:
        if not node.alive:
            continue
        if node.process == own:
            out[node.process] = here() if here is not None else fn(*args)
            continue
        try:
            futures[node.process] = rpc.rpc_async(node.process, fn, args=args, timeout=timeout)
        except Exception:  # the agent cannot reach it at all
            pass
    for name, fut in futures.items():
        try:
            out[name] = fut.wait()  # sent at once: the waits overlap
        except Exception:  # timed out or the process is gone
            pass
    return out


def cluster_status(
    own: str,
    host: ActorHost,
    nodes: Sequence[NodeInfo],
    actors: Sequence[ActorInfo],
    pids: dict[int, int],
    max_actors: int = 50,
) -> str:
    """The status table of the cluster (see :func:`actorrt.status`).

    Args:
        own: This process's RPC name (its stats are read here, not asked for).
        host: This process's actor host.
        nodes: The directory's processes.
        actors: The directory's actors.
        pids: Process ids by rank, as the driver knows them.
        max_actors: Actor rows shown at most.
    """
    stats = ask_live(own, nodes, rpc_process_stats, here=lambda: local_stats(host))
    return format_status(nodes, actors, stats, pids=pids, max_actors=max_actors)


def format_status(
    nodes: Sequence[NodeInfo],
    actors: Sequence[ActorInfo],
    stats: dict[str, dict[str, Any]],
    *,
    pids: dict[int, int] | None = None,
    max_actors: int = 50,
) -> str:
    """Formats the status table.

    Args:
        nodes: One record per process (``actorrt.nodes()``).
        actors: One record per actor (``actorrt.actors()``).
        stats: What each process that answered said of itself, by process name
            (see :func:`local_stats`); a live process missing here did not answer.
        pids: Pids by rank known without asking (from the rendezvous).
        max_actors: Actor rows shown at most; the rest are counted.

    Returns:
        The text: a summary line, a table of processes, then a table of actors.
    """
    pids = pids or {}
    calls: dict[str, int] = {}
    running: dict[str, list[Any]] = {}
    for reported in stats.values():
        calls.update(reported.get("calls") or {})
        running.update(reported.get("running") or {})
    by_process: dict[str, list[ActorInfo]] = {}
    for a in actors:
        if a.state != "DEAD":  # a process's column counts those it hosts now
            by_process.setdefault(a.process, []).append(a)

    rows = []
    unresponsive = dead = 0
    for n in sorted(nodes, key=lambda n: n.rank):
        s = stats.get(n.process)
        pid = s.get("pid") if s else pids.get(n.rank)
        if not n.alive:
            state, dead = "dead", dead + 1
        elif s is None:
            state, unresponsive = "unresponsive", unresponsive + 1
        else:
            state = "alive"
        if not n.hosts_actors:
            state += " (driver)"
        mine = by_process.get(n.process, [])
        in_flight = "-"
        if not n.hosts_actors:
            pass  # the driver hosts no actors
        elif s is not None and s.get("calls") is not None:
            in_flight = str(sum(s["calls"].values()))
        elif n.alive:
            in_flight = "?"
        owned = s.get("objects") if s is not None else None
        objects = f"{owned[0]} ({_size(owned[1])})" if owned and owned[0] else "-"
        rows.append(
            [
                n.process,
                str(n.rank),
                str(pid) if pid is not None else "?",
                n.host,
                ",".join(n.labels) or "-",
                _gpus(n.gpus),
                _actor_summary(mine) if n.hosts_actors else "-",
                in_flight,
                objects,
                state,
            ]
        )
    hosts = len({n.host for n in nodes})
    total_calls = sum(calls.values())
    alive_actors = sum(1 for a in actors if a.state == "ALIVE")
    summary = (
        f"actorrt cluster: {len(nodes)} process(es) on {hosts} host(s), "
        f"{len(actors)} actor(s) ({alive_actors} alive), {total_calls} call(s) in flight"
    )
    notes = []
    if dead:
        notes.append(f"{dead} process(es) dead")
    if unresponsive:
        notes.append(f"{unresponsive} process(es) did not answer within {QUERY_TIMEOUT_S:g} s")
    if notes:
        summary += "; " + "; ".join(notes)
    parts = [
        summary,
        "",
        _table(
            [
                "PROCESS",
                "RANK",
                "PID",
                "HOST",
                "LABELS",
                "GPUS",
                "ACTORS",
                "CALLS",
                "OBJECTS",
                "STATE",
            ],
            rows,
        ),
    ]
    if actors:
        shown = sorted(  # the ended ones last: past max_actors, they are only counted
            actors,
            key=lambda a: (a.state == "DEAD", a.rank, a.class_name, a.slot or "", a.actor_id),
        )
        actor_rows = [
            [
                a.actor_id,  # the full id: the form of handles and errors
                a.class_name,
                a.name or "-",
                a.slot or a.label or "-",
                a.process,
                a.host,
                _gpus(a.gpus),
                str(calls[a.actor_id]) if a.actor_id in calls else "-",
                _running(running.get(a.actor_id)),
                a.state.lower(),
            ]
            for a in shown[:max_actors]
        ]
        headers = ["ACTOR", "CLASS", "NAME", "SLOT", "PROCESS", "HOST", "GPUS", "CALLS"]
        parts += ["", _table([*headers, "RUNNING", "STATE"], actor_rows)]
        if len(shown) > max_actors:
            parts.append(f"... and {len(shown) - max_actors} more actor(s)")
    parts.append("")
    parts.append("CALLS: calls queued or running on the actors (- : unknown or none to ask).")
    parts.append(
        "RUNNING: the method that has run longest on the actor now (__init__: it is "
        "being made), for how long (+n: n more run at once)."
    )
    parts.append("OBJECTS: objects the process owns (large results, puts) and their bytes.")
    return "\n".join(parts)


def _size(nbytes: int) -> str:
    size = float(nbytes)
    for unit in ("B", "KB", "MB"):
        if size < 1000:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{size:.1f} GB"


def _running(running: Sequence[Any] | None) -> str:
    """``train 12.3s``, or ``train 12.3s +2`` when two more calls run beside it."""
    if not running:
        return "-"
    name, seconds, count = running
    more = f" +{count - 1}" if count > 1 else ""
    return f"{name} {seconds:.1f}s{more}"


def _gpus(gpus: Iterable[int]) -> str:
    return ",".join(map(str, gpus)) or "-"


def _actor_summary(actors: Sequence[ActorInfo]) -> str:
    if not actors:
        return "0"
    kinds = Counter(a.class_name for a in actors)
    names = ", ".join(f"{k} x{n}" if n > 1 else k for k, n in sorted(kinds.items()))
    return f"{len(actors)}: {names}"


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]
    lines = [headers, *rows]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip()
        for line in lines
    )
