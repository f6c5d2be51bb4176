"""How close the DQN's collection comes to the emulators' own rate, in one run.

``python -m benchmarks.dqn_throughput`` (also the ``dqn-throughput`` suite of
``python -m benchmarks``) measures, one after the other on the same machine:

1. **raw**: ale-py's ``AtariVectorEnv`` with the collectors' settings
   (``envs.ale_vector_env``: Pong, frame skip 4, the preset's sticky actions (0.25), no-op resets,
   84x84 grayscale), stepped with random actions in as many processes as the example
   has collectors, each with the collector's number of envs on one thread; no policy,
   no replay, no runtime. Emulator frames/s summed over the processes.
2. **dqn**: the example's learner and collectors as actorrt actors (the example's
   layout and GPU shares), the learner training at the preset's replay ratio (8 samples
   per transition: a step of 32 per 4 transitions, or with the learner on a GPU the
   example's default there, a step of 512 per 64), measured after a warm-up in which the
   learner passes ``learning_starts``. Emulator frames/s, the learner's gradient
   steps/s, the replay ratio it kept, and the share of the time its training thread
   spent in steps.
3. **raw** again, so a change in the machine's load between the two shows.

It prints both rates and their ratio (dqn / raw: 1.0 would mean the runtime, the
policy and the learner cost the emulators nothing). The figures are reported, never
asserted.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import queue
import statistics
import time
from typing import Any

ENV_ID = "ALE/Pong-v5"
LEARNING_STARTS = 1_000  # transitions: passed during the warm-up
REPLAY_CAPACITY = 100_000
START_TIMEOUT_S = 120.0  # an emulator process that is not ready by then fails the run


def dqn_config(
    num_envs: int | None = None,
    batch_size: int | None = None,
    learner_gpus: float = 0.0,
    cuda_graph: bool = False,
    replay_ratio: float | None = None,
    prioritized: bool = False,
    max_replay_ratio: float | None = None,
) -> Any:
    """The example's Pong preset (its replay ratio), training starting within the warm-up.

    The batch is the example's choice (``driver.build_config``): ``batch_size`` if given,
    else the preset's ``gpu_batch_size`` with a learner GPU, else the preset's.
    ``cuda_graph``: the learner's steps as CUDA graph replays (the example's flag);
    ``replay_ratio``: samples per transition at that batch (the example's flag);
    ``prioritized``: Ape-X's prioritized replay (the example's ``--prioritized``);
    ``max_replay_ratio``: the ratio the learner's spare steps may reach (the example's
    ``--max-replay-ratio``).
    """
    from examples.atari_dqn.config import (
        APEX_PRIORITY_EXPONENT,
        config_for_env,
        with_batch_size,
        with_replay_ratio,
    )

    cfg = config_for_env(
        ENV_ID,
        learning_starts=LEARNING_STARTS,
        replay_capacity=REPLAY_CAPACITY,
        num_envs_per_collector=num_envs,
        cuda_graph=cuda_graph,
        priority_exponent=APEX_PRIORITY_EXPONENT if prioritized else None,
    )
    if batch_size is None and learner_gpus > 0:
        batch_size = cfg.gpu_batch_size
    cfg = with_batch_size(cfg, batch_size) if batch_size else cfg
    cfg = with_replay_ratio(cfg, replay_ratio) if replay_ratio else cfg
    if max_replay_ratio is not None:
        cfg.max_replay_ratio = max_replay_ratio
    return cfg


def example_args(collectors: int, transport: str) -> Any:
    """The example's parsed flags for this run, its GPU shares fitted to this machine."""
    from examples.atari_dqn.driver import fit_gpus, parse_args

    args = parse_args(["--collectors", str(collectors), "--transport", transport])
    fit_gpus(args)  # the shares the example would choose on this machine
    return args


def _emulate(
    cfg_dict: dict[str, Any],
    seed: int,
    seconds: float,
    ready: Any,
    go: Any,
    out: Any,
) -> None:
    """One raw process: steps the vector env with random actions for ``seconds``."""
    import numpy as np

    from examples.atari_dqn.config import DQNConfig
    from examples.atari_dqn.envs import ale_vector_env

    cfg = DQNConfig.from_dict(cfg_dict)
    n = cfg.num_envs_per_collector
    env = ale_vector_env(cfg, n, num_threads=1)
    env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    n_actions = int(env.single_action_space.n)
    ready.put(os.getpid())
    if not go.wait(START_TIMEOUT_S):
        return
    steps = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(16):  # check the clock every 16 steps
            env.step(rng.integers(0, n_actions, size=n, dtype=np.int64))
        steps += 16
    elapsed = time.perf_counter() - t0
    env.close()
    out.put((steps * n * cfg.frame_skip, elapsed))


def raw_rate(cfg: Any, processes: int, seconds: float) -> dict[str, Any]:
    """Emulator frames/s of ``processes`` processes stepping the collectors' vector env.

    Every process builds its env first; all start stepping together and step for
    ``seconds``. Each process is joined within a bound and killed (by its pid) if it
    does not end.
    """
    ctx = mp.get_context("spawn")
    ready, out, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    procs = [
        ctx.Process(
            target=_emulate,
            args=(cfg.to_dict(), cfg.seed + 1000 * (i + 1), seconds, ready, go, out),
            daemon=True,
        )
        for i in range(processes)
    ]
    for p in procs:
        p.start()
    try:
        for _ in procs:
            ready.get(timeout=START_TIMEOUT_S)
        go.set()
        got = [out.get(timeout=seconds + START_TIMEOUT_S) for _ in procs]
    except queue.Empty:
        raise RuntimeError("an emulator process did not report in time") from None
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
                p.join(timeout=5)
    frames = sum(f for f, _ in got)
    fps = sum(f / s for f, s in got)
    return {"frames_per_s": fps, "frames": frames, "processes": processes, "seconds": seconds}


def dqn_rate(cfg: Any, args: Any, frames: int) -> dict[str, Any]:
    """The example's collection rate with the learner training (actorrt, its layout)."""
    import actorrt
    from examples.atari_dqn.bench_support import run_with_actors
    from examples.atari_dqn.driver import build_layout

    collectors, transport = args.collectors, args.transport
    warmup = 2 * LEARNING_STARTS * cfg.frame_skip // collectors  # per collector
    with actorrt.start(transport=transport, timeout=120, **build_layout(args)):
        got = run_with_actors(
            cfg,
            frames,
            collectors,
            warmup_frames=warmup,
            transport=transport,
            learner_gpus=args.learner_gpus,
            collector_gpus=args.collector_gpus,
        )
    transitions = got["frames"] / cfg.frame_skip
    return {
        "frames_per_s": got["fps"],
        "frames": got["frames"],
        "seconds": got["seconds"],
        "updates_per_s": got["updates_per_s"],
        "replay_ratio": got["updates"] * cfg.batch_size / max(transitions, 1),
        "preset_replay_ratio": cfg.batch_size / cfg.train_every,
        "batch_size": cfg.batch_size,
        "lr": cfg.lr,
        "learner_busy_percent": 100 * got["train_seconds"] / got["seconds"],
        "push_wait_s": got["push_wait_seconds"],
        "comm_percent": 100 * got["comm_share"],
        "wait_percent": 100 * got["wait_share"],
        "act_percent": 100 * got["act_share"],
        "env_percent": 100 * got["env_share"],
        "collectors": collectors,
        "transport": transport,
        "learner_gpus": args.learner_gpus,
        "collector_gpus": args.collector_gpus,
    }


def measure(
    collectors: int,
    frames: int,
    raw_seconds: float,
    num_envs: int | None = None,
    transport: str = "cpu",
    batch_size: int | None = None,
    cuda_graph: bool = False,
    replay_ratio: float | None = None,
    prioritized: bool = False,
    max_replay_ratio: float | None = None,
) -> dict[str, Any]:
    """raw, dqn, raw; returns every figure and the ratio dqn / mean(raw)."""
    args = example_args(collectors, transport)
    cfg = dqn_config(
        num_envs,
        batch_size,
        args.learner_gpus,
        cuda_graph,
        replay_ratio,
        prioritized,
        max_replay_ratio,
    )
    first = raw_rate(cfg, collectors, raw_seconds)
    print(f"raw ALE, {collectors} process(es): {first['frames_per_s']:,.0f} frames/s", flush=True)
    dqn = dqn_rate(cfg, args, frames)
    print(
        f"DQN, {collectors} collector(s), training: {dqn['frames_per_s']:,.0f} frames/s, "
        f"{dqn['updates_per_s']:,.1f} updates/s of batch {dqn['batch_size']}, replay ratio "
        f"{dqn['replay_ratio']:.2f} (preset {dqn['preset_replay_ratio']:g}), learner thread "
        f"in steps {dqn['learner_busy_percent']:.0f}% of the time; collectors emulating "
        f"{dqn['env_percent']:.0f}%, acting {dqn['act_percent']:.0f}%, waiting "
        f"{dqn['wait_percent']:.0f}% of theirs",
        flush=True,
    )
    second = raw_rate(cfg, collectors, raw_seconds)
    print(f"raw ALE again: {second['frames_per_s']:,.0f} frames/s", flush=True)
    raw = statistics.mean([first["frames_per_s"], second["frames_per_s"]])
    ratio = dqn["frames_per_s"] / raw
    print(f"ratio dqn / raw: {ratio:.3f}", flush=True)
    return {
        "raw": [first, second],
        "dqn": dqn,
        "ratio": ratio,
        "envs_per_collector": cfg.num_envs_per_collector,
        "cuda_graph": cfg.cuda_graph,
        "cores": os.cpu_count(),
    }


def run(system: str, cfg: dict[str, Any]) -> dict[str, Any]:
    """The ``dqn-throughput`` suite of ``python -m benchmarks`` (actorrt only)."""
    if system != "actorrt":
        raise SystemExit(f"the dqn-throughput suite runs on actorrt, not {system!r}")
    collectors = cfg.get("dqn_throughput_collectors") or default_collectors()
    return {
        "dqn_throughput": measure(
            collectors, cfg["dqn_throughput_frames"], cfg["dqn_throughput_raw_s"]
        )
    }


def default_collectors() -> int:
    """The README's 2 collectors; on more than 8 cores, the cores less 4 (16: 12, as in the
    issue's GPU runs), which leaves cores to the learner, the driver and the runtime."""
    cores = os.cpu_count() or 2
    return cores - 4 if cores > 8 else 2


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.dqn_throughput", description=__doc__)
    p.add_argument(
        "--collectors",
        type=int,
        default=None,
        help="collectors, and raw emulator processes (default: 2; on more than 8 cores, "
        "the cores less 4)",
    )
    p.add_argument("--envs-per-collector", type=int, default=None, help="default: the preset")
    p.add_argument("--frames", type=int, default=40_000, help="frames of the measured DQN phase")
    p.add_argument("--raw-seconds", type=float, default=10.0, help="seconds of each raw phase")
    p.add_argument("--transport", choices=("cpu", "cuda"), default="cpu")
    p.add_argument(
        "--batch-size",
        type=int,
        default=None,
        help="the learner's batch, at the preset's replay ratio (default: the example's, "
        "32 on a CPU learner, 512 on a GPU one)",
    )
    p.add_argument(
        "--cuda-graph",
        action="store_true",
        help="the learner's steps as CUDA graph replays (the example's --cuda-graph)",
    )
    p.add_argument(
        "--replay-ratio",
        type=float,
        default=None,
        help="samples per transition at the learner's batch (the example's --replay-ratio; "
        "default: the preset's, 8)",
    )
    p.add_argument(
        "--prioritized",
        action="store_true",
        help="the learner samples by priority (the example's --prioritized)",
    )
    p.add_argument(
        "--max-replay-ratio",
        type=float,
        default=None,
        help="the ratio the learner's spare steps may reach (the example's flag)",
    )
    p.add_argument("--json", default=None, help="also write the figures here")
    opts = p.parse_args(argv)
    result = measure(
        opts.collectors or default_collectors(),
        opts.frames,
        opts.raw_seconds,
        opts.envs_per_collector,
        opts.transport,
        opts.batch_size,
        opts.cuda_graph,
        opts.replay_ratio,
        opts.prioritized,
        opts.max_replay_ratio,
    )
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
