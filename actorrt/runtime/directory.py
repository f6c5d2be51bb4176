"""The cluster directory, kept by rank 0: which process hosts each actor, and actor names.

Every actor creation asks the directory for a process (so resources are counted once,
cluster-wide), and named actors are registered here for ``actorrt.get_actor``.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from actorrt.errors import PlacementError
from actorrt.options import ActorOptions

__all__ = ["ClusterDirectory", "ProcessSlot", "Placement"]


@dataclass
class ProcessSlot:
    """What one process offers actors, and what is reserved on it now."""

    name: str
    rank: int
    labels: tuple[str, ...] = ()
    num_cpus: float = 0.0
    gpus: tuple[int, ...] = ()
    used_cpus: float = 0.0
    gpu_load: dict[int, float] = field(default_factory=dict)
    actors: int = 0
    alive: bool = True

    def free_gpus(self, need: float) -> tuple[int, ...] | None:
        """GPU indices that can take ``need`` GPUs (a share of one, or whole ones)."""
        if need <= 0:
            return ()
        if need < 1:
            for gpu in self.gpus:
                if self.gpu_load.get(gpu, 0.0) + need <= 1.0 + 1e-9:
                    return (gpu,)
            return None
        idle = [g for g in self.gpus if self.gpu_load.get(g, 0.0) == 0.0]
        return tuple(idle[: int(need)]) if len(idle) >= need else None


@dataclass(frozen=True)
class Placement:
    """Where an actor goes."""

    worker: str
    gpu_ids: tuple[int, ...]


class ClusterDirectory:
    """Places actors on processes and keeps actor names. Lives on rank 0 only."""

    def __init__(self, slots: list[ProcessSlot]) -> None:
        self._lock = threading.Lock()
        self._slots = {s.name: s for s in slots}
        self._reservations: dict[str, tuple[str, float, tuple[int, ...], float]] = {}
        self._names: dict[str, object] = {}

    def place(self, actor_id: str, options: ActorOptions, class_name: str) -> Placement:
        """Chooses the least loaded process that has the label and free resources."""
        with self._lock:
            slots = [s for s in self._slots.values() if s.alive]
            if options.label is not None and any(s.labels for s in slots):
                labelled = [s for s in slots if options.label in s.labels]
                if not labelled:
                    offered = sorted({label for s in slots for label in s.labels})
                    raise PlacementError(
                        f"{class_name}: no process offers label {options.label!r} (offered: "
                        f"{', '.join(offered) or 'none'}); start a worker with "
                        f"--labels {options.label}, or drop the label."
                    )
                slots = labelled
            fitting = []
            for slot in slots:
                if options.num_cpus and slot.used_cpus + options.num_cpus > slot.num_cpus + 1e-9:
                    continue
                gpus = slot.free_gpus(options.num_gpus)
                if gpus is None:
                    continue
                fitting.append((slot.actors, slot.rank, slot, gpus))
            if not fitting:
                raise PlacementError(self._why_not(options, class_name, slots))
            _, _, slot, gpus = min(fitting, key=lambda t: (t[0], t[1]))
            slot.actors += 1
            slot.used_cpus += options.num_cpus
            share = options.num_gpus if options.num_gpus < 1 else 1.0
            for gpu in gpus:
                slot.gpu_load[gpu] = slot.gpu_load.get(gpu, 0.0) + share
            self._reservations[actor_id] = (slot.name, options.num_cpus, gpus, share)
            return Placement(slot.name, gpus)

    def _why_not(self, options: ActorOptions, class_name: str, slots: list[ProcessSlot]) -> str:
        total_gpus = sum(len(s.gpus) for s in slots)
        where = f"with label {options.label!r} " if options.label else ""
        if options.num_gpus and total_gpus == 0:
            return (
                f"{class_name} needs {options.num_gpus:g} GPU(s); no process {where}has a GPU. "
                "Run it with num_gpus=0 (e.g. Cls.options(num_gpus=0).remote()), or start "
                "workers on a machine with GPUs."
            )
        if not slots:
            return f"{class_name}: no live process can host actors; start the cluster again."
        return (
            f"{class_name} needs num_cpus={options.num_cpus:g}, num_gpus={options.num_gpus:g}; "
            f"no process {where}has that much free ({len(slots)} process(es), {total_gpus} GPU(s)"
            " in all). Kill actors you no longer need, lower the request, or add workers."
        )

    def release(self, actor_id: str) -> None:
        with self._lock:
            res = self._reservations.pop(actor_id, None)
            if res is None:
                return
            name, cpus, gpus, share = res
            slot = self._slots[name]
            slot.actors -= 1
            slot.used_cpus -= cpus
            for gpu in gpus:
                slot.gpu_load[gpu] = max(0.0, slot.gpu_load.get(gpu, 0.0) - share)

    def mark_dead(self, worker: str) -> None:
        with self._lock:
            if worker in self._slots:
                self._slots[worker].alive = False

    # -- names -----------------------------------------------------------------
    def register_name(self, name: str, handle: object) -> None:
        with self._lock:
            if name in self._names:
                raise ValueError(
                    f"an actor named {name!r} already exists; pick another name, or use "
                    f"actorrt.get_actor({name!r}) to reach it."
                )
            self._names[name] = handle

    def lookup(self, name: str) -> object | None:
        with self._lock:
            return self._names.get(name)

    def unregister_actor(self, actor_id: str) -> None:
        with self._lock:
            for name, handle in list(self._names.items()):
                if getattr(handle, "actor_id", None) == actor_id:
                    del self._names[name]
