"""The RPC group: starting this process's TensorPipe agent, members that join and leave.

Every actorrt process runs its agent as a member of a *dynamic* torch RPC group
(``world_size=None``), built here rather than through ``init_rpc``:

* ``init_rpc``'s static group gathers every rank at rank 0 at once (``_all_gather``), and
  from 65 processes on one host those connections overflow the listen queue of
  TensorPipe's shared-memory transport (``connect: Resource temporarily unavailable``);
  it also builds a Gloo group, one connection per pair. Here an agent is constructed
  under torch's membership token, every process waits at one store counter, and then
  learns the others from the plan: no message is sent at start-up, and a pair connects
  when it first talks.
* A static group cannot take a new member, so a dead worker could never be replaced.
  Here a process that comes back joins the running group under the name of the one it
  replaces and a fresh RPC id (TensorPipe keeps a broken pipe per id), and rank 0 tells
  every member (:func:`rpc_add_member`).

Device maps are fixed at construction, as before: every process computes its reverse
maps and devices from the plan, which holds every process's maps (torch's own helpers).

The store layout used below (``names/_ALL_WORKER_INFOS``, a ``name-id,`` list) is
torch's for dynamic groups (``agent_utils.cpp``, checked on torch 2.13); only
:func:`evict` writes it.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, cast

import torch
import torch.distributed as dist
import torch.distributed.rpc as rpc

from actorrt.runtime import quick_rpc, rref_keeper, streams, torch_threads

__all__ = [
    "Member",
    "add_members",
    "announce_end",
    "announce_let_go",
    "await_end",
    "deepen_listen_queues",
    "end_local",
    "evict",
    "free_token_of_dead_joiner",
    "lets_go",
    "quiesce",
    "keep_rref",
    "keeping_rrefs",
    "rrefs_kept_here",
    "rrefs_will_work",
    "rrefs_work",
    "rpc_add_member",
    "rpc_admit",
    "rpc_id_of",
    "set_admitter",
    "start_agent",
    "wait_quiesced",
    "wait_for_world",
]

#: The prefix of torch's RPC keys in the cluster's store.
STORE_PREFIX = "rpc"
_WORLD_COUNTER = "actorrt/members"
_WORLD_FORMED = "actorrt/world-formed"
_STARTED = "actorrt/started/"  # + a member's name: its agent runs (named if the world fails)
_WORLD_READY_COUNT = "actorrt/members-ready"
_WORLD_READY = "actorrt/world-ready"  # every worker knows every member and reached rank 0
_QUIESCED = "actorrt/quiesced"  # processes that quiesced their agent at shutdown
_END = "actorrt/end"  # set by rank 0 once they have: every agent may end
_LET_GO = "actorrt/let-go"  # rank 0's word at shutdown: "1" every process lets go of RRefs
_ALL_WORKERS = "names/_ALL_WORKER_INFOS"  # torch's list of current members
_NO_ID = -1  # an RPC id no process has (ranks and replacements' ids are never negative)
_TOKEN = "RpcGroupManagementToken"  # torch's membership token (_group_membership_management)

Member = tuple[str, int]  # (RPC name, RPC id)

_lock = threading.Lock()
_devices: list[torch.device] = []  # this agent's devices, fixed at construction
_reverse_maps: dict[str, dict[torch.device, torch.device]] = {}
_on_member: Callable[[str], None] | None = None
_admitter: Callable[[str, int], None] | None = None  # rank 0's (set_admitter)
_store: dist.Store | None = None  # the cluster's store
_agents_started = 0  # agents this process started, for rrefs_work()


def rrefs_will_work() -> bool:
    """Before this process starts an agent: whether its RRefs will work (the first agent)."""
    with _lock:
        return _agents_started == 0


_keeping = threading.local()  # .on: packing for a peer that cannot hold RRefs
_kept: dict[str, Any] = {}  # actor id -> an RRef kept here for such a peer


@contextlib.contextmanager
def rrefs_kept_here() -> Iterator[None]:
    """While packing a value for a peer whose RRefs do not work (a second cluster's driver).

    An actor handle pickled meanwhile leaves its RRef here (:func:`keep_rref`) and travels
    without it: the peer could not receive it, and this process holding it keeps the
    actor alive for the peer until the cluster ends.
    """
    _keeping.on = True
    try:
        yield
    finally:
        _keeping.on = False


def keeping_rrefs() -> bool:
    """True inside :func:`rrefs_kept_here` on this thread."""
    return bool(getattr(_keeping, "on", False))


def keep_rref(key: str, rref: Any) -> None:
    """Keeps ``rref`` (one per ``key``) until this process ends its agent."""
    with _lock:
        _kept.setdefault(key, rref)


def rrefs_work() -> bool:
    """Whether this process's RRefs can reach its current agent.

    torch builds its RRef context once per process, bound to the first agent started
    (docs/architecture.md, "One cluster per process"). From a process's second agent on
    (a driver that called ``start()`` after ``shutdown()``), every RRef message it sends
    goes to the stopped first agent and is lost: the owners keep forks they then report
    as leaks when they end, and the graceful end waits for acknowledgements that never
    come. Such a process must hold no RRef of the new cluster's values.
    """
    with _lock:
        return _agents_started <= 1


def rpc_store(store: dist.Store) -> dist.Store:
    """The view of the cluster's store that torch's agent keeps its keys in."""
    return dist.PrefixStore(STORE_PREFIX, store)


def start_agent(
    name: str,
    rpc_id: int,
    store: dist.Store,
    backend_kwargs: Mapping[str, Any],
    peer_maps: Mapping[str, Mapping[str, Mapping[str, str]]],
    *,
    num_worker_threads: int,
    rpc_timeout: float,
    on_member: Callable[[str], None] | None = None,
    admit_by: str | None = None,
) -> None:
    """Starts this process's agent as a member of the cluster's dynamic RPC group.

    Args:
        name: This process's RPC name.
        rpc_id: Its RPC id: its rank, or a fresh id for a process that replaces one.
        store: The cluster's store.
        backend_kwargs: Its ``TensorPipeRpcBackendOptions`` arguments (from the plan).
        peer_maps: Every process's device maps by name (the plan's, ``{peer: {"cuda:a":
            "cuda:b"}}``), to compute the maps of replies coming back here.
        num_worker_threads: TensorPipe's RPC thread pool size.
        rpc_timeout: Default timeout of control messages.
        on_member: Called with a name when rank 0 says a process (re)joined.
        admit_by: For a process joining a running group: the name of rank 0, which
            tells every member about it (:func:`rpc_admit`) before the token is released,
            so no other joiner can miss it.
    """
    from torch._C._distributed_rpc import TensorPipeAgent
    from torch.distributed.rpc import api
    from torch.distributed.rpc._utils import _group_membership_management
    from torch.distributed.rpc.backend_registry import _create_device_list

    global _devices, _reverse_maps, _on_member, _store, _agents_started
    options = rpc.TensorPipeRpcBackendOptions(
        num_worker_threads=num_worker_threads, rpc_timeout=rpc_timeout, **backend_kwargs
    )
    reverse = {
        peer: {torch.device(dst): torch.device(src) for src, dst in m.items()}
        for peer, maps in peer_maps.items()
        if peer != name and (m := maps.get(name))
    }
    devices = _create_device_list(list(options.devices), options.device_maps, reverse)
    if devices and torch.cuda.is_available():
        torch.cuda.init()  # type: ignore[no-untyped-call]  # before CUDA tensors come in
    streams.enable(devices if torch.cuda.is_available() else [])
    with _lock:
        _devices, _reverse_maps, _on_member, _store = devices, reverse, on_member, store
        _agents_started += 1
    import torch.distributed.autograd as dist_autograd

    dist_autograd._init(rpc_id)  # type: ignore[attr-defined]  # as init_rpc does
    prefixed = rpc_store(store)
    prefixed.set_timeout(_timedelta(rpc_timeout))
    with _group_membership_management(prefixed, name, True):
        agent = TensorPipeAgent(prefixed, name, rpc_id, None, options, reverse, devices)
        api._init_rpc_states(agent)
        deepen_listen_queues()  # before any peer knows this agent's address
        if admit_by is not None:
            rpc.rpc_sync(admit_by, rpc_admit, args=(name, rpc_id), timeout=rpc_timeout)


#: The listen queue asked for TensorPipe's listening sockets (the kernel caps it at
#: ``net.core.somaxconn``).
LISTEN_BACKLOG = 4096


def deepen_listen_queues(backlog: int = LISTEN_BACKLOG) -> int:
    """Deepens the listen queue of this process's listening sockets; how many it changed.

    TensorPipe listens with a short queue, and a burst of peers connecting at once (64
    or more processes on one host answering rank 0 together) overflows the queue of its
    shared-memory transport's Unix socket: those connects fail with EAGAIN ("Resource
    temporarily unavailable") and their calls with them. ``listen`` again on a listening
    socket only sets its queue length (Linux), so the sockets stay TensorPipe's.
    """
    import os
    import socket
    import stat

    changed = 0
    for entry in os.listdir("/proc/self/fd") if os.path.isdir("/proc/self/fd") else ():
        try:
            fd = int(entry)
            if not stat.S_ISSOCK(os.fstat(fd).st_mode):
                continue
            sock = socket.socket(fileno=os.dup(fd))
        except (OSError, ValueError):
            continue
        try:
            if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
                sock.listen(backlog)
                changed += 1
        except OSError:
            pass
        finally:
            sock.close()  # the duplicate only
    return changed


def wait_for_world(
    store: dist.Store,
    members: Iterable[Member],
    timeout: float,
    rank0: str | None = None,
    own: str | None = None,
) -> None:
    """Waits until every process of the starting cluster runs its agent; then knows them all.

    Args:
        store: The cluster's store.
        members: Every process of the plan, (name, rank).
        timeout: Bound on the wait.
        rank0: On a worker, rank 0's name: the worker connects to it now. TensorPipe
            stops accepting connections for good when one fails mid-way (an agent whose
            accept fails is not re-armed), so a worker killed while it first connects
            to rank 0 would leave rank 0 unreachable to every worker that had not yet;
            connecting all at start keeps that window to start-up.
        own: This process's name, marked as started (a timeout names those not marked).

    Raises:
        TimeoutError: Not every process started its agent within ``timeout``; it names
            those that did not.
    """
    members = list(members)
    if own is not None:
        store.set(_STARTED + own, "1")
    if store.add(_WORLD_COUNTER, 1) >= len(members):
        store.set(_WORLD_FORMED, "1")
    store.set_timeout(_timedelta(timeout))
    try:
        store.wait([_WORLD_FORMED])
    except Exception as exc:  # torch raises a bare RuntimeError (DistStoreError) on timeout
        raise TimeoutError(
            f"not every process started RPC within {timeout:g} s{_not_started(store, members)}"
        ) from exc
    add_members(members)
    # Rank 0 returns (and the user's program goes on) only once every process knows every
    # other: a message naming a member (an RRef's owner) must not reach one that does not.
    workers = len(members) - 1
    if rank0 is not None:
        rpc.rpc_sync(rank0, _hello, timeout=timeout)
        if store.add(_WORLD_READY_COUNT, 1) >= workers:
            store.set(_WORLD_READY, "1")
    elif workers > 0:
        try:
            store.wait([_WORLD_READY])
        except Exception as exc:
            raise TimeoutError(
                f"not every process learned the group within {timeout:g} s ({exc})"
            ) from exc


def _not_started(store: dist.Store, members: list[Member]) -> str:
    """Names the members whose agents never started (they left after the plan was made)."""
    try:
        missing = [
            f"{name} (rank {rank})" for name, rank in members if not store.check([_STARTED + name])
        ]
    except Exception:  # the store itself is gone: nothing more to say
        return ""
    if not missing:
        return ""
    return (
        f": {', '.join(missing)} never did (it left, or was killed, after the plan was "
        "made); start the cluster again"
    )


def _hello() -> None:
    """A worker's first message to rank 0 (see :func:`wait_for_world`)."""


def add_members(members: Iterable[Member]) -> None:
    """Makes ``members`` known to this agent (a name known under another id is replaced)."""
    agent = _agent()
    known = {w.name: w.id for w in agent.get_worker_infos()}
    with _lock:
        devices, reverse = list(_devices), dict(_reverse_maps)
    for name, rpc_id in members:
        old = known.get(name)
        if old == rpc_id:
            continue
        if old is not None:  # a process that died, replaced under its name
            # Its name leaves, its id's entry stays: a message torch retries to the dead
            # process (an RRef delete, for about 13 s) holds a reference to that entry
            # (RpcRetryInfo::to_), and a retry after the entry was freed read freed
            # memory (a SIGSEGV in torch's retry thread). The leave erases the entry of
            # the id it is given, and no process has id -1. One entry per replacement.
            leave = rpc.WorkerInfo(name, _NO_ID)
            agent._update_group_membership(leave, devices, reverse, False)
        # Passing this agent's own devices and maps adds nothing to them: they were fixed,
        # for every process of the plan, at construction.
        agent._update_group_membership(rpc.WorkerInfo(name, rpc_id), devices, reverse, True)
        quick_rpc.forget(name)  # after the join: a send racing it may have kept the old id


def rpc_id_of(name: str) -> int | None:
    """The RPC id this agent knows under ``name`` now; None if it knows no such name."""
    try:
        return int(_agent().get_worker_info(name).id)
    except Exception:  # no such member (or no agent: RPC is down)
        return None


def rpc_add_member(name: str, rpc_id: int, replaces: bool = True) -> None:
    """Sent by rank 0 to every member when a process joins the running group.

    Args:
        name: Its name.
        rpc_id: Its RPC id.
        replaces: It replaces a dead process of that name (``on_member`` hears of it);
            False: it is a new one, growing the cluster.
    """
    add_members([(name, rpc_id)])
    with _lock:
        on_member = _on_member
    if on_member is not None and replaces:
        on_member(name)


def set_admitter(admit: Callable[[str, int], None] | None) -> None:
    """Rank 0: what admits a process joining the running group (:func:`rpc_admit`)."""
    global _admitter
    with _lock:
        _admitter = admit


def rpc_admit(name: str, rpc_id: int) -> None:
    """Sent to rank 0 by a process joining the running group, holding the membership token."""
    with _lock:
        admit = _admitter
    if admit is None:
        raise RuntimeError(f"{name} asked to join, but this process admits no members")
    admit(name, rpc_id)


def free_token_of_dead_joiner(store: dist.Store, gone: Callable[[str], bool]) -> str | None:
    """Releases torch's membership token held by a joining process that died holding it.

    A process joins inside torch's ``_group_membership_management``, which holds the
    token in the store until it leaves that section; one killed inside it never gives it
    back, and every later join or :func:`evict` waits for it for ever.

    Args:
        store: The cluster's store.
        gone: Whether the process joining under a name has died.

    Returns:
        The name the dead process was joining as, or None (the token is free, or held by
        a live process, or by something else than a join).
    """
    prefixed = rpc_store(store)
    if not prefixed.check([_TOKEN]):
        return None
    held = prefixed.get(_TOKEN).decode()
    prefix, suffix = "Token_for_", "_join"
    if not (held.startswith(prefix) and held.endswith(suffix)):
        return None
    joiner = held[len(prefix) : -len(suffix)]
    if not joiner or not gone(joiner):
        return None
    if prefixed.compare_set(_TOKEN, held, "").decode() != "":
        return None  # released or taken meanwhile
    prefixed.set(held, "Done")  # as torch's own release does: waiters look for this key
    return joiner


def evict(store: dist.Store, name: str) -> int | None:
    """Takes a dead ``name`` out of torch's member list, so a process may join under it.

    Returns:
        The RPC id it had, or None if it was not listed.
    """
    from torch.distributed.rpc._utils import _group_membership_management

    prefixed = rpc_store(store)
    with _group_membership_management(prefixed, f"evict-{name}", True):
        listed = prefixed.get(_ALL_WORKERS).decode()
        kept, evicted = [], None
        for entry in filter(None, listed.split(",")):
            entry_name, _, entry_id = entry.rpartition("-")
            if entry_name == name:
                evicted = int(entry_id)
            else:
                kept.append(entry)
        prefixed.set(_ALL_WORKERS, "".join(f"{e}," for e in kept))
    return evicted


def quiesce(timeout: float, let_go: bool = True, join: bool = True) -> bool:
    """Tells this agent that the group is ending, so peers closing is no warning.

    It waits for this process's outgoing calls to be answered, at most ``timeout``, and
    first lets go of the RRefs it holds of other processes' values (actor leases), while
    every owner still runs, as a graceful ``rpc.shutdown`` does; ``let_go=False`` skips
    that (torch then notes the RRefs as leaked at its end). ``join=False`` skips the
    wait: a peer that is dead or hung never answers, and torch's join would wait for it
    past the bound, in a thread still inside torch when the process exits (which may
    abort it: see :mod:`actorrt.runtime.torch_threads`).

    Returns:
        True if it finished in time.
    """
    from torch.distributed.rpc import api

    agent = _agent()

    def leave() -> None:
        # The RRefs this process holds of others' values (actor leases) are let go now,
        # while every owner still runs, as a graceful rpc.shutdown would.
        # (It waits while this process serves any call: quiesce from a thread of its own.)
        # Not once a process died: torch would try to reach it, and print its failure.
        if let_go:
            rref_keeper.release_all()
            api._delete_all_user_and_unforked_owner_rrefs()  # type: ignore[attr-defined]
        if join:
            agent.join(shutdown=True)

    done = _run_bounded(leave, timeout, "actorrt-rpc-leave")
    with _lock:
        store = _store
    if store is not None:
        try:
            store.add(_QUIESCED, 1)
        except Exception:  # the store is gone: rank 0 is, too
            pass
    return done


def announce_let_go(let_go: bool) -> None:
    """Rank 0, before it stops the workers: whether every process lets go of its RRefs.

    One word for all: an owner waits for the holders of its RRefs to let go of them, so
    one process that does not (one that knows a peer died) would keep every other waiting
    until its bound. A process that joined later cannot know what happened before it.
    """
    with _lock:
        store = _store
    if store is not None:
        store.set(_LET_GO, "1" if let_go else "0")


def lets_go(default: bool) -> bool:
    """A worker at shutdown: rank 0's word on letting go (``default`` if it said none)."""
    with _lock:
        store = _store
    try:
        if store is not None and store.check([_LET_GO]):
            return bool(store.get(_LET_GO) == b"1")
    except Exception:  # the store is gone: rank 0 is, too
        pass
    return default


def announce_end() -> None:
    """Rank 0: every process may end its agent now (see :func:`await_end`)."""
    with _lock:
        store = _store
    if store is not None:
        store.set(_END, "1")


def await_end(timeout: float) -> bool:
    """A worker, quiesced: waits for rank 0's word to end (through the store, not RPC).

    Not an RPC: ending right after answering one would close the pipe under its answer.

    Returns:
        True if the word came within ``timeout``.
    """
    with _lock:
        store = _store
    if store is None:
        return False
    try:
        store.wait([_END], _timedelta(timeout))
        return True
    except Exception:  # timed out, or the store is gone
        return False


def wait_quiesced(count: int, timeout: float) -> int:
    """Rank 0: waits until ``count`` processes quiesced (at most ``timeout``); how many did."""
    with _lock:
        store = _store
    deadline = time.monotonic() + timeout
    done = 0
    while store is not None:
        done = int(store.add(_QUIESCED, 0))
        if done >= count or time.monotonic() >= deadline:
            break
        time.sleep(0.01)
    return done


def end_local(timeout: float) -> bool:
    """Ends this process's agent without waiting for any peer (bounded)."""
    done = _run_bounded(lambda: rpc.shutdown(graceful=False), timeout, "actorrt-rpc-shutdown")
    # After the agent: the RRefs of its cluster go without a message (torch's context
    # knows it ended), and none is held into a next cluster of this process.
    rref_keeper.release_all()
    return done


def _agent() -> Any:
    from torch.distributed.rpc import api

    return cast(Any, api._get_current_rpc_agent())  # type: ignore[attr-defined]


def _timedelta(seconds: float) -> Any:
    import datetime

    return datetime.timedelta(seconds=seconds)


def _run_bounded(fn: Callable[[], None], timeout: float, name: str) -> bool:
    outcome: list[bool] = []

    def target() -> None:
        try:
            fn()
            outcome.append(True)
        except Exception:
            outcome.append(False)

    # Past its bound it goes on in torch's C++: the process's exit waits for it.
    thread = torch_threads.start(target, name=name)
    thread.join(max(0.05, timeout))
    return bool(outcome and outcome[0])
