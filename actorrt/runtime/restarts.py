"""Actor restarts (``max_restarts``): rank 0 recreates an actor whose process died.

When an actor with ``max_restarts`` is created, its creator leaves a recipe here, on rank
0: the class (as shipped) and the constructor's arguments. When the driver marks the
actor's process dead, it places the actor again on a live process (the same label and
resources) and runs its constructor there under the same actor id. Callers find the new
instance through :func:`rpc_locate` the first time a call meets the dead process (see
``Runtime.send``); their sequence numbers start again with the new instance.

Calls in flight when the process died fail with ``ActorDiedError`` (at most once),
unless the actor has ``max_task_retries``: then their caller sends them again to the new
instance (``retries.py``), which it finds here too, with ``rpc_locate(actor_id, dead)``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch.distributed.rpc as rpc

from actorrt.errors import ActorDiedError, PlacementError
from actorrt.logs import get_logger
from actorrt.options import ActorOptions
from actorrt.runtime import context
from actorrt.runtime.directory import ClusterDirectory, Placement
from actorrt.runtime.host import create_remote, rpc_ping, rpc_restart
from actorrt.runtime.lives import Lives
from actorrt.runtime.payload import Wire, unpack
from actorrt.runtime.protocol import ActorRecord, rpc_failure

__all__ = ["Recipe", "Restarts", "rpc_keep_recipe", "rpc_locate", "rpc_restart_in_place"]

log = get_logger("restarts")

#: How long a caller waits, at most, for an actor being recreated to be placed.
LOCATE_TIMEOUT_S = 30.0

#: Processes a restart tries, at most, when the one it chose cannot be reached.
CREATE_TRIES = 8

#: How long a process has to answer after it was sent a recreated actor.
CREATE_TIMEOUT_S = 10.0


@dataclass
class Recipe:
    """How to recreate one actor, and where it lives now."""

    record: ActorRecord
    class_key: str
    class_blob: bytes
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    options: ActorOptions
    meta: dict[str, Any]
    left: int  # restarts left; -1: no limit
    life: int = 0  # which process of record.worker's name it lives on (Lives.of)
    why_dead: str | None = None  # set once it will not come back (see end)
    leases: list[Any] = field(default_factory=list)  # RRefs of every recreated instance

    def end(self, why: str) -> None:
        """It will not come back: says why, and lets go of what recreated it.

        Its constructor's arguments (tensors, say) and class would otherwise stay at rank
        0 as long as the cluster runs. The recipe itself stays, as its leases must (see
        ``_restart``).
        """
        self.why_dead = why
        self.args, self.kwargs, self.class_blob = (), {}, b""


class Restarts:
    """Rank 0's recipes, and the restarts they drive.

    Args:
        directory: The cluster directory (placement, the actor table).
        pack: The payload pipeline: packs a value for a peer.
        lives: How many new processes took each name (the runtime's): a restart onto the
            one that took a dead process's name is a new instance although its process
            has the same name. Bumped before :meth:`worker_back`.
    """

    def __init__(
        self, directory: ClusterDirectory, pack: Callable[[str, Any], Wire], lives: Lives
    ) -> None:
        self._directory = directory
        self._pack = pack
        self.lives = lives
        self._cond = threading.Condition()
        self._recipes: dict[str, Recipe] = {}
        self._restarting: set[str] = set()
        self._dead: set[str] = set()  # processes reported dead
        self._closed = False  # the cluster is shutting down: nobody waits any more
        # Suspect processes (a call could not reach them) that answered rank 0's probe:
        # a caller waiting for an actor to leave one goes back to it.
        self._cleared: set[str] = set()
        directory.on_release = self.forget
        # Set by the runtime: a caller found this process unreachable (judge it now).
        self.on_unreachable: Callable[[str], None] | None = None

    def close(self) -> None:
        """The cluster is shutting down: callers waiting in :meth:`locate` go now."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def keep(self, recipe: Recipe) -> None:
        """Keeps the recipe of an actor just created."""
        with self._cond:
            recipe.life = self.lives.of(recipe.record.worker)
            self._recipes[recipe.record.actor_id] = recipe

    def forget(self, actor_id: str, why: str = "") -> None:
        """The actor ended (killed, exited, released; ``why``: how): it is not restarted.

        How it ended stays in the directory's row (its ``death_cause``), for a caller
        whose handle still names a dead process: :meth:`locate` tells it.
        """
        with self._cond:
            self._recipes.pop(actor_id, None)
            self._cond.notify_all()

    def suspected(self, worker: str) -> None:
        """Rank 0 probes ``worker``: callers waiting to leave it wait for the verdict."""
        with self._cond:
            self._cleared.discard(worker)

    def cleared(self, worker: str) -> None:
        """The suspect ``worker`` answered rank 0's probe: its actors live on there."""
        with self._cond:
            self._cleared.add(worker)
            self._cond.notify_all()

    def worker_back(self, worker: str) -> None:
        """A new process took the dead ``worker``'s name: it is not dead any more.

        Without this a restart placed on the new process would be taken for one whose
        process died while it was recreated there, and be restarted again: the first
        instance's lease then goes, which releases the actor on the new process.
        """
        with self._cond:
            self._dead.discard(worker)
            self._cleared.discard(worker)  # said of the dead process
            self._cond.notify_all()

    def worker_died(self, worker: str) -> None:
        """Recreates, each on a thread of its own, the actors that lived on ``worker``."""
        with self._cond:
            self._dead.add(worker)
            self._cleared.discard(worker)  # said of it while it lived
            hit = [
                r
                for r in self._recipes.values()
                if r.record.worker == worker and r.record.actor_id not in self._restarting
            ]
            self._lost(hit, worker)
        self._recreate(hit)

    def _lost(self, hit: list[Recipe], worker: str) -> None:
        """Under the lock: the instances of ``hit`` died with ``worker``'s process."""
        for recipe in hit:
            if recipe.left == 0:
                recipe.end(
                    f"its process {worker!r} died and it has no restarts left "
                    f"(max_restarts={recipe.options.max_restarts})"
                )
            else:
                self._restarting.add(recipe.record.actor_id)
        self._cond.notify_all()

    def _recreate(self, hit: list[Recipe]) -> None:
        """Recreates, each on a thread of its own, the actors :meth:`_lost` marked."""
        for recipe in hit:
            if recipe.why_dead is not None:
                # No restarts left: gone for good, so its name is freed.
                self._directory.set_state(recipe.record.actor_id, "DEAD", recipe.why_dead)
            else:
                self._directory.set_state(recipe.record.actor_id, "RESTARTING")
                threading.Thread(
                    target=self._restart, args=(recipe,), name="actorrt-restart", daemon=True
                ).start()

    def _restart(self, recipe: Recipe) -> None:
        actor_id = recipe.record.actor_id
        why: str | None = None
        placed: Placement | None = None
        created: list[Any] = []  # every lease made, also on processes found unreachable
        life = 0  # which process of the placed name it went to
        counted = False  # this restart is in the actor's count (one per restart)
        died = 0  # tries whose new instance died with its process (each used a restart)
        for _ in range(CREATE_TRIES):
            placement: Placement | None = None
            reached = False  # the chosen process answered before it was sent the actor
            try:
                # A try that could not place the actor (no live process yet) left its
                # count alone, so the first placement made counts the restart, not the
                # first try.
                placement = self._directory.replace(
                    actor_id, recipe.options, recipe.record.class_name, retry=counted
                )
                counted = True
                with self._cond:
                    life = self.lives.of(placement.worker)
                # A process that died before it got the actor (not yet marked) is not the
                # new instance's doing, and uses no restart; one that answers this and dies
                # before the ping below took the new instance with it (its constructor,
                # or a kill), and that uses the restart, as a death of it does in Ray.
                rpc.rpc_sync(placement.worker, rpc_ping, timeout=CREATE_TIMEOUT_S)
                reached = True
                wire = self._pack(placement.worker, (recipe.args, recipe.kwargs))
                meta = {**recipe.meta, "gpu_ids": placement.gpu_ids, "reconstructed": True}
                lease = create_remote(
                    placement.worker, actor_id, recipe.class_key, recipe.class_blob, wire, meta
                )
                created.append(lease)
                # Its process answers after it got the actor (one pipe per pair, in order):
                # one that died and is not yet marked fails here (EPIPE, reset, no answer),
                # not in the first call that meets the new instance. Not the RRef's own
                # creation future: it may never complete when the process is gone.
                rpc.rpc_sync(placement.worker, rpc_ping, timeout=CREATE_TIMEOUT_S)
                placed, why = placement, None
                break
            except KeyError:
                why = "it was killed"
                break
            except PlacementError as exc:
                why = f"its process died and no live process can host it again ({exc})"
                # A replacement of a dead local worker is coming: the actor goes there.
                wait = self._directory.await_capacity
                if wait is not None and wait():
                    continue
                break
            except Exception as exc:
                why = f"recreating it failed ({type(exc).__name__}: {exc})"
                unreachable = isinstance(rpc_failure("", "", exc), ActorDiedError)
                if placement is None or not unreachable or self.on_unreachable is None:
                    break
                # The process chosen is unreachable (dead, not yet marked): it is judged
                # now (suspect: no placement goes there meanwhile) and the actor goes on
                # to another live process.
                log.info("recreating %s on %s failed (%s); trying another process",
                         actor_id, placement.worker, exc)  # fmt: skip
                self.on_unreachable(placement.worker)
                if reached:
                    died += 1
                    why = self._instance_died(recipe, placement.worker, exc)
                    if why is not None:
                        break
                    counted = False  # the next placement is a restart of its own
        else:  # every try failed: each process it went to died (or none could host it)
            how = (
                "each new instance's process dying as it was made (a constructor that ends "
                "or crashes its process does this)"
                if died
                else "no process it was sent to could be reached"
            )
            why = f"{CREATE_TRIES} tries to recreate it failed, {how}; the last: {why}"
        again = relived = False
        with self._cond:
            self._restarting.discard(actor_id)
            if placed is not None:
                recipe.record = recipe.record._replace(worker=placed.worker)
                recipe.life = life
                # The leases of instances on dead processes are kept, not dropped: a
                # dropped RRef sends its owner a delete that torch retries while the owner
                # is dead, and the retry crashes rank 0 (a segfault in findWorkerURL) once
                # a local replacement has taken the dead process's name out of the group.
                recipe.leases.extend(created)
                if recipe.left > 0:
                    recipe.left -= 1
                # The process it was placed on died while it was being recreated there
                # (its death skipped the actor, which was restarting): once more.
                again = placed.worker in self._dead
                # Or died, and a new process took its name, before it was marked dead.
                relived = not again and self.lives.of(placed.worker) != life
                if relived:
                    self._lost([recipe], placed.worker)
            else:
                recipe.end(why or "recreating it failed")
                recipe.leases.extend(created)  # kept, as above
            self._cond.notify_all()
        if placed is not None and again:
            self.worker_died(placed.worker)
        if relived:
            self._recreate([recipe])
        if placed is not None:
            log.warning(
                "%s actor %s restarted on %s (%s restart(s) left)",
                recipe.record.class_name, actor_id, placed.worker,
                "unlimited" if recipe.left < 0 else recipe.left,
            )  # fmt: skip
        else:
            self._directory.set_state(actor_id, "DEAD", recipe.why_dead or "")
            name = recipe.record.class_name
            log.warning("%s actor %s is not restarted: %s", name, actor_id, why)

    def _instance_died(self, recipe: Recipe, worker: str, exc: Exception) -> str | None:
        """A new instance died with its process ``worker`` as it was made: a restart used.

        Returns:
            Why the actor ends, when it has no restart left; else None (it goes on).
        """
        with self._cond:
            if recipe.left > 0:
                recipe.left -= 1
            if recipe.left != 0:
                return None
        return (
            f"its new instance's process {worker!r} died as it was made "
            f"({type(exc).__name__}: {exc}), and it has no restarts left "
            f"(max_restarts={recipe.options.max_restarts})"
        )

    def restart_in_place(
        self, actor_id: str, reason: str, numbered: dict[str, int] | None = None
    ) -> str | None:
        """Restarts a live actor where it is (``actorrt.kill(handle, no_restart=False)``).

        Its calls in flight fail with ``reason``; its constructor runs again, under the
        same id on the same process, so its handles go on without a move. It counts as
        one of its ``max_restarts``. ``numbered``: per caller (the one asking), the last
        number it took for the actor before: those calls fail too, also those still on
        their way (see ``Mailbox.restart``).

        Returns:
            None once restarted (or when it is being recreated already, its process having
            died); else why not (no ``max_restarts``, none left, or its process could not
            be reached): the caller kills it.
        """
        with self._cond:
            recipe = self._recipes.get(actor_id)
            if recipe is None:
                return "it has no max_restarts"
            if recipe.why_dead is not None:
                return recipe.why_dead
            if actor_id in self._restarting:
                return None  # a new instance is on its way: what was asked
            if recipe.left == 0:
                return f"it has no restarts left (max_restarts={recipe.options.max_restarts})"
            worker = recipe.record.worker
            left_before = recipe.left
            if recipe.left > 0:
                recipe.left -= 1
        try:
            wire = self._pack(worker, (recipe.args, recipe.kwargs))
            done = rpc.rpc_sync(
                worker,
                rpc_restart,
                args=(actor_id, reason, recipe.class_key, recipe.class_blob, wire, numbered),
                timeout=CREATE_TIMEOUT_S,
            )
        except Exception as exc:
            done, why = False, f"its process {worker!r} could not be reached ({exc})"
        else:
            why = "it had ended on its process"
        if not done:
            with self._cond:
                recipe.left = left_before
            return why
        self._directory.count_restart(actor_id)
        log.warning(
            "%s actor %s restarted on %s by actorrt.kill(no_restart=False) (%s restart(s) left)",
            recipe.record.class_name, actor_id, worker,
            "unlimited" if recipe.left < 0 else recipe.left,
        )  # fmt: skip
        return None

    def locate(
        self, actor_id: str, timeout: float = LOCATE_TIMEOUT_S, away_from: str | None = None
    ) -> tuple[ActorRecord | None, str]:
        """Where the actor lives now (waiting while it is recreated), or None and why not.

        Args:
            actor_id: The actor.
            timeout: Seconds to wait at most.
            away_from: A process the caller could not reach: wait until the actor lives
                elsewhere (the process is found dead and the actor recreated), not only
                until no restart is under way.
        """

        def moved(recipe: Recipe) -> bool:
            # Left the process the caller could not reach: for another, for a new process
            # that took its name since, or it lives on there after all (answered a probe).
            return (
                recipe.record.worker != away_from
                or recipe.life > life
                or away_from in self._cleared
            )

        def settled() -> bool:
            if self._closed:
                return True
            if actor_id in self._restarting:
                return False
            recipe = self._recipes.get(actor_id)
            return recipe is None or recipe.why_dead is not None or moved(recipe)

        with self._cond:
            # The process of that name the caller could not reach: the one rank 0 knows now,
            # or one before it (whose actors were restarted when it died).
            life = self.lives.of(away_from) if away_from is not None else 0
        if away_from is not None and self.on_unreachable is not None:
            self.on_unreachable(away_from)  # a local cluster's driver can tell at once
        with self._cond:
            self._cond.wait_for(settled, timeout=timeout)
            if self._closed:
                return None, "the cluster is shutting down"
            recipe = self._recipes.get(actor_id)
            if recipe is None:
                ended = self._directory.death_cause(actor_id)
                return None, ended or "its process died (it has no max_restarts)"
            if recipe.why_dead is not None:
                return None, recipe.why_dead
            if actor_id in self._restarting:
                return None, f"it is still being recreated after {timeout:g} s"
            if not moved(recipe):
                return None, (
                    f"its process {away_from!r} could not be reached, and rank 0 did not "
                    f"find it dead within {timeout:g} s"
                )
            return recipe.record, ""


# -- RPC entry points (rank 0) --------------------------------------------------------


def rpc_keep_recipe(
    record: ActorRecord,
    class_key: str,
    class_blob: bytes,
    wire: Wire,
    options: ActorOptions,
    meta: dict[str, Any],
) -> None:
    """Runs on rank 0: keeps how to recreate an actor just created with ``max_restarts``."""
    args, kwargs = unpack(wire)
    recipe = Recipe(
        record, class_key, class_blob, args, kwargs, options, meta, left=options.max_restarts
    )
    context.part(Restarts, "actor restarts (rank 0 only)").keep(recipe)


def rpc_restart_in_place(
    actor_id: str, reason: str, numbered: dict[str, int] | None = None
) -> str | None:
    """Runs on rank 0: restarts the actor where it is; None, or why it could not."""
    restarts = context.part(Restarts, "actor restarts (rank 0 only)")
    return restarts.restart_in_place(actor_id, reason, numbered)


def rpc_locate(actor_id: str, away_from: str | None = None) -> tuple[ActorRecord | None, str]:
    """Runs on rank 0: where the actor lives now (elsewhere than ``away_from``), or why not."""
    restarts = context.part(Restarts, "actor restarts (rank 0 only)")
    return restarts.locate(actor_id, away_from=away_from)
