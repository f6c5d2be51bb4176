"""``rpc_async`` for actorrt's own entry points, with less of torch's Python around it.

Every call sent alone is one ``rpc_async``, and a sync caller waits for it. torch's
public ``rpc_async`` runs Python before its C++ send: it looks the function up as a
builtin and the destination by name, sets up the RPC profiler's context, and pickles the
request through ``_InternalRPCPickler.serialize``, which makes a ``BytesIO`` and edits
its dispatch table and a thread-local tensor table on every call; the pickler then
imports the two names in the request (``PythonUDF`` and the function) again to check
them. On the 2-core VM of docs/performance.md that was 10-18 us of a 35-65 us send.

:func:`rpc_async` sends the same request (a pickled ``PythonUDF`` and its tensor
table, which the callee unpickles with torch's own unpickler, as any other) straight to
torch's C++ send. When the arguments hold no tensor and no RRef, the request is the two
names, pickled once per function, then the arguments, pickled by a C pickler with
torch's dispatch table. Arguments that hold tensors, RRefs or objects of a class with a
reducer registered with torch, and any request while an RPC profiler runs, take torch's
own path, as does everything when this torch lacks the names used here (they are
private, so the import is guarded and the tests check that they are there).
"""

from __future__ import annotations

import io
import pickle
import sys
import threading
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed.rpc as rpc

from actorrt.runtime import rref_keeper, streams

__all__ = ["forget", "rpc_async", "quick"]

try:
    from torch._C._autograd import _profiler_enabled
    from torch._C._distributed_rpc import _get_current_rpc_agent, _invoke_rpc_python_udf
    from torch.distributed.rpc.internal import PythonUDF, _internal_rpc_pickler

    _QUICK = True
except ImportError:  # another torch: every request takes the public road
    _QUICK = False


class _HasTensors(Exception):
    """Raised while pickling a request that holds a tensor or an RRef."""


def _refuse(_obj: object) -> Any:
    raise _HasTensors


def _dispatch_table() -> dict[type, Callable[[Any], Any]]:
    # torch's own table (copyreg's at torch's import, tensors set aside), with every
    # entry that needs torch's tables (tensors, RRefs) or that torch's pickler adds
    # (reducers registered with it: importing torch.distributed.nn registers two)
    # refusing, so that the request pickles here exactly as torch would pickle it, or
    # not at all. A carried RRef too: its reduction registers a fork with torch, and a
    # fork made here for a request that then falls back to torch's road (a tensor after
    # it) would be a second one, never delivered, that keeps the RRef's owner holding it
    # (an actor whose handle went with a small tensor was never freed).
    table = dict(_internal_rpc_pickler._dispatch_table)
    refused = (torch.Tensor, rpc.PyRRef, rpc.RRef, rref_keeper.Carried)
    for kind in (*refused, *_internal_rpc_pickler._class_reducer_dict):
        table[kind] = _refuse
    return table


# (how many reducers torch had registered, the table made then); one tuple, so that a
# thread never reads a count with another count's table. Reducers are only ever added.
_tables: tuple[int, dict[type, Callable[[Any], Any]]] = (-1, {})


def _table() -> dict[type, Callable[[Any], Any]]:
    """The dispatch table for the reducers torch has now."""
    global _tables
    count, table = _tables
    if count != len(_internal_rpc_pickler._class_reducer_dict):
        count = len(_internal_rpc_pickler._class_reducer_dict)
        table = _dispatch_table()
        _tables = count, table
    return table


class _Pickler(pickle.Pickler):
    """A C pickler with ``table`` (from :func:`_table`) as its dispatch table."""

    def __init__(self, file: io.BytesIO, table: dict[type, Callable[[Any], Any]]) -> None:
        self.dispatch_table = table  # read once, by the C pickler's __init__
        super().__init__(file, _PROTOCOL)


# The request is PythonUDF(fn, args, {}): PROTO, two GLOBALs, the arguments, an empty
# dict, TUPLE3, NEWOBJ (as pickle writes a namedtuple), STOP. Protocol 3 is the lowest
# with opcodes for bytes (a packed value's blob) and, unlike 4, has no frames and no
# implicit memo numbering, so the arguments' own pickle can be spliced in after the
# names: the names are written without memo entries, so the arguments' entries, numbered
# from 0, refer only to what they wrote.
_PROTOCOL = 3
_SUFFIX = pickle.EMPTY_DICT + pickle.TUPLE3 + pickle.NEWOBJ + pickle.STOP
_prefixes: dict[Callable[..., Any], bytes | None] = {}


def _global(obj: Any) -> bytes | None:
    """The GLOBAL opcode naming ``obj``; None unless a module-level name finds it."""
    module, name = getattr(obj, "__module__", None), getattr(obj, "__qualname__", "")
    if not module or not name.isidentifier() or "\n" in module:
        return None
    if getattr(sys.modules.get(module), name, None) is not obj:
        return None  # pickle refuses such a name too; torch's path will say why
    return pickle.GLOBAL + f"{module}\n{name}\n".encode()


def _prefix(fn: Callable[..., Any]) -> bytes | None:
    try:
        return _prefixes[fn]
    except KeyError:
        pass
    udf, named = _global(PythonUDF), _global(fn)
    prefix = None
    if udf is not None and named is not None:
        prefix = pickle.PROTO + bytes([_PROTOCOL]) + udf + named
    _prefixes[fn] = prefix
    return prefix


# Per thread: a pickler and its buffer, kept between requests (making them was a third of
# a small request's pickling).
_local = threading.local()

# worker name -> (the agent it was looked up on, its WorkerInfo)
_infos: dict[str, tuple[object, Any]] = {}


def quick() -> bool:
    """Whether requests skip torch's Python (False when this torch lacks what it needs)."""
    return _QUICK


def _worker_info(worker: str) -> Any:
    agent = _get_current_rpc_agent()  # raises when RPC is not running
    known = _infos.get(worker)
    if known is not None and known[0] is agent:
        return known[1]
    info = agent.get_worker_info(worker)  # raises for a name the group lacks
    _infos[worker] = (agent, info)
    return info


def forget(worker: str) -> None:
    """Drops what is known of ``worker``: it joined again, under another RPC id."""
    _infos.pop(worker, None)


def _pickled(fn: Callable[..., Any], args: tuple[Any, ...]) -> bytes | None:
    """The request ``PythonUDF(fn, args, {})`` pickled; None: torch's pickler must do it.

    None when the arguments hold tensors, RRefs or objects of a class with a reducer
    registered with torch (torch sets those aside or reduces them itself), or when
    anything else stops pickling here (torch's pickler then raises what it raises).
    """
    prefix = _prefixes.get(fn) or _prefix(fn)
    if prefix is None:
        return None
    count, table = _tables  # _table()'s check, without its call
    if count != len(_internal_rpc_pickler._class_reducer_dict):
        table = _table()
    # The thread's pickler, taken while in use (a reducer that sends makes its own).
    pair = getattr(_local, "pickler", None)
    _local.pickler = None
    if pair is None or pair[1].dispatch_table is not table:
        buffer = io.BytesIO()
        pair = buffer, _Pickler(buffer, table)
    buffer, pickler = pair
    try:
        pickler.dump(args)
    except Exception:
        return None
    else:
        body = buffer.getbuffer()  # PROTO 3, the arguments, STOP
        try:
            return b"".join((prefix, body[2:-1], _SUFFIX))
        finally:
            body.release()
    finally:
        pickler.clear_memo()
        buffer.seek(0)
        buffer.truncate()  # gives a large request's memory back, too
        _local.pickler = pair


def rpc_async(
    worker: str, fn: Callable[..., Any], args: tuple[Any, ...]
) -> torch.futures.Future[Any]:
    """``rpc.rpc_async(worker, fn, args=args, timeout=0)``, with less Python on the way.

    Args:
        worker: The destination's RPC name.
        fn: A module-level Python function (decorated with ``async_execution`` or not).
        args: Its positional arguments.

    Returns:
        The future of ``fn``'s result, as ``rpc.rpc_async`` returns it, whose CUDA
        tensors are ordered for the default streams before any other callback runs
        (:func:`actorrt.runtime.streams.arrived`).

    Raises:
        RuntimeError: RPC is not running here, or ``worker`` is not in the group.
        Exception: What torch's pickler raised for an argument it cannot pickle.
    """
    if not _QUICK or _profiler_enabled():
        public: torch.futures.Future[Any] = rpc.rpc_async(worker, fn, args=args, timeout=0)
        streams.on_arrival(public)
        return public
    known = _infos.get(worker)  # _worker_info()'s common case, without its call
    if known is not None and known[0] is _get_current_rpc_agent():
        info = known[1]
    else:
        info = _worker_info(worker)
    blob = _pickled(fn, args)
    tensors: list[torch.Tensor] = []
    if blob is None:
        blob, tensors = _internal_rpc_pickler.serialize(PythonUDF(fn, args, {}))
    is_async = hasattr(fn, "_wrapped_async_rpc_function")
    # Timeout 0: none (actor methods may run for long; get(timeout=) bounds the waits).
    # pybind takes the bytes as its std::string, as torch's own rpc_async passes them
    future: torch.futures.Future[Any] = _invoke_rpc_python_udf(
        info,
        blob,  # type: ignore[arg-type]
        tensors,
        0,
        is_async,
    )
    streams.on_arrival(future)
    return future
