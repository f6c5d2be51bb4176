"""The real DQN of ``examples/atari_dqn`` on actorrt and on Ray: the same actor classes.

For 1, 2 and 4 collectors, on Pong: the example's ``Learner`` and ``Collector`` actors
(made actors by its backend seam, ``examples.atari_dqn.backend``), the collectors
stepping their environments, pushing to the learner and refreshing weights, the
learner training inside ``push`` (one Nature-CNN step per 4 transitions, one thread).
Each collector first collects a warm-up share (the learner fills ``learning_starts``
and starts training), then the measured phase: frames/s, the learner's gradient
steps/s, and the share of a collector's loop time spent in calls to the learner
(sending pushes and weight requests, waiting for replies). While the learner trains,
that wait is mostly backpressure (the CPU learner sets the pace); so each collector
count is measured again with learning off, where the pace is collection and the calls.

The ``baseline`` system measures the collectors' two environment pools in-process (one
collector, no runtime, no training): gymnasium envs with Python wrappers
(``EnvPool``) and ale-py's C++ vector env (``AleVectorPool``).
"""

from __future__ import annotations

import os
from typing import Any

COLLECTORS = (1, 2, 4)
ENV_ID = "ALE/Pong-v5"
LEARNING_STARTS = 256  # transitions: training starts within the warm-up
WARMUP_FRAMES = 2048  # all collectors together, before the measured phase
# Learning off, collectors run 30-60x faster: this many times the frames keeps the
# measured phase at seconds.
COLLECT_FRAMES_FACTOR = 8


def dqn_config(vector_env: bool = True, train: bool = True) -> Any:
    """The example's Pong preset, with training starting early and a replay that fits.

    Args:
        vector_env: Collectors step ale-py's vector env (else gymnasium's envs).
        train: False: the learner never trains (``learning_starts`` out of reach), so
            collection and the calls set the pace.
    """
    from examples.atari_dqn.config import config_for_env

    return config_for_env(
        ENV_ID,
        learning_starts=LEARNING_STARTS if train else 1 << 62,
        replay_capacity=50_000,
        ale_vector_env=vector_env,
    )


def layout(num_collectors: int) -> dict[str, Any]:
    """actorrt's layout for up to ``num_collectors`` collectors: the example's, on CPUs."""
    return {
        "labels": {
            "learner": {"count": 1, "num_gpus": 0},
            "collector": {"count": num_collectors, "num_gpus": 0},
        },
        "talks": [("collector", "learner")],
    }


def run(system: str, cfg: dict) -> dict:
    """Runs the suite for ``system`` (``actorrt``, ``ray`` or ``baseline``)."""
    if system == "baseline":
        return {"dqn_envs": _pools(cfg["dqn_frames"])}
    vector_env = cfg.get("dqn_vector_env", True)
    most = max(COLLECTORS)
    if system == "ray":
        import ray

        ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
        try:
            return {"dqn": _sweep("ray", cfg["dqn_frames"], vector_env)}
        finally:
            ray.shutdown()
    import actorrt

    with actorrt.start(**layout(most), timeout=120):
        return {"dqn": _sweep("actorrt", cfg["dqn_frames"], vector_env)}


def _sweep(backend: str, frames: int, vector_env: bool) -> dict[str, Any]:
    """Each collector count, training, then with learning off (collection alone)."""
    from examples.atari_dqn.bench_support import run_with_actors

    out: dict[str, Any] = {}
    for n in COLLECTORS:
        row: dict[str, Any] = {}
        for prefix, train in (("", True), ("collect_", False)):
            got = run_with_actors(
                dqn_config(vector_env, train=train),
                frames if train else COLLECT_FRAMES_FACTOR * frames,
                n,
                backend=backend,
                warmup_frames=WARMUP_FRAMES // n,
            )
            row[f"{prefix}frames_per_s"] = got["fps"]
            row[f"{prefix}comm_percent"] = 100 * got["comm_share"]
            row[f"{prefix}send_percent"] = 100 * got["send_share"]
            row[f"{prefix}wait_percent"] = 100 * got["wait_share"]
            row[f"{prefix}seconds"] = got["seconds"]
            if train:
                row["updates_per_s"] = got["updates_per_s"]
        out[str(n)] = row
    return out


def _pools(frames: int) -> dict[str, Any]:
    """In-process collection frames/s of one collector with each environment pool."""
    from examples.atari_dqn.bench_support import run_in_process

    out = {}
    for name, vector_env in (("gymnasium", False), ("ale_vector", True)):
        got = run_in_process(dqn_config(vector_env), frames, train=False)
        out[name] = {"frames_per_s": got["fps"], "frames": got["frames"]}
    return out


def compare_pools(frames: int, rounds: int = 2) -> list[dict[str, Any]]:
    """Learning-off frames/s of the actorrt pipeline with each env pool, alternating.

    One cluster; for each collector count, the two pools take turns ``rounds`` times, so
    the machine's load falls on both alike.
    """
    import actorrt
    from examples.atari_dqn.bench_support import run_with_actors

    rows = []
    with actorrt.start(**layout(max(COLLECTORS)), timeout=120):
        for n in COLLECTORS:
            for _ in range(rounds):
                for name, vector_env in (("gymnasium", False), ("ale_vector", True)):
                    got = run_with_actors(
                        dqn_config(vector_env, train=False),
                        frames,
                        n,
                        warmup_frames=WARMUP_FRAMES // n,
                    )
                    rows.append({"collectors": n, "pool": name, "frames_per_s": got["fps"]})
                    print(f"{n} collector(s), {name}: {got['fps']:,.0f} frames/s", flush=True)
    return rows


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.dqn",
        description="The actorrt DQN pipeline, learning off, with each collector env pool "
        "(the suite itself runs from python -m benchmarks --suites dqn).",
    )
    parser.add_argument("--frames", type=int, default=48_000, help="frames per measurement")
    parser.add_argument("--rounds", type=int, default=2, help="turns of each pool")
    opts = parser.parse_args()
    compare_pools(opts.frames, opts.rounds)
