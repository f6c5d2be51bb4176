"""The timeline: what each call did, in every process, gathered into one trace file.

With ``actorrt.start(trace=True)`` (or ``ACTORRT_TRACE=1``) every process of the
cluster records, per actor call:

- on the caller, its **round trip**: from the call being packed to its reply arriving,
  with the bytes that went out and came back;
- on the actor's process, its **wait** in the mailbox (arrival to the start of the
  method), its **run** (the method), and its **reply** (packing the return value and
  handing it to RPC), with the reply's bytes; for a streaming call, each **value** it
  sent, with its index and bytes;
- on a process that fetches an object from its owner, the **fetch**, with its bytes,
  the owner and the road its tensors took;
- anywhere, the **spans** user code marks with :class:`profile` (``actorrt.profile``), on
  the thread that ran them or on a named track of their own (:func:`span`).

:func:`gather` (``actorrt.timeline(path)``) asks every live process for its records and
writes one Chrome trace / Perfetto JSON file: one row per process, one track per thread
(an actor's thread is named after the actor), as ``ray timeline`` does. Open it in
https://ui.perfetto.dev or ``chrome://tracing``.

Off by default. The hooks on the call path are each one ``if trace.ON:`` test, so a
process that does not trace pays one global lookup per hook (measured:
docs/performance.md, "The timeline"). Records are plain tuples appended to a list (one
append is atomic under the GIL, so no lock), at most :data:`MAX_EVENTS` per process.

Times are wall-clock nanoseconds (``time.time_ns``): processes on one host share that
clock, and on several hosts :func:`gather` corrects each host's offset when it is larger
than the round trip that measured it.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Iterable
from contextlib import ContextDecorator
from typing import Any

import torch

from actorrt.placement.functions import EXECUTOR_PREFIX
from actorrt.runtime import context
from actorrt.runtime.gpu_spans import GpuSpans
from actorrt.runtime.protocol import task_name

__all__ = [
    "MAX_EVENTS",
    "ON",
    "answered",
    "arrived",
    "clock",
    "enable",
    "env_enabled",
    "events",
    "fetching",
    "gather",
    "profile",
    "ran",
    "rpc_collect",
    "sent",
    "span",
    "started",
    "to_chrome",
    "value",
]

ON = False
"""Whether this process records; read by the hooks on the call path (one lookup each)."""

MAX_EVENTS = 1_000_000
"""Records kept per process at most (about 100 bytes each); later ones are counted only."""

_CALL, _WAIT, _RUN, _REPLY, _FETCH = "call", "wait", "run", "reply", "fetch"
_SPAN = "span"
_VALUE = "value"  # a value a streaming call sent (actorrt.runtime.generators)
_TRACK_BASE = 1 << 48  # ids of named tracks: above any thread id the records hold

# (kind, name, begin ns, end ns, thread id, call key, detail dict)
_events: list[tuple[str, str, int, int, int, str, dict[str, Any]]] = []
_dropped = [0]
_threads: dict[int, str] = {}  # thread id -> its name, for every thread that recorded
_stamps: dict[int, list[Any]] = {}  # id(call) -> [arrival, start, end of run, run thread]
_tracks: dict[str, int] = {}  # named track -> its id among the thread ids
_tracks_lock = threading.Lock()  # two new tracks at once must not get one id
_gpu_spans = GpuSpans(time.time_ns)  # profile(cuda=True) spans whose GPU work is queued

clock = time.time_ns


def env_enabled() -> bool:
    """Whether ``ACTORRT_TRACE`` asks for a timeline (``1``, ``true``, ``yes``, ``on``)."""
    return os.environ.get("ACTORRT_TRACE", "").strip().lower() in ("1", "true", "yes", "on")


def enable(on: bool = True) -> None:
    """Starts (or stops) recording in this process; forgets what was recorded before."""
    global ON
    ON = False  # hooks racing this see "off" while the buffers are swapped
    _events.clear()
    _threads.clear()
    _stamps.clear()
    _tracks.clear()
    _gpu_spans.clear()
    _dropped[0] = 0
    _unrecorded.clear()
    ON = bool(on)


def events() -> list[tuple[str, str, int, int, int, str, dict[str, Any]]]:
    """A copy of this process's records (kind, name, begin, end, thread, call key, detail)."""
    return list(_events)


def _record(
    kind: str, name: str, begin: int, end: int, tid: int, key: str, detail: dict[str, Any]
) -> None:
    if len(_events) >= MAX_EVENTS:
        _dropped[0] += 1
        return
    _events.append((kind, name, begin, end, tid, key, detail))


def _thread() -> int:
    tid = threading.get_ident()
    if tid not in _threads:
        _threads[tid] = threading.current_thread().name
    return tid


def _track(name: str) -> int:
    tid = _tracks.get(name)
    if tid is None:
        with _tracks_lock:
            tid = _tracks.setdefault(name, _TRACK_BASE + len(_tracks))
            _threads[tid] = name
    return tid


_WALK_DEPTH = 6  # side list -> (args, kwargs) -> args -> a dict of tensors -> ...
_WALK_WIDTH = 256  # items looked at per container (a network's state dict fits)


def wire_bytes(wire: Any) -> int:
    """Bytes a packed value carries: its pickled blob plus its tensors (0 if unknown).

    A packed value is ``(blob, side)`` (see :mod:`actorrt.runtime.payload`): ``side``
    holds the tensors taken out of a pickled value, or the plain value itself (a batch
    as a dict of tensors, a reply's ``(status, value)``), walked here a few containers
    deep and a few hundred items wide, so it stays cheap.
    """
    try:
        blob, side = wire
        total = len(blob) if isinstance(blob, (bytes, bytearray)) else 0
        return total + _walk(side, _WALK_DEPTH)
    except Exception:  # not a wire we know: no figure rather than a failed call
        return 0


def _walk(x: Any, depth: int) -> int:
    n = _nbytes(x)
    if n or depth == 0:
        return n
    if isinstance(x, (tuple, list)):
        items = x[:_WALK_WIDTH]
    elif isinstance(x, dict):
        items = list(x.values())[:_WALK_WIDTH]
    else:
        return 0
    return sum(_walk(item, depth - 1) for item in items)


def _nbytes(x: Any) -> int:
    if isinstance(x, torch.Tensor):
        return x.numel() * x.element_size()
    if isinstance(x, (bytes, bytearray)):  # in a plain value (a remote function's bytes)
        return len(x)
    nbytes = getattr(x, "nbytes", None)  # numpy arrays, shared-memory handles
    return nbytes if isinstance(nbytes, int) else 0


# -- caller side ----------------------------------------------------------------------


def _what(actor: str, method: str) -> str:
    """A call's name on the timeline: ``Class.method``, or a remote function's own name.

    A function's calls go to an executor, which both sides name "remote function ..."
    as their class; shown so, the same call read "remote function f.f" on the caller's
    row and "remote function.f" on the row that ran it.
    """
    task = task_name(method)  # .options(name=...): shown by its own name, as Ray's
    if task is not None:
        return task
    if actor.startswith("remote function"):
        return str(method)
    return f"{actor}.{method}"


def sent(
    actor: str,
    method: str,
    worker: str,
    caller: str,
    actor_id: str,
    seq: int,
    begin: int,
    wire: Any,
    fut: torch.futures.Future[Any],
) -> None:
    """A call left: records its round trip once ``fut`` (its reply) completes.

    Args:
        actor: The actor's class name.
        method: The method's name.
        worker: The process it went to.
        caller: This process's RPC name.
        actor_id: The actor's id.
        seq: The call's sequence number (with ``caller`` and ``actor_id``, its key in
            the actor's records too).
        begin: :func:`clock` when the call was made (before packing; 0: tracing began
            meanwhile, the call is not recorded).
        wire: Its packed arguments (for their bytes).
        fut: The future of its packed reply.
    """
    if not begin:
        return
    what = _what(actor, method)
    key = call_key(caller, actor_id, seq, worker)
    tid = _thread()
    out = wire_bytes(wire)

    def done(f: torch.futures.Future[Any]) -> None:
        end = clock()
        try:
            back = wire_bytes(f.value())
        except Exception:  # a failed call: its error carries no payload worth counting
            back = 0
        _record(
            _CALL, what, begin, end, tid, key, {"to": worker, "bytes_out": out, "bytes_back": back}
        )
        _unrecorded.discard(f)

    _unrecorded.add(fut)
    fut.add_done_callback(done)


_unrecorded: set[torch.futures.Future[Any]] = set()
"""Replies of calls sent while tracing whose round trip is not recorded yet.

torch wakes a ``get`` waiting on a reply before it runs the reply's callbacks: a
``timeline()`` right after would miss the call just answered (:func:`_settle`).
"""


def _settle(bound: float = 1.0) -> None:
    """Waits (at most ``bound`` s) until every reply already in has its round trip recorded."""
    deadline = time.monotonic() + bound
    while any(f.done() for f in list(_unrecorded)) and time.monotonic() < deadline:
        time.sleep(0.001)


def fetching(
    object_id: str, owner: str, road: str, begin: int, fut: torch.futures.Future[Any]
) -> None:
    """A fetch of an object left for its owner: records it once ``fut`` (the value) is in.

    Args:
        object_id: The object's id.
        owner: The process that keeps it.
        road: How its tensors travel from there (the pair's transport, or ``shm``).
        begin: :func:`clock` when the fetch was asked for.
        fut: The future of the packed value.
    """
    tid = _thread()

    def done(f: torch.futures.Future[Any]) -> None:
        end = clock()
        try:
            got = wire_bytes(f.value())
        except Exception:  # lost: no payload
            got = 0
        detail = {"from": owner, "road": road, "bytes": got}
        _record(_FETCH, f"fetch {object_id[:12]}", begin, end, tid, object_id, detail)

    fut.add_done_callback(done)


# -- actor side -----------------------------------------------------------------------


def arrived(call: Any) -> None:
    """A call reached its actor's mailbox (on an RPC thread)."""
    _stamps[id(call)] = [clock(), 0, 0, 0]


def call_key(caller: str, actor_id: str, seq: int, worker: str) -> str:
    """The key a call's records share on both sides (``args.call``).

    ``caller/actor id/seq`` for an actor's call. Remote functions' executors have the
    same id on every process (``fn/1``), and a caller numbers its calls per process, so a
    function call's key names the process that ran it too: ``caller/fn/1@worker1/seq``.
    """
    if actor_id.startswith(EXECUTOR_PREFIX):
        return f"{caller}/{actor_id}@{worker}/{seq}"
    return f"{caller}/{actor_id}/{seq}"


def _here() -> str:
    """This process's RPC name, as its runtime has it ("" without one: a unit test)."""
    return getattr(context.installed(), "name", "")


def started(call: Any) -> None:
    """The actor's thread begins the call's method."""
    stamps = _stamps.get(id(call))
    if stamps is not None:
        stamps[1] = clock()
        stamps[3] = _thread()


def ran(call: Any) -> None:
    """The call's method returned (or raised); its reply is being packed."""
    stamps = _stamps.get(id(call))
    if stamps is not None:
        stamps[2] = clock()


def answered(actor: str, actor_id: str, call: Any, wire: Any) -> None:
    """The call's reply went to RPC: records its wait, run and reply.

    Args:
        actor: The actor's class name.
        actor_id: The actor's id.
        call: The mailbox's call (``caller``, ``seq``, ``method``).
        wire: The packed reply (for its bytes).
    """
    stamps = _stamps.pop(id(call), None)
    if stamps is None or call.method is None:
        return  # arrived before tracing began, or a skipped sequence number
    end = clock()
    arrival, start, ran_end, tid = stamps
    what = _what(actor, call.method)
    key = call_key(call.caller, actor_id, call.seq, _here())
    detail = {"caller": call.caller, "seq": call.seq, "actor_id": actor_id}
    here = _thread()
    if not start:  # killed before it ran: it waited until now
        _record(_WAIT, what, arrival, end, here, key, detail)
        return
    _record(_WAIT, what, arrival, start, tid, key, detail)
    _record(_RUN, what, start, ran_end or end, tid, key, detail)
    _record(_REPLY, what, ran_end or end, end, here, key, {**detail, "bytes": wire_bytes(wire)})


def value(actor: str, actor_id: str, call: Any, index: int, begin: int, wire: Any) -> None:
    """A streaming call's value ``index`` was packed and sent (from ``begin`` until now).

    Recorded on the actor's thread, under the call's key, with its bytes.
    """
    detail = {"caller": call.caller, "seq": call.seq, "index": index, "bytes": wire_bytes(wire)}
    key = call_key(call.caller, actor_id, call.seq, _here())
    _record(_VALUE, _what(actor, call.method), begin, clock(), _thread(), key, detail)


# -- user spans -----------------------------------------------------------------------


def span(name: str, begin: int, end: int, track: str | None = None, **detail: Any) -> None:
    """Records a span whose times are known already; nothing unless this process traces.

    Args:
        name: What it was (its title on the timeline).
        begin: Its start, :func:`clock` nanoseconds.
        end: Its end, :func:`clock` nanoseconds.
        track: A track of its own to put it on (for example work a GPU did, timed with
            CUDA events); default: the calling thread's.
        **detail: Shown with it (``args``); JSON-ready values.
    """
    if not ON:
        return
    tid = _thread() if track is None else _track(track)
    _record(_SPAN, name, begin, end, tid, "", detail)


class profile(ContextDecorator):  # noqa: N801 - used as a function is, like contextlib's
    """Marks a block of code as one span on the timeline (``with actorrt.profile("step"):``).

    The span lies on the thread that ran the block, in the process that ran it (the
    driver, an actor's method, a thread of the actor's own), beside the calls' records
    (``cat`` ``span``); spans nest. It is recorded only where the cluster traces
    (``actorrt.start(trace=True)`` or ``ACTORRT_TRACE=1``); anywhere else, actorrt
    started or not, the block just runs, at the cost of a flag test. Also a decorator:
    ``@actorrt.profile("load")`` makes each call of the function a span.

    With ``cuda=True`` the span also gets a twin on the process's ``cuda:N`` track: when
    the GPU ran the work the block queued, timed with CUDA events on the thread's
    current stream, with ``lag_ms``, how long after the block ended the GPU finished it.
    Near zero, the GPU waits for the host; many milliseconds, the GPU is the limit
    (:mod:`actorrt.runtime.gpu_spans`).

    Args:
        name: What the block does (its title on the timeline).
        cuda: Also show when the GPU ran the block's work (ignored without CUDA).
        **detail: Shown with the span (``args``); JSON-ready values.
    """

    def __init__(self, name: str, cuda: bool = False, **detail: Any) -> None:
        self.name, self.cuda, self.detail = name, cuda, detail
        self._begin = 0  # clock() at entry; 0: not recording this time
        self._gpu: tuple[int, Any] | None = None

    def _recreate_cm(self) -> profile:
        # As a decorator: a fresh span per call, so calls on several threads do not
        # share one entry time.
        return profile(self.name, self.cuda, **self.detail)

    def __enter__(self) -> None:
        if not ON:
            self._begin = 0
            return
        if self.cuda and torch.cuda.is_available():
            self._gpu = _gpu_spans.opened()
        self._begin = clock()

    def __exit__(self, *exc: object) -> None:
        if not self._begin:
            return
        end = clock()
        span(self.name, self._begin, end, **self.detail)
        if self._gpu is not None:
            _gpu_spans.closed(self._gpu, self.name, end, self.detail)
            self._gpu = None
            _record_gpu_spans()


def _record_gpu_spans() -> None:
    for done in _gpu_spans.finished():
        span(done.name, done.begin, done.end, track=done.track, **done.detail)


# -- gathering --------------------------------------------------------------------------


def rpc_collect() -> dict[str, Any]:
    """This process's records and who it is (asked by the driver's :func:`gather`)."""
    rt = context.installed()  # the runtime, without importing it (it imports this module)
    _record_gpu_spans()  # what the GPU finished since the last span closed
    _settle()
    return {
        "name": getattr(rt, "name", "?"),
        "rank": getattr(rt, "rank", -1),
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "threads": dict(_threads),
        "events": events(),
        "dropped": _dropped[0],
        "on": ON,
        "now": clock(),
    }


def gather(processes: Iterable[str], own: str, timeout: float = 30.0) -> dict[str, Any]:
    """Collects every process's records into one Chrome trace (see :func:`to_chrome`).

    Args:
        processes: RPC names of the live processes to ask (``own`` is read directly).
        own: This process's RPC name.
        timeout: Seconds each process has to answer; one that does not is left out
            (named in the trace's ``otherData``).

    Returns:
        The trace, a JSON-ready dict with ``traceEvents``.
    """
    import torch.distributed.rpc as rpc

    parts = [rpc_collect()]
    parts[0]["offset"] = 0
    missing: list[str] = []
    for name in processes:
        if name == own:
            continue
        asked = clock()
        try:
            part = rpc.rpc_sync(name, rpc_collect, timeout=timeout)
        except Exception as exc:  # gone or stuck: the rest of the trace is still worth it
            missing.append(f"{name}: {type(exc).__name__}: {exc}")
            continue
        back = clock()
        # Its clock minus ours, from the moment it answered (about mid-way). Applied only
        # when larger than the round trip: on one host the clocks are the same and the
        # estimate would only add its error.
        offset = part["now"] - (asked + back) // 2
        part["offset"] = offset if abs(offset) > back - asked else 0
        parts.append(part)
    return to_chrome(parts, missing)


def to_chrome(parts: list[dict[str, Any]], missing: Iterable[str] = ()) -> dict[str, Any]:
    """Turns per-process records into a Chrome trace (Perfetto reads the same JSON).

    Processes are rows (sorted by rank), their threads the tracks; round trips and
    mailbox waits, which overlap, are async slices; runs, replies and spans are complete
    slices on the thread (or named track) that did them. Times are microseconds from
    the first record (``otherData.start_unix_ns``).
    """
    out: list[dict[str, Any]] = []
    dropped = 0
    # Times from the first record on: microseconds since 1970 as floats would keep only a
    # quarter of a microsecond, enough to put a run's start before its wait's end.
    starts = [e[2] - int(p.get("offset", 0)) for p in parts for e in p["events"]]
    base = min(starts, default=0)
    for part in parts:
        pid, offset = int(part["pid"]), int(part.get("offset", 0))
        dropped += int(part.get("dropped", 0))
        label = f"{part['name']} (rank {part['rank']}, {part['host']}, pid {pid})"
        meta = {"ph": "M", "pid": pid, "tid": 0}
        out.append({**meta, "name": "process_name", "args": {"name": label}})
        out.append({**meta, "name": "process_sort_index", "args": {"sort_index": part["rank"]}})
        for tid, tname in part["threads"].items():
            out.append({**meta, "name": "thread_name", "tid": int(tid), "args": {"name": tname}})
        for kind, name, begin, end, tid, key, detail in part["events"]:
            ts = (begin - offset - base) / 1000.0  # microseconds, the format's unit
            ts_end = (max(begin, end) - offset - base) / 1000.0
            args = {"call": key, **detail} if key else dict(detail)
            where = {"cat": kind, "pid": pid, "tid": tid}
            if kind == _SPAN:
                out.append(
                    {**where, "name": name, "ph": "X", "ts": ts, "dur": ts_end - ts, "args": args}
                )
            elif kind in (_CALL, _WAIT, _FETCH):
                title = f"wait {name}" if kind == _WAIT else name
                common = {**where, "name": title, "id": key}
                out.append({**common, "ph": "b", "ts": ts, "args": args})
                out.append({**common, "ph": "e", "ts": ts_end})
            else:
                label = name if kind == _RUN else f"{kind} {name}"  # reply, value
                out.append(
                    {**where, "name": label, "ph": "X", "ts": ts, "dur": ts_end - ts, "args": args}
                )
    return {
        "traceEvents": out,
        "displayTimeUnit": "ms",
        "otherData": {
            "dropped_events": dropped,
            "missing_processes": list(missing),
            # when ts 0 is, for lining the trace up with other records
            "start_unix_ns": base,
        },
    }


def write(trace: dict[str, Any], path: str | os.PathLike[str]) -> None:
    """Writes a trace from :func:`gather` as JSON to ``path``."""
    with open(path, "w", encoding="utf-8") as f:
        json.dump(trace, f)
