"""The cluster directory, kept by rank 0: where each actor lives, actor names, introspection.

It holds the cluster's plan and places nothing by itself: an actor whose label is in the
layout goes into one of that label's slots (the plan chose their processes and GPUs);
any other actor is placed by the plan's own :class:`~actorrt.placement.Placer`, with the
layout's slots already counted against GPU and CPU capacity. The RPC entry points other
processes use to reach it are at the bottom of this module.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from actorrt.errors import ActorRtError, PlacementError
from actorrt.options import ActorOptions
from actorrt.placement.functions import FunctionSpot, function_spots
from actorrt.placement.node import ProcessInfo
from actorrt.placement.plan import Plan
from actorrt.placement.resources import Resources
from actorrt.placement.scheduler import Placer, Slot
from actorrt.runtime import context
from actorrt.runtime.protocol import ActorRecord, travels

__all__ = [
    "ActorInfo",
    "ClusterDirectory",
    "NodeInfo",
    "Placement",
    "rpc_actors",
    "rpc_directory",
    "rpc_function_spots",
    "rpc_lookup",
    "rpc_nodes",
    "rpc_resources",
    "rpc_place",
    "rpc_register_name",
    "rpc_released",
    "rpc_where",
]


@dataclass(frozen=True)
class Placement:
    """Where an actor goes: the process and the local GPUs it may use."""

    worker: str
    gpu_ids: tuple[int, ...]


@dataclass(frozen=True)
class ActorInfo:
    """One actor, as ``actorrt.actors()`` reports it.

    Attributes:
        actor_id: The actor's id (as in its handle).
        class_name: Its class.
        name: Its registered name, or None.
        label: Its label, or None.
        process: RPC name of the process hosting it.
        rank: That process's rank.
        host: That process's host name.
        gpus: Local CUDA indices it was given (empty: none).
        slot: ``"label/index"`` of the layout slot it occupies, or None.
        state: ``ALIVE``; ``RESTARTING`` while an actor with ``max_restarts`` is recreated
            after its process died; ``DEAD`` once it ended for good (its process died, it
            was killed or exited, its constructor failed, no handle refers to it).
        restarts: How many times it was recreated.
        death_cause: Why it ended (``DEAD``), as Ray's ``ActorState.death_cause``; None
            while it lives.
    """

    actor_id: str
    class_name: str
    name: str | None
    label: str | None
    process: str
    rank: int
    host: str
    gpus: tuple[int, ...]
    slot: str | None
    state: str
    restarts: int = 0
    death_cause: str | None = None


@dataclass(frozen=True)
class NodeInfo:
    """One process of the cluster, as ``actorrt.nodes()`` reports it.

    Attributes:
        process: Its RPC name.
        rank: Its rank (0 is the driver).
        host: Its host name.
        labels: The labels the plan gave its slots; without a layout, the labels the
            process offers (``actorrt worker --labels``, a cluster file's ``labels``).
        gpus: Local CUDA indices the plan gave its slots.
        alive: False once it died.
        actors: Actors it hosts now.
        hosts_actors: False for the driver.
    """

    process: str
    rank: int
    host: str
    labels: tuple[str, ...]
    gpus: tuple[int, ...]
    alive: bool
    actors: int
    hosts_actors: bool


@dataclass
class _SlotUse:
    """A layout slot at run time: what its actors reserve out of what the slot holds."""

    index: int  # process index in the placer
    slot: Slot
    cpu_units: int = 0
    gpu_units: int = 0
    actors: int = 0

    def fits(self, res: Resources) -> bool:
        room = self.slot.resources
        return (
            self.cpu_units + res.cpu_units <= room.cpu_units
            and self.gpu_units + res.gpu_units <= room.gpu_units
        )


@dataclass
class _Record:
    info: ActorInfo
    index: int
    resources: Resources
    use: _SlotUse | None = None
    gpus: tuple[int, ...] = field(default_factory=tuple)
    restartable: bool = False  # max_restarts: rank 0's restarts decide when it is gone
    freed: bool = False  # what it took was given back (once: a second time skews the load)
    ended: bool = False  # DEAD for good: only its row is kept (see MAX_ENDED_ROWS)


#: How long a placement that only a suspect process could take waits for its probe.
SUSPECT_WAIT_S = 5.0

#: How long a ``get_if_exists`` creator that finds no room waits for another creator of
#: the same name, placed and not yet registered, to register it (or give up).
NAME_WAIT_S = 5.0

#: Rows of ended actors ``actors()`` keeps (the oldest go first), as Ray's GCS keeps a
#: bounded number of destroyed actors: a program that makes actors without end would
#: otherwise grow rank 0's table without end.
MAX_ENDED_ROWS = 10_000


class ClusterDirectory:
    """Places actors into the plan, keeps actor names and the actor table. Rank 0 only.

    Args:
        plan: The cluster's plan.
        processes: The processes it was planned from (``ClusterSpec.processes``).
    """

    def __init__(self, plan: Plan, processes: Sequence[ProcessInfo]) -> None:
        self._lock = threading.Lock()
        self._plan = plan
        self._layout = plan.layout
        self._placer = Placer(processes)
        self._slots: dict[str, list[_SlotUse]] = {s.label: [] for s in plan.specs}
        for pp in plan.processes:
            i = self._placer.index_of(pp.rank)
            for slot in pp.slots:
                self._placer.take(i, slot.resources, self._placer.gpus_of(i, slot.gpus))
                self._slots[slot.label].append(_SlotUse(i, slot))
        for uses in self._slots.values():
            uses.sort(key=lambda u: u.slot.index)
        self._records: dict[str, _Record] = {}
        self._ended: dict[str, None] = {}  # ids of the ended rows, oldest first
        self._names: dict[str, tuple[ActorRecord, str | None]] = {}  # name -> (actor, class)
        # Processes a call could not reach, being probed (placer indices): no actor goes
        # there until the probe clears them (or finds them dead).
        self._suspects: set[int] = set()
        self._settled = threading.Condition(self._lock)
        # Names a get_if_exists creator was placed for and has not registered yet -> its
        # actor id: a concurrent creator finding no room waits for it (see place).
        self._creating: dict[str, str] = {}
        # Called with an actor's id, and how it ended, once it ended (the restarts forget
        # its recipe).
        self.on_release: Callable[[str, str], None] | None = None
        # Set by a local cluster's driver: waits (bounded) for a dead worker's replacement
        # to join; False when none is coming.
        self.await_capacity: Callable[[], bool] | None = None

    @property
    def plan(self) -> Plan:
        """The plan whose slots this directory fills."""
        return self._plan

    def place(self, actor_id: str, options: ActorOptions, class_name: str) -> Placement:
        """Chooses the actor's process: a slot of its label, else the placer's pick.

        A suspect process (see :meth:`suspect`) is passed over. When only suspects could
        host the actor, it waits (at most :data:`SUSPECT_WAIT_S`) for their probes. A
        ``get_if_exists`` creator that finds no room while another creator of its name
        holds a place not yet registered waits (at most :data:`NAME_WAIT_S`) for that
        one to register (the caller then finds it) or give up (its room is free again).
        """
        name = options.name if options.get_if_exists else None
        with self._lock:
            try:
                placement = self._place_among_trusted(actor_id, options, class_name)
            except PlacementError:
                if name is not None and name in self._creating:
                    self._settled.wait_for(lambda: name not in self._creating, NAME_WAIT_S)
                elif not self._suspects:
                    raise
                else:
                    self._settled.wait_for(lambda: not self._suspects, timeout=SUSPECT_WAIT_S)
                placement = self._place_among_trusted(actor_id, options, class_name)
            if name is not None and name not in self._names:  # not a restart's: it is named
                self._creating.setdefault(name, actor_id)
            return placement

    def place_new(self, actor_id: str, options: ActorOptions, class_name: str) -> Placement:
        """:meth:`place` for a new actor, waiting for a replacement when none can host it.

        When no live process can host it while a dead local worker's replacement is
        coming, it is placed once more after that one joined (as Ray keeps a creation
        pending until there is room, here within the replacement's bound).
        """
        try:
            return self.place(actor_id, options, class_name)
        except PlacementError:
            if self.await_capacity is None or not self.await_capacity():
                raise
        return self.place(actor_id, options, class_name)

    def _place_among_trusted(
        self, actor_id: str, options: ActorOptions, class_name: str
    ) -> Placement:
        # Under the lock: suspects count as not alive for this one placement.
        alive = self._placer.alive
        hidden = [i for i in self._suspects if alive[i]]
        for i in hidden:
            alive[i] = False
        try:
            return self._place_locked(actor_id, options, class_name)
        finally:
            for i in hidden:
                alive[i] = True

    def suspect(self, worker: str) -> None:
        """A call could not reach ``worker``: no actor is placed there until it is judged."""
        with self._lock:
            self._suspects.update(i for i, p in enumerate(self._placer.procs) if p.name == worker)

    def clear_suspect(self, worker: str) -> None:
        """``worker`` was judged (it answered, or it was marked dead before this)."""
        with self._lock:
            self._suspects.difference_update(
                i for i, p in enumerate(self._placer.procs) if p.name == worker
            )
            self._settled.notify_all()

    def _place_locked(self, actor_id: str, options: ActorOptions, class_name: str) -> Placement:
        res = options.resources
        label = options.label
        if label is not None and self._layout.specs:
            use = self._slot_for(label, res, class_name)
            index, gpus = use.index, use.slot.gpus if res.num_gpus else ()
            use.cpu_units += res.cpu_units
            use.gpu_units += res.gpu_units
            use.actors += 1
            slot_name: str | None = f"{label}/{use.slot.index}"
            self._placer.load[index] += 1
        else:
            use, slot_name = None, None
            try:
                index, gpu_infos = self._placer.place(label, res, self._layout.strategy)
            except PlacementError as exc:
                raise PlacementError(f"{class_name}: {exc}") from None
            gpus = tuple(g.index for g in gpu_infos)
        proc = self._placer.procs[index]
        info = ActorInfo(
            actor_id=actor_id,
            class_name=class_name,
            name=options.name,
            label=label,
            process=proc.name,
            rank=proc.rank,
            host=proc.node.hostname,
            gpus=gpus,
            slot=slot_name,
            state="ALIVE",
        )
        restartable = options.max_restarts != 0
        self._records[actor_id] = _Record(info, index, res, use, gpus, restartable)
        return Placement(proc.name, gpus)

    def _slot_for(self, label: str, res: Resources, class_name: str) -> _SlotUse:
        spec = self._layout.spec(label)
        if spec is None:
            raise PlacementError(
                f"{class_name}: label {label!r} is not in the cluster's layout (labels offered: "
                f"{', '.join(self._layout.labels)}); add it to actorrt.start(labels=...), or "
                "use one of those labels"
            )
        uses = [u for u in self._slots[label] if self._placer.alive[u.index]]
        fitting = [u for u in uses if u.fits(res)]
        if fitting:
            return min(fitting, key=lambda u: (u.actors, u.slot.index))
        asked = f"num_cpus={res.num_cpus:g}, num_gpus={res.num_gpus:g}"
        if not res.fits_in(spec.resources):
            raise PlacementError(
                f"{class_name} asks {asked}, more than a {label!r} slot holds "
                f"(num_cpus={spec.num_cpus:g}, num_gpus={spec.num_gpus:g} in the layout); "
                f"raise them for {label!r} in actorrt.start(labels=...), or lower the actor's"
            )
        dead = len(self._slots[label]) - len(uses)
        gone = f" ({dead} on dead processes)" if dead else ""
        raise PlacementError(
            f"{class_name} asks {asked}; all {spec.count} slot(s) of label {label!r}{gone} are "
            f"taken by other actors; raise count for {label!r} in actorrt.start(labels=...), "
            "or kill an actor of that label"
        )

    def release(self, actor_id: str, why: str = "") -> None:
        """An actor ended: frees its slot share, resources and name.

        Args:
            actor_id: The actor.
            why: How it ended; its row stays, ``DEAD`` with that cause (unless it ended
                already: the first cause stays). Empty: it never came to be (its creation
                failed, or it lost a ``get_if_exists`` race), and its row goes.
        """
        with self._lock:
            for name in [n for n, a in self._creating.items() if a == actor_id]:
                del self._creating[name]  # its creation failed: a waiting creator goes on
                self._settled.notify_all()
            rec = self._records.get(actor_id)
            if rec is None:
                return
            self._free_name(actor_id)
            if not why:
                self._free(rec)
                del self._records[actor_id]
                self._ended.pop(actor_id, None)
            elif not rec.ended:
                self._end(actor_id, rec, why)
        if self.on_release is not None:
            self.on_release(actor_id, why)

    def _end(self, actor_id: str, rec: _Record, why: str) -> None:
        # Under the lock: DEAD for good, saying why (its first paragraph: a constructor's
        # failure without its traceback), and what it took given back (CPUs are counted
        # per host: a dead process's actor held them from the live ones there); the
        # oldest ended rows go past MAX_ENDED_ROWS.
        self._free(rec)
        rec.ended = True
        rec.info = replace(rec.info, state="DEAD", death_cause=why.split("\n\n", 1)[0])
        self._ended[actor_id] = None
        while len(self._ended) > MAX_ENDED_ROWS:
            oldest = next(iter(self._ended))
            del self._ended[oldest]
            self._records.pop(oldest, None)

    def death_cause(self, actor_id: str) -> str | None:
        """Why the actor ended, if it did and its row is still kept."""
        with self._lock:
            rec = self._records.get(actor_id)
            return rec.info.death_cause if rec is not None else None

    def replace(
        self, actor_id: str, options: ActorOptions, class_name: str, retry: bool = False
    ) -> Placement:
        """Places an actor again, after its process died (a restart); keeps its name.

        ``retry``: the same restart again (the process chosen before could not be
        reached), not counted as one more restart.

        Raises:
            KeyError: The actor ended (was killed or released): it is not restarted.
            PlacementError: No live process can host it now.
        """
        with self._lock:
            rec = self._records[actor_id]
            if rec.ended:
                raise KeyError(actor_id)
            del self._records[actor_id]
            self._free(rec)
        try:
            placement = self.place(actor_id, options, class_name)
        except BaseException:
            with self._lock:  # back as it was, dead, so actors() still shows it
                self._records[actor_id] = rec
            raise
        with self._lock:
            new = self._records[actor_id]
            new.info = replace(new.info, restarts=rec.info.restarts + (0 if retry else 1))
            for name, (record, path) in list(self._names.items()):
                if record.actor_id == actor_id:
                    self._names[name] = (record._replace(worker=placement.worker), path)
        return placement

    def count_restart(self, actor_id: str) -> None:
        """One more restart of an actor recreated where it was (``kill(no_restart=False)``)."""
        with self._lock:
            rec = self._records.get(actor_id)
            if rec is not None:
                rec.info = replace(rec.info, restarts=rec.info.restarts + 1)

    def set_state(self, actor_id: str, state: str, why: str = "") -> None:
        """Sets an actor's state as ``actors()`` reports it (``RESTARTING``, ``DEAD``).

        ``DEAD`` is for good (its restarts are used up, or it cannot be placed again;
        ``why`` says which): its name is freed, as in Ray, so a supervisor can create a
        replacement under it.
        """
        with self._lock:
            rec = self._records.get(actor_id)
            if rec is not None and not rec.ended:
                if state == "DEAD":
                    self._end(actor_id, rec, why or "it died")
                else:
                    rec.info = replace(rec.info, state=state)
            if state == "DEAD":
                self._free_name(actor_id)

    def _free_name(self, actor_id: str) -> None:
        # Under the lock. The DEAD row stays (actors() shows it, with its name); only
        # the name's entry goes, so get_actor() raises and a new actor may take it.
        for name, (record, _) in list(self._names.items()):
            if record.actor_id == actor_id:
                del self._names[name]

    def _free(self, rec: _Record) -> None:
        """Gives back what the actor took (slot share or the process's resources), once."""
        if rec.freed:
            return
        rec.freed = True
        if rec.use is not None:
            rec.use.cpu_units -= rec.resources.cpu_units
            rec.use.gpu_units -= rec.resources.gpu_units
            rec.use.actors -= 1
            self._placer.load[rec.index] = max(0, self._placer.load[rec.index] - 1)
        else:
            self._placer.give_back(rec.index, rec.resources, rec.gpus)

    def mark_dead(self, worker: str) -> None:
        """No actor is placed on ``worker`` any more; its actors show as DEAD.

        The names of those without ``max_restarts`` are freed: they are gone for good.
        An actor with restarts keeps its name while rank 0's restarts bring it back (they
        set it ``DEAD`` through :meth:`set_state` if they cannot).
        """
        with self._lock:
            for i, p in enumerate(self._placer.procs):
                if p.name == worker:
                    self._placer.alive[i] = False
                    self._suspects.discard(i)  # judged: a placement waiting on it goes on
            self._settled.notify_all()
            for actor_id, rec in list(self._records.items()):
                if rec.info.process == worker and not rec.ended:
                    if rec.restartable:  # the restarts decide (RESTARTING, or DEAD why)
                        rec.info = replace(rec.info, state="DEAD")
                    else:
                        self._end(actor_id, rec, f"its process {worker!r} died")
                        self._free_name(actor_id)

    def revive(self, worker: str) -> None:
        """A new process replaced the dead ``worker``: it takes actors again, from empty.

        The actors that died with the old process keep their DEAD rows, but give back
        what they held (only once: a later release finds nothing to free).
        """
        with self._lock:
            for i, p in enumerate(self._placer.procs):
                if p.name == worker:
                    self._placer.alive[i] = True
            for rec in self._records.values():
                if rec.info.process == worker and rec.info.state == "DEAD":
                    self._free(rec)

    def grow(self, plan: Plan, process: ProcessInfo) -> None:
        """Adds a process that joined the running cluster; ``plan`` is the plan with it.

        It takes actors the placer places (outside a layout's slots), from empty.
        """
        with self._lock:
            self._placer.add(process)
            self._plan = plan

    def function_spots(self, label: str | None, res: Resources) -> tuple[FunctionSpot, ...]:
        """The executors that can run a remote function of ``label`` taking ``res`` per call.

        Dead and suspect processes are left out (see
        :func:`~actorrt.placement.functions.function_spots`).

        Raises:
            PlacementError: No live process can run it.
        """
        with self._lock:
            alive = [a and i not in self._suspects for i, a in enumerate(self._placer.alive)]
            return function_spots(self._placer.procs, self._plan, label, res, alive)

    def where(self, actor_id: str) -> tuple[str | None, str]:
        """The process an actor was placed on and its state, or (None, "") if unknown.

        An actor that ended is ``DEAD`` there, until its row is pruned (``MAX_ENDED_ROWS``).
        """
        with self._lock:
            rec = self._records.get(actor_id)
            return (rec.info.process, rec.info.state) if rec is not None else (None, "")

    def actors(self) -> list[ActorInfo]:
        """One record per actor placed so far, ended ones included."""
        with self._lock:
            infos = [r.info for r in self._records.values()]
        return sorted(infos, key=lambda a: (a.rank, a.slot or "", a.actor_id))

    def nodes(self) -> list[NodeInfo]:
        """One record per process of the cluster, the driver included."""
        with self._lock:
            counts: dict[int, int] = {}
            for rec in self._records.values():
                # Not those that died there (a restart counts where it lands).
                if rec.info.state not in ("DEAD", "RESTARTING"):
                    counts[rec.index] = counts.get(rec.index, 0) + 1
            out = []
            for i, p in enumerate(self._placer.procs):
                pp = self._plan.for_rank(p.rank)
                out.append(
                    NodeInfo(
                        process=p.name,
                        rank=p.rank,
                        host=p.node.hostname,
                        labels=pp.labels or tuple(p.node.labels),
                        gpus=pp.gpus,
                        alive=self._placer.alive[i],
                        actors=counts.get(i, 0),
                        hosts_actors=p.node.hosts_actors,
                    )
                )
            return out

    def resources(self) -> tuple[dict[str, float], dict[str, float]]:
        """The cluster's CPUs and GPUs, and those left unreserved (:meth:`Placer.resources`)."""
        with self._lock:
            return self._placer.resources()

    # -- names -----------------------------------------------------------------
    def register_name(
        self,
        name: str,
        record: ActorRecord,
        get_if_exists: bool = False,
        class_path: str | None = None,
    ) -> ActorRecord | None:
        """Registers the actor ``record`` under ``name``, or finds the actor already there.

        One step under the lock, so of concurrent creators of one name exactly one
        registers, and with ``get_if_exists`` the others get its record.

        Args:
            name: The actor's name.
            record: Where the actor lives.
            get_if_exists: Return the record already under ``name`` instead of failing.
            class_path: ``module.Class`` of the actor, checked against the registered
                actor's with ``get_if_exists``.

        Returns:
            None when ``record`` was registered; else the record already registered.

        Raises:
            ValueError: ``name`` is taken (without ``get_if_exists``), or taken by an
                actor of another class.
        """
        with self._lock:
            if self._creating.get(name) == record.actor_id:
                del self._creating[name]
                self._settled.notify_all()
            if name not in self._names:
                self._names[name] = (record, class_path)
                return None
            if not get_if_exists:
                raise ValueError(
                    f"an actor named {name!r} already exists; pick another name, or use "
                    f"actorrt.get_actor({name!r}) to reach it, or "
                    f"Cls.options(name={name!r}, get_if_exists=True).remote() to get or "
                    "create it."
                )
            return self._named(name, class_path)

    def lookup(self, name: str, class_path: str | None = None) -> ActorRecord | None:
        """The record registered under ``name``, or None; ``class_path`` as in register_name.

        Raises:
            ValueError: With ``class_path``: the actor under ``name`` is of another class.
        """
        with self._lock:
            return self._named(name, class_path) if name in self._names else None

    def _named(self, name: str, class_path: str | None) -> ActorRecord:
        record, registered = self._names[name]
        if class_path is not None and registered is not None and registered != class_path:
            raise ValueError(
                f"an actor named {name!r} already exists and is a {registered}, not a "
                f"{class_path}: get_if_exists=True returns only an actor of the same class; "
                "pick another name."
            )
        return record


# -- RPC entry points (run on rank 0; other processes reach the directory through them) --


def _directory() -> ClusterDirectory:
    # Only rank 0 installs one: elsewhere this is NotInitializedError.
    return context.part(ClusterDirectory, "the cluster directory (rank 0 only)")


def rpc_directory(fn: Callable[..., Any], *args: Any) -> tuple[bool, Any]:
    """Runs on rank 0: the entry point ``fn``, its exception sent back as a value.

    Returns:
        ``(True, its value)``, or ``(False, the exception it raised)``, which the caller
        raises as it is (``PlacementError``, ``ValueError``...). Raised through torch RPC
        it would arrive as a ``RuntimeError`` (or its own type with rank 0's traceback
        as its message), unlike the same error on rank 0.
    """
    try:
        return True, fn(*args)
    except Exception as exc:
        exc.__traceback__ = None  # rank 0's frames stay here
        if not travels(exc):  # it must be made again at the caller
            exc = ActorRtError(f"{type(exc).__name__}: {exc}")
        return False, exc


def rpc_place(actor_id: str, options: ActorOptions, class_name: str) -> Placement:
    """Runs on rank 0: places one new actor (see :meth:`ClusterDirectory.place_new`)."""
    return _directory().place_new(actor_id, options, class_name)


def rpc_function_spots(label: str | None, res: Resources) -> tuple[FunctionSpot, ...]:
    """Runs on rank 0: :meth:`ClusterDirectory.function_spots`."""
    return _directory().function_spots(label, res)


def rpc_released(actor_id: str, why: str = "") -> None:
    """Runs on rank 0: an actor ended (see :meth:`ClusterDirectory.release`)."""
    _directory().release(actor_id, why)


def rpc_register_name(
    name: str, record: ActorRecord, get_if_exists: bool = False, class_path: str | None = None
) -> ActorRecord | None:
    """Runs on rank 0: registers a named actor, or returns the one already named so."""
    return _directory().register_name(name, record, get_if_exists, class_path)


def rpc_lookup(name: str, class_path: str | None = None) -> ActorRecord | None:
    """Runs on rank 0: the record of the actor with this name, or None."""
    return _directory().lookup(name, class_path)


def rpc_actors() -> list[ActorInfo]:
    """Runs on rank 0: :meth:`ClusterDirectory.actors`."""
    return _directory().actors()


def rpc_nodes() -> list[NodeInfo]:
    """Runs on rank 0: :meth:`ClusterDirectory.nodes`."""
    return _directory().nodes()


def rpc_resources() -> tuple[dict[str, float], dict[str, float]]:
    """Runs on rank 0: :meth:`ClusterDirectory.resources`."""
    return _directory().resources()


def rpc_where(actor_id: str) -> tuple[str | None, str]:
    """Runs on rank 0: :meth:`ClusterDirectory.where`."""
    return _directory().where(actor_id)
