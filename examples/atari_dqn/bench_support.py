"""The collect loop with the learner in the same process: a no-actorrt baseline.

The benchmark compares frames/s of :func:`run_in_process` (same ``CollectorCore``, same
``run_collect_loop``, the learner called directly) with the actor version
(:func:`run_with_actors`, collectors and learner as actors, on actorrt or on Ray); the
ratio is what the runtime costs or gains.

Example::

    from examples.atari_dqn.bench_support import run_in_process
    from examples.atari_dqn.config import config_for_env
    print(run_in_process(config_for_env("ALE/Pong-v5"), total_frames=20_000))
"""

from __future__ import annotations

import time
from typing import Any

from examples.atari_dqn.collector import CollectorCore, run_collect_loop
from examples.atari_dqn.config import DQNConfig
from examples.atari_dqn.learner import Learner

__all__ = ["InProcessLink", "run_in_process", "run_with_actors"]


class _Done:
    """An already-finished call (the in-process stand-in for an ObjectRef)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


class InProcessLink:
    """:class:`~examples.atari_dqn.collector.LearnerLink` that calls a local learner.

    Every call runs to completion immediately, so backpressure is trivially satisfied and
    the loop measures collection plus learning with zero communication cost.
    """

    def __init__(self, learner: Learner) -> None:
        self.learner = learner

    def push(self, batch: Any) -> _Done:
        return _Done(self.learner.push(batch))

    def request_weights(self, known_version: int) -> _Done:
        return _Done(self.learner.get_weights(known_version))

    def wait(self, pending: list[Any], num_returns: int, timeout: float) -> tuple[list, list]:
        return list(pending), []

    def ready(self, handle: Any) -> bool:
        return True

    def result(self, handle: _Done, timeout: float) -> Any:
        return handle.value


def run_in_process(
    cfg: DQNConfig,
    total_frames: int,
    *,
    learner: Learner | None = None,
    train: bool = True,
) -> dict[str, Any]:
    """Runs one collector and the learner in this process, no actorrt involved.

    Args:
        cfg: Configuration (``cfg.num_envs_per_collector`` envs are stepped).
        total_frames: Frames to collect.
        learner: Reuse this learner (e.g. to evaluate it afterwards); a new one by default.
        train: False sets ``learning_starts`` beyond the budget, so only collection and
            replay insertion are measured.

    Returns:
        The loop's counters (``frames``, ``fps``, ``seconds``...) plus ``updates`` and
        ``setup_seconds`` (env and network construction, not in ``fps``).
    """
    t0 = time.perf_counter()
    if not train:
        cfg = DQNConfig.from_dict({**cfg.to_dict(), "learning_starts": 1 << 62})
    learner = learner if learner is not None else Learner(cfg)
    core = CollectorCore(cfg, collector_id=0, num_collectors=1)
    setup = time.perf_counter() - t0
    try:
        result = run_collect_loop(core, InProcessLink(learner), total_frames)
    finally:
        core.close()
    result["updates"] = learner.updates
    result["setup_seconds"] = setup
    return result


def run_with_actors(
    cfg: DQNConfig,
    total_frames: int,
    num_collectors: int = 1,
    timeout: float = 600.0,
    *,
    backend: str = "actorrt",
    warmup_frames: int = 0,
    transport: str = "cpu",
    learner_gpus: float | None = None,
    collector_gpus: float | None = None,
) -> dict[str, Any]:
    """The same loop with learner and collectors as actors, on actorrt or on Ray.

    The caller has started the runtime (``actorrt.start`` with the example's layout, or
    ``ray.init``); the actors are killed at the end.

    Args:
        cfg: Configuration.
        total_frames: Frames to collect in the measured phase (split over collectors).
        num_collectors: Collector actors.
        timeout: Bound on the wait for the runs (seconds).
        backend: ``"actorrt"`` or ``"ray"``.
        warmup_frames: Frames each collector collects first, not measured (the learner
            fills ``learning_starts`` and starts training, the first calls connect).
        transport: ``"cpu"`` or ``"cuda"`` (the runtime's layout must allow it).
        learner_gpus: The learner's GPUs (None: the example's default).
        collector_gpus: Each collector's GPUs (None: the example's default).

    Returns:
        ``frames`` (sum), ``seconds`` (wall time of the measured phase), ``fps`` (frames /
        seconds), ``updates`` and ``updates_per_s`` (the learner's gradient steps in that
        phase), ``comm_share`` (mean over collectors of the share of their loop's time
        spent in calls to the learner: sending pushes and weight requests, and waiting
        for replies), ``send_share``, ``wait_share``, ``train_seconds`` (the learner's
        host time in gradient steps in that phase), ``push_wait_seconds`` (its pushes'
        time held for training to catch up, summed), ``act_share`` and ``env_share``
        (mean over collectors of the share of their loop's time spent choosing actions
        and stepping the emulators), and ``collectors`` (each loop's counters).
    """
    from examples.atari_dqn.backend import backend as make_backend
    from examples.atari_dqn.driver import launch_actors

    rt = make_backend(backend)
    learner, collectors = launch_actors(
        cfg,
        num_collectors,
        backend=backend,
        collector_restarts=0,
        transport=transport,
        learner_gpus=learner_gpus,
        collector_gpus=collector_gpus,
    )
    try:
        if warmup_frames:
            rt.get([c.run.remote(warmup_frames) for c in collectors], timeout)
        before = rt.get(learner.stats.remote(), 60)
        per = total_frames // num_collectors
        t0 = time.perf_counter()
        results = rt.get([c.run.remote(per) for c in collectors], timeout)
        seconds = time.perf_counter() - t0
        after = rt.get(learner.stats.remote(), 60)
    finally:
        for actor in (*collectors, learner):
            rt.kill(actor)
    frames = sum(r["frames"] for r in results)
    updates = after["updates"] - before["updates"]

    def share(key: str) -> float:
        return sum(r[key] / r["seconds"] for r in results) / len(results)

    return {
        "frames": frames,
        "seconds": seconds,
        "fps": frames / seconds,
        "updates": updates,
        "updates_per_s": updates / seconds,
        "comm_share": share("send_seconds") + share("wait_seconds"),
        "send_share": share("send_seconds"),
        "wait_share": share("wait_seconds"),
        "act_share": share("act_seconds"),
        "env_share": share("env_seconds"),
        "train_seconds": after["train_seconds"] - before["train_seconds"],
        "push_wait_seconds": after["push_wait_seconds"] - before["push_wait_seconds"],
        "collectors": results,
    }
