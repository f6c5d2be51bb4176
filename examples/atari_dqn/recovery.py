"""When an actor's process dies mid-run: a collector gets a new run, the learner comes back.

Collectors are recreated by actorrt (their ``max_restarts``, ``--collector-restarts``); the
driver gives the new instance the current learner and a new run over its share of the
frames still missing (:func:`rerun_collector`).

The learner is recreated by the driver (``--learner-restarts``), not by ``max_restarts``:
actorrt recreates an actor only in a live slot of its label, and the learner's one slot
dies with its process; and the new learner must start from the last checkpoint, which
the driver writes and holds. :func:`replace_learner` waits for the collectors' runs to
end (their pushes fail as soon as the learner's process is gone), creates a learner,
loads the checkpoint into it, points every collector at it and starts new runs over the
frames the checkpoint does not cover, as ``--resume`` would.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from examples.atari_dqn.backend import Backend
from examples.atari_dqn.checkpoint import load_checkpoint

__all__ = [
    "Crew",
    "learner_death",
    "record_learner",
    "replace_learner",
    "rerun_collector",
    "top_up",
]


@dataclass
class Crew:
    """The run's actors, each collector's current run, and what the learner can go back to.

    Attributes:
        rt: The backend the actors run on.
        learner: The learner's handle (a new one after each learner restart).
        collectors: The collectors' handles, by index.
        runs: Each collector's current ``run`` call (its ref), by index.
        checkpoint: The newest checkpoint of this run (or the one it resumed from), or
            None before the first.
        learners: One entry per learner instance, the first included: its process, pid,
            the checkpoint it loaded and the counters it started from (``learner.json``).
        deadline: When collection ends (``time.monotonic()`` here), whatever frames are
            left (``--train-seconds``); None: when the frames are collected.
    """

    rt: Backend
    learner: Any
    collectors: list[Any]
    runs: list[Any]
    checkpoint: Path | None = None
    learners: list[dict[str, Any]] = field(default_factory=list)
    deadline: float | None = None

    def start_run(self, collector: Any, frames: int) -> Any:
        """``collector.run`` over ``frames``, and over what is left of the deadline."""
        if self.deadline is None:
            return collector.run.remote(frames)
        return collector.run.remote(frames, seconds=max(0.0, self.deadline - time.monotonic()))

    def out_of_time(self) -> bool:
        """Whether the deadline has passed (never without one)."""
        return self.deadline is not None and time.monotonic() >= self.deadline


def learner_death(crew: Crew, exc: BaseException) -> bool:
    """Whether ``exc`` says the learner is gone, itself or through a collector's run.

    A collector whose push failed because the learner died raises that error from its
    ``run``; the driver receives it inside the method's error (:meth:`Backend.died`).
    """
    return crew.rt.died(exc) == crew.rt.actor_id(crew.learner)


def record_learner(crew: Crew, timeout: float) -> dict[str, Any]:
    """Adds the current learner's entry to ``crew.learners`` (its counters as it starts)."""
    stats = crew.rt.get(crew.learner.stats.remote(), timeout)
    entry = {
        "process": crew.rt.process(crew.learner),
        "pid": stats["pid"],
        "checkpoint": None if crew.checkpoint is None else str(crew.checkpoint),
        "frames": stats["frames"],
        "updates": stats["updates"],
    }
    crew.learners.append(entry)
    return entry


def _recreated(crew: Crew, collector: Any, timeout: float) -> bool:
    """Whether a collector whose process died was recreated (``max_restarts``).

    Asked by calling it: on actorrt a call to an actor being recreated waits for the new
    instance; on Ray it fails as "restarting" until then, and is asked again (within
    ``timeout``). A call to an actor that will not come back fails at once.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            crew.rt.get(collector.stats.remote(), timeout)
            return True
        except Exception as exc:
            if crew.rt.died(exc) != crew.rt.actor_id(collector):
                raise
            if not crew.rt.restarting(exc) or time.monotonic() > deadline:
                return False
        time.sleep(0.5)


def rerun_collector(
    crew: Crew, ref: Any, restarts: int, total_frames: int, frames: int, timeout: float
) -> Any | None:
    """A new run for the collector whose run ``ref`` failed because its process died.

    The collector was recreated (``max_restarts``) with a fresh environment and the
    learner it was first given; it is pointed at the current learner and collects its
    share of the frames still missing.

    Args:
        crew: The run's actors (``crew.runs`` gets the new run).
        ref: A finished run.
        restarts: ``--collector-restarts`` (0: a dead collector ends the run).
        total_frames: The run's frame budget.
        frames: Frames the learner has received so far.
        timeout: Bound on the wait for a recreated collector (seconds).

    Returns:
        The new run's ref, or None when the run did not die (or restarts are off: the
        error then ends the run where the driver gets the runs' results).

    Raises:
        ActorDiedError: The collector died and was not recreated.
    """
    if restarts == 0:
        return None
    try:
        crew.rt.get(ref, 0)
        return None
    except Exception as exc:
        error = exc
    i = crew.runs.index(ref)
    collector = crew.collectors[i]
    if crew.rt.died(error) != crew.rt.actor_id(collector):
        return None  # the collector lives; its error ends the run with the results
    if not _recreated(crew, collector, timeout):
        raise error  # not recreated (restarts used up, or no process can host it)
    left = max(1, math.ceil((total_frames - frames) / len(crew.collectors)))
    print(f"collector {i} died ({error}); restarted: it collects {left:,} more frames", flush=True)
    collector.set_learner.remote(crew.learner)
    crew.runs[i] = crew.start_run(collector, left)
    return crew.runs[i]


def top_up(crew: Crew, total_frames: int, timeout: float) -> bool:
    """Starts a last round of runs when the learner has fewer frames than the budget.

    A recreated collector's run covers its share of what was missing when it died, and
    the others may have been behind it, so the runs can end short of ``total_frames``.
    Past the crew's deadline there is no last round: the runs ended on time.

    Returns:
        Whether runs were started (``crew.runs``); watch them, then ask again.
    """
    if crew.out_of_time():
        return False
    frames = crew.rt.get(crew.learner.stats.remote(), timeout)["frames"]
    if frames >= total_frames or not crew.runs:
        return False
    per_collector = math.ceil((total_frames - frames) / len(crew.collectors))
    crew.runs = [crew.start_run(c, per_collector) for c in crew.collectors]
    return True


def _end_runs(crew: Crew, collector_restarts: int, timeout: float) -> None:
    """Waits for every collector's run to end, each either done or failed with the learner.

    Raises:
        Exception: A run failed for another reason (a collector died and was not
            recreated, or a method raised).
    """
    for ref, collector in zip(crew.runs, crew.collectors, strict=False):  # no runs: none left
        try:
            crew.rt.get(ref, timeout)
        except Exception as exc:
            if learner_death(crew, exc):
                continue
            mine = crew.rt.died(exc) == crew.rt.actor_id(collector)
            if not (mine and collector_restarts != 0 and _recreated(crew, collector, timeout)):
                raise


def replace_learner(
    crew: Crew,
    make_learner: Callable[[], Any],
    env_id: str,
    total_frames: int,
    collector_restarts: int,
    timeout: float,
) -> dict[str, Any]:
    """Puts a new learner, resumed from ``crew.checkpoint``, in place of the dead one.

    ``crew.learner`` names the new learner as soon as it exists (so a death during the
    restart is recognised as the learner's too), then the checkpoint is loaded, and only
    then are the collectors pointed at it and given new runs over the frames still
    missing (``crew.runs``).

    Args:
        crew: The run's actors.
        make_learner: Creates a learner actor and waits for its constructor.
        env_id: The run's environment (the checkpoint must be for it).
        total_frames: The run's frame budget.
        collector_restarts: ``--collector-restarts`` (a collector that died meanwhile and
            was recreated is given a run too).
        timeout: Bound on each wait (seconds).

    Returns:
        The new learner's entry of ``crew.learners``: ``process``, ``pid``,
        ``checkpoint`` (the file loaded, or None), and the learner's own ``frames`` and
        ``updates`` counters right after loading it.
    """
    _end_runs(crew, collector_restarts, timeout)
    crew.learner = make_learner()
    if crew.checkpoint is not None:
        state = load_checkpoint(crew.checkpoint, env_id)
        crew.rt.get(crew.learner.load_checkpoint_state.remote(state["learner"]), timeout)
    entry = record_learner(crew, timeout)
    left = max(0, total_frames - entry["frames"])
    per_collector = math.ceil(left / len(crew.collectors))
    for c in crew.collectors:
        c.set_learner.remote(crew.learner)
    crew.runs = [crew.start_run(c, per_collector) for c in crew.collectors] if left else []
    return entry
