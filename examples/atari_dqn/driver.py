"""The driver: parse flags, start (or join) the cluster, launch actors, watch, evaluate.

Process layout::

    driver (rank 0)  --stats/weights-->  learner actor (label "learner", GPU if any)
                                            ^   ^
                       push(records) ------/     \\------ push(records)
                 collector actor 0 (label "collector")   collector actor 1 ...

The driver hosts no actor. It polls the learner's ``stats()`` for the progress bar and
the logs, evaluates a copy of the learner's network in-process, and writes checkpoints.

The layout (:func:`build_layout`: one ``learner`` slot, ``--collectors`` ``collector``
slots, collectors talk to the learner) goes to ``actorrt.start(labels=..., talks=...)``
locally and across nodes alike: the plan, computed once when the cluster forms, decides
which process (and GPU) hosts each slot, so workers are started without ``--labels``.
Every run writes that plan to ``<logdir>/plan.json``; ``--plan`` prints it and exits.

``--backend ray`` runs the same actor classes on a local Ray instance instead (no
layout, no plan): the actor operations go through :mod:`examples.atari_dqn.backend`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

import actorrt
from examples.atari_dqn import timeline_report
from examples.atari_dqn.backend import BACKENDS, ActorSpec, Backend
from examples.atari_dqn.backend import backend as make_backend
from examples.atari_dqn.checkpoint import load_checkpoint, save_checkpoint
from examples.atari_dqn.collector import Collector
from examples.atari_dqn.config import (
    APEX_PRIORITY_EXPONENT,
    EXPLORATIONS,
    RECIPES,
    DQNConfig,
    config_for_env,
    with_batch_size,
    with_replay_ratio,
)
from examples.atari_dqn.envs import NOOP_MAX, check_env_id
from examples.atari_dqn.gpus import GpuShares, share_gpus
from examples.atari_dqn.learner import Learner, learner_concurrency
from examples.atari_dqn.metrics import MetricsLogger, plot_learning_curve
from examples.atari_dqn.monitor import CALL_TIMEOUT_S, Evaluator, Monitor, progress_fields
from examples.atari_dqn.recovery import (
    Crew,
    learner_death,
    record_learner,
    replace_learner,
    top_up,
)

__all__ = [
    "batch_line",
    "build_config",
    "build_layout",
    "emulator_line",
    "fit_gpus",
    "launch_actors",
    "main",
    "parse_args",
    "placement_line",
    "progress_fields",
    "recipe_line",
    "resolve_gpus",
    "show_plan",
    "train",
    "write_plan",
]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parses the command line (see ``python -m examples.atari_dqn --help``)."""
    p = argparse.ArgumentParser(
        prog="python -m examples.atari_dqn",
        description="Distributed DQN with actorrt: collector actors stream transitions to a "
        "learner actor. With no flags: Pong, 2 collectors, a short frame budget, local cluster.",
    )
    p.add_argument(
        "--recipe",
        choices=sorted(RECIPES),
        default=None,
        help="a named run from config.RECIPES (its flags as defaults; flags given beside "
        "it win): pong-10min is issue 24's Pong on one GPU in 10 minutes",
    )
    p.add_argument(
        "--env",
        default="ALE/Pong-v5",
        help="gymnasium id: ALE/<Game>-v5 (CNN) or CartPole-v1 (MLP)",
    )
    p.add_argument(
        "--backend",
        choices=BACKENDS,
        default="actorrt",
        help="the runtime the learner and collector actors run on: actorrt (a local "
        "cluster with the layout, or --init-method), or ray (a local Ray instance, "
        "ray.init(); the same actor classes, no layout or plan)",
    )
    p.add_argument("--collectors", type=int, default=2, help="collector actors")
    p.add_argument(
        "--envs-per-collector",
        type=int,
        default=None,
        help="environments per collector (default: the env preset)",
    )
    p.add_argument(
        "--total-frames",
        type=int,
        default=None,
        help="emulator frames in all, resumed ones included (default: preset)",
    )
    p.add_argument(
        "--train-seconds",
        type=float,
        default=None,
        metavar="S",
        help="stop collecting and training after S seconds (from the collectors' start), "
        "then evaluate, even short of --total-frames (default: no time budget)",
    )
    p.add_argument("--logdir", default=None, help="output folder (default: runs/<env>-<time>)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--num-workers",
        type=int,
        default=None,
        help="local worker processes (default: one per layout slot, i.e. collectors + 1)",
    )
    p.add_argument(
        "--init-method",
        default=None,
        help="tcp://HOST:PORT: be rank 0 of a multi-node cluster instead of a local one",
    )
    p.add_argument(
        "--world-size",
        type=int,
        default=None,
        help="processes in the multi-node cluster, this driver included",
    )
    p.add_argument(
        "--start-timeout",
        type=float,
        default=None,
        help="with --init-method: seconds to wait for every worker to join (default: "
        "actorrt.start's, 60)",
    )
    p.add_argument(
        "--transport",
        choices=("cpu", "cuda"),
        default="cpu",
        help="cuda: collectors on GPUs push CUDA tensors through device maps",
    )
    p.add_argument(
        "--cuda-device-map",
        default=None,
        help="passed to actorrt.start(cuda_device_map=...), e.g. '1_0_0,2_0_1'",
    )
    p.add_argument(
        "--local-cuda-devices",
        default=None,
        help="passed to actorrt.start(local_cuda_devices=...), e.g. '0,1'",
    )
    p.add_argument(
        "--learner-gpus",
        type=float,
        default=None,
        help="GPUs for the learner (default: 1 if CUDA is available here or "
        "--transport cuda, else 0; on a local machine with fewer GPUs than the slots "
        "want, a share that fits, printed at the start)",
    )
    p.add_argument(
        "--collector-gpus",
        type=float,
        default=None,
        help="GPUs per collector (default: 1 with --transport cuda, else 0; on a local "
        "machine with fewer GPUs than that, equal power-of-two shares of what the learner "
        "leaves; fractions share a GPU)",
    )
    p.add_argument(
        "--collector-restarts",
        type=int,
        default=3,
        help="times a collector is recreated when its process dies (the actor's "
        "max_restarts; -1: no limit; 0: a dead collector ends the run)",
    )
    p.add_argument(
        "--learner-restarts",
        type=int,
        default=0,
        help="times the driver recreates the learner when its process dies, from the last "
        "checkpoint (written at every --eval-every); the collectors then push to the new "
        "learner (-1: no limit; 0: a dead learner ends the run)",
    )
    p.add_argument(
        "--learner-threads",
        type=int,
        default=None,
        help="torch threads of a CPU learner, >= 1 (default: cores left after collectors)",
    )
    p.add_argument(
        "--checkpoint",
        default=None,
        help="checkpoint path (default: <logdir>/checkpoint.pt); written at every "
        "evaluation and at the end",
    )
    p.add_argument(
        "--resume",
        nargs="?",
        const="",
        default=None,
        metavar="PATH",
        help="continue from a checkpoint (PATH, or --checkpoint's path if omitted)",
    )
    p.add_argument(
        "--eval-every",
        type=int,
        default=0,
        help="evaluate (and checkpoint) every N frames; 0: only at the end",
    )
    p.add_argument(
        "--eval-episodes", type=int, default=None, help="episodes per evaluation (default: preset)"
    )
    p.add_argument(
        "--eval-max-frames",
        type=int,
        default=None,
        help="emulator frames one evaluation may take, shared by its episodes (default: "
        "preset, 50,000 on Atari; 0: no shared cap, each episode to its own end)",
    )
    p.add_argument(
        "--batch-size",
        type=int,
        default=None,
        help="transitions per gradient step; the preset's replay ratio and target period "
        "are kept and the learning rate scaled by sqrt(batch / preset batch) (default: "
        "the preset's, 32 on Atari, or with the learner on a GPU its gpu_batch_size, "
        "512 on Atari)",
    )
    p.add_argument(
        "--replay-ratio",
        type=float,
        default=None,
        help="samples per transition: a gradient step per batch / R transitions, at the "
        "run's batch (default: the preset's, 8 on Atari)",
    )
    p.add_argument(
        "--max-replay-ratio",
        type=float,
        default=None,
        metavar="M",
        help="let the learner take spare steps, while it owes none, up to M samples per "
        "transition; the replay ratio stays the floor the collectors wait for (default: "
        "none, exactly the replay ratio)",
    )
    p.add_argument(
        "--learning-starts",
        type=int,
        default=None,
        help="transitions in the replay before the first gradient step (default: preset)",
    )
    p.add_argument(
        "--n-step",
        type=int,
        default=None,
        help="steps each sampled transition spans at most: n-step returns (default: preset, 1)",
    )
    p.add_argument(
        "--lr",
        type=float,
        default=None,
        help="Adam's learning rate at the run's batch (default: the preset's 1e-4 at batch "
        "32, scaled by the square root of a larger batch: 4e-4 at 512)",
    )
    p.add_argument(
        "--prioritized",
        action="store_true",
        default=None,
        help="prioritized replay as Ape-X's: transitions drawn by their TD error to the "
        "power 0.6, importance-sampling exponent 0.4 (default: uniform)",
    )
    p.add_argument(
        "--dueling",
        action="store_true",
        default=None,
        help="a dueling Q-network: value and advantage streams, Q = V + A - mean(A) "
        "(default: one linear head)",
    )
    p.add_argument(
        "--exploration",
        choices=EXPLORATIONS,
        default=None,
        help="linear: one epsilon for all envs, decayed over the run (the preset's); "
        "ape-x: a fixed epsilon per env, 0.4 down to 0.4**8 across all the run's envs",
    )
    p.add_argument(
        "--target-update-every",
        type=int,
        default=None,
        help="gradient steps between two target-network copies, at the run's batch "
        "(default: the preset's 1000 at batch 32, divided by the square root of a larger "
        "batch: 250 at 512)",
    )
    p.add_argument(
        "--cuda-graph",
        action="store_true",
        default=None,
        help="a learner on a GPU captures its gradient step as a CUDA graph and replays it "
        "(one launch a step; needs a constant learning rate)",
    )
    p.add_argument(
        "--channels-last",
        action="store_true",
        default=None,
        help="the learner's CNNs and batches in the channels-last (NHWC) layout, cuDNN's "
        "own for tensor-core convolutions (for a learner on a GPU; same values)",
    )
    p.add_argument(
        "--sticky-actions",
        type=float,
        default=None,
        metavar="P",
        help="Atari: keep the previous action at each emulator frame with probability P, "
        "in training and evaluation (default: ALE/*-v5's 0.25; 0: the deterministic "
        "emulator of the Nature DQN, Ape-X and EnvPool)",
    )
    p.add_argument(
        "--replay-capacity",
        type=int,
        default=None,
        help="transitions the replay holds (default: preset; at least 1,024, at most what "
        "the run's frames can fill)",
    )
    p.add_argument("--no-progress", action="store_true", help="no tqdm bar (logs only)")
    p.add_argument(
        "--trace",
        action="store_true",
        help="record actorrt's timeline in every process (actorrt.start(trace=True)) and "
        "write it to <logdir>/timeline.json at the end (open it in ui.perfetto.dev)",
    )
    p.add_argument(
        "--plan",
        nargs="?",
        const="table",
        choices=("table", "json"),
        default=None,
        help="start the cluster, print where the layout's slots went (a table, or 'json': "
        "the plan.json form) and exit without training",
    )
    recipe = p.parse_known_args(argv)[0].recipe
    if recipe is not None:
        flags = {a.dest for a in p._actions}
        unknown = sorted(set(RECIPES[recipe]) - flags)
        if unknown:  # a recipe naming a flag that does not exist would be silently ignored
            raise ValueError(f"recipe {recipe!r} names no flag {', '.join(unknown)}")
        p.set_defaults(**RECIPES[recipe])
    args = p.parse_args(argv)
    if args.collectors < 1:
        p.error("--collectors must be >= 1")
    if args.init_method and not args.world_size:
        p.error("--init-method needs --world-size (all processes, the driver included)")
    if args.init_method and args.num_workers is not None:
        p.error("--num-workers is for a local cluster; with --init-method use --world-size")
    if args.num_workers is not None and args.num_workers < 1:
        p.error("--num-workers must be >= 1")
    if args.learner_restarts < -1:
        p.error("--learner-restarts must be >= 0, or -1 for no limit")
    if args.eval_max_frames is not None and args.eval_max_frames < 0:
        p.error("--eval-max-frames must be >= 0 (0: no shared cap)")
    if args.n_step is not None and args.n_step < 1:
        p.error("--n-step must be >= 1 (1: one-step DQN)")
    if args.lr is not None and not args.lr > 0:
        p.error("--lr must be > 0")
    if args.target_update_every is not None and args.target_update_every < 1:
        p.error("--target-update-every must be >= 1 (gradient steps between two copies)")
    if args.train_seconds is not None and not args.train_seconds > 0:
        p.error("--train-seconds must be > 0 (leave it out for no time budget)")
    if args.world_size is not None and not args.init_method:
        p.error("--world-size is for a multi-node cluster: give --init-method too")
    if args.start_timeout is not None and not args.init_method:
        p.error("--start-timeout is for a multi-node cluster: give --init-method too")
    if args.start_timeout is not None and not args.start_timeout > 0:
        p.error("--start-timeout must be > 0 seconds")
    for flag, value, least, meaning in (
        ("--total-frames", args.total_frames, 1, ""),
        ("--envs-per-collector", args.envs_per_collector, 1, ""),
        ("--eval-every", args.eval_every, 0, " (0: only at the end)"),
        ("--eval-episodes", args.eval_episodes, 1, ""),
        ("--learner-threads", args.learner_threads, 1, ""),
        ("--learning-starts", args.learning_starts, 0, ""),
        ("--replay-capacity", args.replay_capacity, 1, ""),
        ("--collector-restarts", args.collector_restarts, -1, " (-1: no limit)"),
        ("--learner-gpus", args.learner_gpus, 0, ""),
        ("--collector-gpus", args.collector_gpus, 0, ""),
    ):
        if value is not None and value < least:
            p.error(f"{flag} must be >= {least}{meaning}")
    if args.env.startswith("ALE/"):
        try:  # an id ALE lacks fails here, not after the cluster started
            check_env_id(args.env)
        except Exception as exc:  # gymnasium's NameNotFound, VersionNotFound, ...
            p.error(f"--env {args.env}: {exc}")
    if args.backend == "ray":
        actorrt_only = {
            "--init-method": args.init_method,
            "--num-workers": args.num_workers,
            "--plan": args.plan,
            "--transport cuda": args.transport == "cuda" or None,
            "--cuda-device-map": args.cuda_device_map,
            "--local-cuda-devices": args.local_cuda_devices,
            "--trace": args.trace or None,
        }
        given = [flag for flag, value in actorrt_only.items() if value is not None]
        if given:
            p.error(
                f"{', '.join(given)}: only with --backend actorrt (Ray runs on one machine "
                "here, without a layout or device maps); drop them or use --backend actorrt"
            )
    try:  # the preset with these flags: a combination it refuses fails here, as a flag does
        build_config(args)
    except ValueError as exc:
        p.error(str(exc))
    return args


def build_config(args: argparse.Namespace) -> DQNConfig:
    """The env preset with the command-line overrides applied.

    The batch: ``--batch-size``, else the preset's ``gpu_batch_size`` when the learner
    gets a GPU (:func:`resolve_gpus`), else the preset's; a batch other than the preset's
    keeps its replay ratio (:func:`~examples.atari_dqn.config.with_batch_size`);
    ``--replay-ratio`` then sets the ratio at that batch
    (:func:`~examples.atari_dqn.config.with_replay_ratio`), ``--lr`` its learning rate,
    ``--target-update-every`` its target period and ``--max-replay-ratio`` the ratio
    the learner's spare steps may reach.

    Raises:
        ValueError: A batch size that cannot keep the replay ratio, or a bad override.
    """
    cfg = config_for_env(
        args.env,
        total_frames=args.total_frames,
        train_seconds=getattr(args, "train_seconds", None),
        seed=args.seed,
        num_envs_per_collector=args.envs_per_collector,
        eval_episodes=args.eval_episodes,
        learning_starts=args.learning_starts,
        replay_capacity=args.replay_capacity,
        n_step=getattr(args, "n_step", None),
        cuda_graph=getattr(args, "cuda_graph", None),
        priority_exponent=APEX_PRIORITY_EXPONENT if getattr(args, "prioritized", None) else None,
        exploration=getattr(args, "exploration", None),
        dueling=getattr(args, "dueling", None),
        sticky_actions=getattr(args, "sticky_actions", None),
        channels_last=getattr(args, "channels_last", None),
    )
    eval_max_frames = getattr(args, "eval_max_frames", None)
    if eval_max_frames is not None:
        cfg.eval_max_frames = eval_max_frames or None  # 0: no shared cap
    # Never reserve more ring than the run can fill: each agent step writes one record,
    # plus one per episode start (the slack).
    steps = math.ceil(cfg.total_frames / cfg.frame_skip)
    cfg.replay_capacity = max(1024, min(cfg.replay_capacity, int(steps * 1.1) + 1024))
    batch = getattr(args, "batch_size", None)
    if batch is None and cfg.gpu_batch_size:
        learner_gpus, _ = resolve_gpus(
            getattr(args, "transport", "cpu"),
            getattr(args, "learner_gpus", None),
            getattr(args, "collector_gpus", None),
        )
        if learner_gpus > 0:
            batch = cfg.gpu_batch_size
    if batch is not None:
        cfg = with_batch_size(cfg, batch)
    ratio = getattr(args, "replay_ratio", None)
    if ratio is not None:
        cfg = with_replay_ratio(cfg, ratio)
    lr = getattr(args, "lr", None)
    if lr is not None:
        cfg.lr = lr
    period = getattr(args, "target_update_every", None)
    if period is not None:
        cfg.target_update_every = period
    most = getattr(args, "max_replay_ratio", None)
    if most is not None:
        ratio_now = cfg.batch_size / cfg.train_every
        if most < ratio_now:
            raise ValueError(
                f"--max-replay-ratio {most:g} is below the run's replay ratio {ratio_now:g} "
                "(the floor): give one at least as high, or lower --replay-ratio"
            )
        cfg.max_replay_ratio = most
    return cfg


def recipe_line(name: str) -> str:
    """One line: the flags a recipe stands for (``config.RECIPES``)."""
    flags = []
    for key, value in RECIPES[name].items():
        flag = "--" + key.replace("_", "-")
        flags.append(flag if value is True else f"{flag} {value}")
    return f"recipe {name}: " + " ".join(flags) + " (flags given beside it win)"


def batch_line(cfg: DQNConfig) -> str:
    """One line: the batch, the replay ratio it keeps, the learning rate, the target period
    (and the spare steps' ratio, the n-step returns, prioritized replay, the dueling
    network, Ape-X exploration, the CUDA graph and the channels-last layout, when used)."""
    ratio = f"{cfg.batch_size / cfg.train_every:g} samples per transition"
    if cfg.max_replay_ratio is not None:
        ratio += f", up to {cfg.max_replay_ratio:g} with spare steps"
    parts = [
        f"batch {cfg.batch_size}: one gradient step per {cfg.train_every} transitions "
        f"({ratio}), lr {cfg.lr:.3g}, target copy every {cfg.target_update_every} steps"
    ]
    if cfg.n_step > 1:
        parts.append(f"{cfg.n_step}-step returns")
    if cfg.priority_exponent > 0:
        parts.append(
            f"prioritized replay (exponent {cfg.priority_exponent:g}, "
            f"importance weights {cfg.priority_weight:g})"
        )
    if cfg.dueling:
        parts.append("dueling network")
    if cfg.exploration == "ape-x":
        parts.append("Ape-X exploration (a fixed epsilon per env)")
    if cfg.cuda_graph:
        parts.append("steps as a CUDA graph on a GPU")
    if cfg.channels_last and cfg.atari:
        parts.append("channels-last CNNs")
    return ", ".join(parts)


def emulator_line(cfg: DQNConfig) -> str:
    """One line: the Atari emulator's settings that change what a score means."""
    sticky = (
        "no sticky actions (deterministic)"
        if cfg.sticky_actions == 0
        else f"sticky actions {cfg.sticky_actions:g}"
    )
    steps = f"{cfg.frame_skip} frames per step, up to {NOOP_MAX} no-op starts"
    return f"emulator {cfg.env_id}: {steps}, {sticky}"


def resolve_gpus(
    transport: str = "cpu",
    learner_gpus: float | None = None,
    collector_gpus: float | None = None,
) -> tuple[float, float]:
    """The GPUs of the learner and of each collector, defaults applied.

    Learner: 1 when this process sees CUDA or the transport is cuda, else 0. Collector:
    1 with the cuda transport, else 0. The layout's slots and the actors' ``num_gpus``
    both come from here, so an actor never asks more than its slot holds.
    """
    if learner_gpus is None:
        learner_gpus = 1.0 if (transport == "cuda" or torch.cuda.is_available()) else 0.0
    if collector_gpus is None:
        collector_gpus = 1.0 if transport == "cuda" else 0.0
    return float(learner_gpus), float(collector_gpus)


def fit_gpus(args: argparse.Namespace) -> GpuShares:
    """Shrinks the default GPU requests to shares that fit this machine's GPUs; prints them.

    On a local cluster (or Ray) with fewer GPUs than the learner and the collectors would
    take whole, the defaults become fractions (:func:`~examples.atari_dqn.gpus.share_gpus`)
    and ``args.learner_gpus`` / ``args.collector_gpus`` are set to them, so the layout
    and the actors ask the same. Values given on the command line are kept. With
    ``--init-method`` the GPUs are on other nodes, unknown here: nothing is changed.

    Returns:
        The shares chosen.
    """
    gpus = None if args.init_method else _local_gpu_count(args.local_cuda_devices)
    shares = share_gpus(
        gpus, args.collectors, args.transport, args.learner_gpus, args.collector_gpus
    )
    args.learner_gpus, args.collector_gpus = shares.learner, shares.collector
    if shares.note:
        print(shares.note, flush=True)
    return shares


def _local_gpu_count(local_cuda_devices: str | None) -> int:
    if local_cuda_devices:  # the processes of a local cluster see only these
        return len([d for d in local_cuda_devices.split(",") if d.strip()])
    return torch.cuda.device_count()


def build_layout(args: argparse.Namespace) -> dict[str, Any]:
    """``actorrt.start()``'s layout arguments: ``{"labels": ..., "talks": ...}``.

    One ``learner`` slot (a GPU when there is one) and ``--collectors`` ``collector``
    slots; only collectors and the learner exchange data, so device maps are planned for
    those pairs only. Strategy: actorrt's default, ``spread``.
    """
    learner_gpus, collector_gpus = resolve_gpus(
        args.transport, args.learner_gpus, args.collector_gpus
    )
    return {
        "labels": {
            "learner": {"count": 1, "num_gpus": learner_gpus},
            "collector": {"count": args.collectors, "num_gpus": collector_gpus},
        },
        "talks": [("collector", "learner")],
    }


def _start_cluster(args: argparse.Namespace) -> None:
    common: dict[str, Any] = {"transport": args.transport, **build_layout(args)}
    if getattr(args, "trace", False):
        common["trace"] = True
    if args.cuda_device_map:
        common["cuda_device_map"] = args.cuda_device_map
    if args.local_cuda_devices:
        common["local_cuda_devices"] = args.local_cuda_devices
    if args.init_method:
        if args.start_timeout is not None:
            common["timeout"] = args.start_timeout
        actorrt.start(init_method=args.init_method, rank=0, world_size=args.world_size, **common)
    else:
        if args.num_workers is not None:  # else one worker process per layout slot
            common["num_workers"] = args.num_workers
        actorrt.start(**common)


def _start(args: argparse.Namespace) -> None:
    """Starts the backend's runtime: the actorrt cluster, or a local Ray instance."""
    if args.backend == "actorrt":
        _start_cluster(args)
        return
    import ray

    # Ray's workers are fresh interpreters that import the example by name: the
    # repository root goes on their path (they inherit this environment).
    root = str(Path(__file__).resolve().parents[2])
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, configure_logging=False)


def _stop(args: argparse.Namespace) -> None:
    if args.backend == "actorrt":
        actorrt.shutdown()
    else:
        import ray

        ray.shutdown()


def _slot_holders(plan: dict[str, Any], label: str) -> list[str]:
    out = []
    for p in plan["processes"]:
        for slot in p["slots"]:
            if slot["label"] == label:
                gpus = ",".join(map(str, slot["gpus"]))
                out.append(f"{p['name']}@{p['node']}" + (f"[gpu {gpus}]" if gpus else ""))
    return out


def placement_line(plan: dict[str, Any]) -> str:
    """One line: which process (and node, GPU) holds each slot of the plan.

    ``placement (spread, transport cpu): learner=worker1@nodeB[gpu 0]
    collector=worker2@nodeC,worker3@nodeC`` (one line; the node is the plan's node id)
    """
    parts = [
        f"{spec['label']}={','.join(_slot_holders(plan, spec['label'])) or '-'}"
        for spec in plan["specs"]
    ]
    return f"placement ({plan['strategy']}, transport {plan['transport']}): " + " ".join(parts)


def _actors_line(infos: Sequence[Any]) -> str:
    """One line: where the actors actually run (``actorrt.actors()``)."""
    parts = [
        f"{a.label or a.class_name}={a.process}@{a.host}"
        + (f"[gpu {','.join(map(str, a.gpus))}]" if a.gpus else "")
        for a in infos
        if a.state != "DEAD"
    ]
    return "actors: " + " ".join(parts)


def write_plan(path: Path) -> dict[str, Any]:
    """Writes the live plan (``actorrt.plan()``, the ``actorrt plan --json`` form) to ``path``."""
    plan = actorrt.plan()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(plan, indent=1) + "\n")
    return plan


def show_plan(args: argparse.Namespace) -> int:
    """``--plan``: forms the cluster with the layout, prints its plan, shuts it down.

    The plan depends on the processes that join (hosts, GPUs), so it is read from a
    cluster that really formed: locally, the worker processes start and stop again
    (a few seconds, no actor and no environment is created); with ``--init-method``,
    the workers must be running, and they exit when the driver shuts down.
    """
    from actorrt.placement import Plan
    from actorrt.placement.render import placement_table, transport_matrix

    fit_gpus(args)
    _start_cluster(args)
    try:
        plan = actorrt.plan()
    finally:
        actorrt.shutdown()
    if args.plan == "json":
        print(json.dumps(plan, indent=1))
        return 0
    parsed = Plan.from_dict(plan)
    n = len(parsed.processes)
    print(f"{n} processes, transport={parsed.transport}, strategy={parsed.strategy}")
    print()
    print(placement_table(parsed))
    print()
    print(transport_matrix(parsed))
    print()
    print(placement_line(plan))
    return 0


def _learner_threads(threads: int | None, learner_gpus: float, num_collectors: int) -> int | None:
    """A CPU learner's torch threads: the cores the collectors leave, at least 1."""
    if threads is None and not learner_gpus:
        return max(1, (os.cpu_count() or 1) - num_collectors)
    return threads


def _learner_actor(
    rt: Backend,
    cfg_dict: dict[str, Any],
    transport: str,
    learner_gpus: float,
    learner_threads: int | None,
    num_collectors: int,
    label: str | None = "learner",
) -> Any:
    """Creates the learner actor (its constructor may still be running).

    It trains in a thread of its own (``background=True``), and runs calls side by side
    (:func:`~examples.atari_dqn.learner.learner_concurrency`): pushes do not wait behind
    gradient steps, and stats and weights requests do not wait behind pushes.
    """
    concurrency = learner_concurrency(num_collectors, DQNConfig.from_dict(cfg_dict))
    spec = ActorSpec(label=label, num_gpus=learner_gpus, max_concurrency=concurrency)
    # publish: each weight version is one object in the learner's process, which the
    # collectors fetch from there (the driver reads weights only to evaluate).
    return rt.actor(
        Learner,
        spec,
        cfg_dict,
        transport=transport,
        num_threads=learner_threads,
        publish=rt.name,
        background=True,
    )


def launch_actors(
    cfg: DQNConfig,
    num_collectors: int,
    *,
    transport: str = "cpu",
    learner_gpus: float | None = None,
    collector_gpus: float | None = None,
    learner_threads: int | None = None,
    frame_offset: int = 0,
    collector_restarts: int = 0,
    backend: str = "actorrt",
) -> tuple[Any, list[Any]]:
    """Creates the learner actor and ``num_collectors`` collector actors.

    The plain classes are made actors here (:mod:`examples.atari_dqn.backend`) rather
    than where they are defined, so tests and the in-process benchmark use them without
    a runtime, and the same classes run on actorrt and on Ray.

    Args:
        cfg: Configuration (sent to every actor as a dict).
        num_collectors: Collector actors to start.
        transport: ``"cpu"`` or ``"cuda"`` (see :class:`Learner`, :class:`Collector`).
        learner_gpus: GPUs for the learner (None: 1 when this process sees CUDA or the
            transport is cuda, else 0).
        collector_gpus: GPUs per collector (None: 1 with cuda transport, else 0).
        learner_threads: torch threads of a CPU learner (None: the cores the collectors
            leave, at least 1; oversubscribed torch threads are many times slower).
        frame_offset: Global frames already done (resume), for the epsilon schedule.
        collector_restarts: The collectors' ``max_restarts``.
        backend: ``"actorrt"`` (a cluster started with :func:`build_layout`'s layout) or
            ``"ray"`` (``ray.init`` done).

    Returns:
        ``(learner_handle, [collector_handles])``, ready (constructors have finished).
    """
    rt = make_backend(backend)
    learner_gpus, collector_gpus = resolve_gpus(transport, learner_gpus, collector_gpus)
    learner_threads = _learner_threads(learner_threads, learner_gpus, num_collectors)
    spec = ActorSpec(label="collector", num_gpus=collector_gpus, max_restarts=collector_restarts)
    cfg_dict = cfg.to_dict()
    learner = _learner_actor(rt, cfg_dict, transport, learner_gpus, learner_threads, num_collectors)
    collectors = [
        rt.actor(
            Collector,
            spec,
            cfg_dict,
            learner,
            i,
            num_collectors,
            transport=transport,
            frame_offset=frame_offset,
            backend=backend,
        )  # fmt: skip
        for i in range(num_collectors)
    ]
    # Constructors build envs and networks; surface their errors here, not mid-run.
    rt.get(learner.stats.remote(), CALL_TIMEOUT_S)
    rt.get([c.stats.remote() for c in collectors], CALL_TIMEOUT_S)
    return learner, collectors


def _replacement_learner(cfg: DQNConfig, args: argparse.Namespace) -> Any:
    """A new learner for ``--learner-restarts``, its constructor finished.

    It goes into a live ``learner`` slot when one is left, else (the learner's one slot
    died with its process) onto any live process that can host it, GPUs included. With
    ``--transport cuda`` that process may have no device map to the collectors'.
    """
    rt = make_backend(args.backend)
    learner_gpus, _ = resolve_gpus(args.transport, args.learner_gpus, args.collector_gpus)
    threads = _learner_threads(args.learner_threads, learner_gpus, args.collectors)
    cfg_dict = cfg.to_dict()
    try:
        learner = _learner_actor(
            rt, cfg_dict, args.transport, learner_gpus, threads, args.collectors
        )
    except actorrt.PlacementError:
        learner = _learner_actor(
            rt, cfg_dict, args.transport, learner_gpus, threads, args.collectors, None
        )
    rt.get(learner.stats.remote(), CALL_TIMEOUT_S)
    return learner


def _default_logdir(env_id: str) -> Path:
    name = env_id.replace("ALE/", "").replace("/", "_")
    return Path("runs") / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"


def train(args: argparse.Namespace) -> dict[str, Any]:
    """Runs a whole training job; returns a summary (also printed).

    With ``--learner-restarts``, a learner whose process died is recreated from the last
    checkpoint and the run goes on (:func:`~examples.atari_dqn.recovery.replace_learner`).

    Returns:
        ``frames``, ``seconds``, ``eval_returns``, ``eval_mean``, ``logdir``,
        ``checkpoint``, ``plan`` (the plan.json path; None on Ray), ``updates``,
        ``weight_refreshes`` (sum over collectors), ``learner_restarts``,
        ``eval_seconds`` (the final evaluation's wall time); with
        ``--trace``, ``timeline`` (the timeline.json path, None if it failed).
    """
    fit_gpus(args)  # first: the batch depends on where the learner goes
    cfg = build_config(args)
    print(batch_line(cfg), flush=True)
    if cfg.atari:
        print(emulator_line(cfg), flush=True)
    logdir = Path(args.logdir) if args.logdir else _default_logdir(cfg.env_id)
    ckpt_path = Path(args.checkpoint) if args.checkpoint else logdir / "checkpoint.pt"
    resume_state = None
    resume_path = None
    frame_offset = 0
    if args.resume is not None:
        resume_path = Path(args.resume) if args.resume else ckpt_path
        resume_state = load_checkpoint(resume_path, cfg.env_id)
        frame_offset = int(resume_state["frames"])
        print(f"resuming from {resume_path} at {frame_offset:,} frames")
    rt = make_backend(args.backend)
    evaluator = Evaluator(cfg, rt)
    t_start = time.monotonic()
    on_actorrt = args.backend == "actorrt"
    summary: dict[str, Any] = {
        "logdir": str(logdir),
        "checkpoint": str(ckpt_path),
        "plan": str(logdir / "plan.json") if on_actorrt else None,
    }

    _start(args)
    try:
        # After the start: a run that cannot start (a bad flag, no GPU) leaves no logdir.
        logger = MetricsLogger(logdir, resume=resume_state is not None)
        if on_actorrt:  # the plan this run runs with: where every slot (and actor) is
            plan = write_plan(logdir / "plan.json")
            print(placement_line(plan), flush=True)
        learner, collectors = launch_actors(
            cfg,
            args.collectors,
            transport=args.transport,
            learner_gpus=args.learner_gpus,
            collector_gpus=args.collector_gpus,
            learner_threads=args.learner_threads,
            frame_offset=frame_offset,
            collector_restarts=args.collector_restarts,
            backend=args.backend,
        )
        if on_actorrt:
            print(_actors_line(actorrt.actors()), flush=True)
        _write_collector_pids(logdir / "collectors.json", rt, collectors)
        if resume_state is not None:
            rt.get(learner.load_checkpoint_state.remote(resume_state["learner"]), CALL_TIMEOUT_S)
        remaining = max(0, cfg.total_frames - frame_offset)
        per_collector = math.ceil(remaining / args.collectors)
        crew = Crew(rt, learner, collectors, [], checkpoint=resume_path)
        if cfg.train_seconds is not None:
            crew.deadline = time.monotonic() + cfg.train_seconds
        crew.runs = [crew.start_run(c, per_collector) for c in collectors] if remaining else []
        record_learner(crew, CALL_TIMEOUT_S)
        _write_learner(logdir / "learner.json", crew)
        monitor = Monitor(args, cfg, logger, evaluator, ckpt_path, frame_offset, t_start)
        try:
            state, stats, eval_returns, restarts = _run(args, cfg, crew, monitor, logdir)
        finally:
            monitor.close()
        refreshes = rt.get([c.stats.remote() for c in collectors], CALL_TIMEOUT_S)
    finally:
        evaluator.close()
        if on_actorrt and getattr(args, "trace", False):  # what happened, even in a failed run
            summary["timeline"] = _write_timeline(logdir / "timeline.json")
        _stop(args)
    # The learner's count, which a run that restarts from a checkpoint keeps true (the
    # collectors' counts include frames the checkpoint lost).
    frames = stats["frames"]
    seconds = time.monotonic() - t_start
    eval_mean = float(np.mean(eval_returns))
    # The learner's figures after its drain (the monitor's last row came before it), so
    # the last row says what the summary line says.
    final = {k: stats.get(k) for k in ("updates", "loss_mean", "q_mean", "replay_size")}
    logger.log({"wall_s": seconds, "frames": frames, "eval_return": eval_mean, **final})
    logger.close()
    png = plot_learning_curve(
        logdir / "metrics.csv",
        logdir / "learning_curve.png",
        title=f"DQN on {cfg.env_id}",
        episodes=state["episodes"],
    )
    summary.update(
        frames=frames,
        seconds=seconds,
        updates=stats["updates"],
        eval_returns=eval_returns,
        eval_mean=eval_mean,
        weight_refreshes=sum(r["weight_refreshes"] for r in refreshes),
        learner_restarts=restarts,
        learning_curve=str(png),
        eval_seconds=evaluator.seconds[-1] if evaluator.seconds else math.nan,
    )
    print(
        f"final evaluation: env={cfg.env_id} episodes={len(eval_returns)} "
        f"mean_return={eval_mean:.2f} min={min(eval_returns):.1f} max={max(eval_returns):.1f} "
        f"frames={frames:,} updates={stats['updates']:,} wall={seconds:.0f}s "
        f"(final evaluation {summary['eval_seconds']:.1f}s) logdir={logdir}",
        flush=True,
    )
    return summary


def _run(
    args: argparse.Namespace, cfg: DQNConfig, crew: Crew, monitor: Monitor, logdir: Path
) -> tuple[dict[str, Any], dict[str, Any], list[float], int]:
    """Watches the collectors' runs to the end, then checkpoints and evaluates.

    A learner that dies on the way (its process: its calls fail, or a collector's run
    fails with it) is replaced from the last checkpoint, ``--learner-restarts`` times.
    Frames a restarted collector's new run left missing are collected by a last round.

    Returns:
        The learner's final checkpoint state and stats, the final evaluation's returns,
        and how many times the learner was restarted.

    Raises:
        Exception: What failed, when it is not the learner's death or no restart is left.
    """
    ckpt_path = monitor.ckpt_path
    restarts = 0
    lost = False
    while True:
        try:
            if lost:
                entry = replace_learner(
                    crew,
                    lambda: _replacement_learner(cfg, args),
                    cfg.env_id,
                    cfg.total_frames,
                    args.collector_restarts,
                    CALL_TIMEOUT_S,
                )
                _write_learner(logdir / "learner.json", crew)
                monitor.learner_replaced(crew)
                print(
                    f"learner restarted on {entry['process'] or 'a new process'} from "
                    f"{entry['checkpoint'] or 'scratch (no checkpoint yet)'}: "
                    f"frames={entry['frames']:,} updates={entry['updates']:,}",
                    flush=True,
                )
                lost = False
            monitor.watch(crew)
            if top_up(crew, cfg.total_frames, CALL_TIMEOUT_S):
                continue
            # The steps the last transitions paid for: the run keeps its replay ratio.
            crew.rt.get(crew.learner.drain.remote(0.9 * CALL_TIMEOUT_S), CALL_TIMEOUT_S)
            state = crew.rt.get(crew.learner.checkpoint_state.remote(), CALL_TIMEOUT_S)
            stats = crew.rt.get(crew.learner.stats.remote(), CALL_TIMEOUT_S)
            if crew.out_of_time() and stats["frames"] < cfg.total_frames:
                print(
                    f"--train-seconds {cfg.train_seconds:g}: collection and training stopped "
                    f"at the time budget, at {stats['frames']:,} of {cfg.total_frames:,} frames",
                    flush=True,
                )
            save_checkpoint(ckpt_path, state, stats["frames"], cfg.env_id)
            crew.checkpoint = ckpt_path
            return state, stats, monitor.evaluator(crew.learner, last=True), restarts
        except Exception as exc:
            lost = learner_death(crew, exc)
            if not lost or restarts == args.learner_restarts:
                raise
            restarts += 1
            limit = "unlimited" if args.learner_restarts < 0 else args.learner_restarts
            print(
                f"learner died ({exc}); restarting it from "
                f"{crew.checkpoint or 'scratch (no checkpoint yet)'} "
                f"(restart {restarts} of {limit})",
                flush=True,
            )


def _write_timeline(path: Path) -> str | None:
    """``--trace``: gathers every process's timeline into ``path``; its path, or None."""
    try:
        trace = actorrt.timeline(path)
    except Exception as exc:  # a timeline lost must not lose the run's results
        print(f"timeline not written: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        return None
    print(f"timeline: {path} ({len(trace['traceEvents']):,} events)", flush=True)
    try:
        print(timeline_report.report(trace), flush=True)  # where the time went
    except ValueError:  # no gradient step on it (a run stopped before training)
        pass
    return str(path)


def _write_learner(path: Path, crew: Crew) -> None:
    """``learner.json``: each learner instance's process, pid and what it started from."""
    path.write_text(json.dumps(crew.learners, indent=2))


def _write_collector_pids(path: Path, rt: Backend, collectors: list[Any]) -> None:
    """Where the collectors run (``collectors.json``: processes and pids), for operators."""
    stats = rt.get([c.stats.remote() for c in collectors], CALL_TIMEOUT_S)
    where = [
        {"process": rt.process(c), "pid": s["pid"]} for c, s in zip(collectors, stats, strict=True)
    ]
    path.write_text(json.dumps(where, indent=2))


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m examples.atari_dqn``; returns the exit status."""
    args = parse_args(argv)
    if args.recipe:
        print(recipe_line(args.recipe), flush=True)
    try:
        if args.plan:
            return show_plan(args)
        train(args)
    except KeyboardInterrupt:
        print("interrupted; cluster shut down", file=sys.stderr)
        return 130
    except (actorrt.PlacementError, actorrt.ClusterError, FileNotFoundError) as exc:
        # What the command line asked for cannot be had (GPUs, workers, a checkpoint): one
        # line naming it, as a bad flag gets, not a traceback.
        hint = next((h for kind, h in _HINTS.items() if isinstance(exc, kind)), "")
        print(f"python -m examples.atari_dqn: error: {exc}{hint}", file=sys.stderr)
        return 2
    return 0


_HINTS: dict[type[Exception], str] = {
    actorrt.PlacementError: " (the example's GPU flags: --learner-gpus, --collector-gpus; "
    "--transport cuda needs a GPU here)",
    actorrt.ClusterError: " (with --init-method, start the other processes with actorrt "
    "worker, and give them time with --start-timeout S: see examples/atari_dqn/README.md)",
}
