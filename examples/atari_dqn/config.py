"""Hyperparameters: one small preset per environment family, plus overrides.

Atari values follow the Nature DQN paper (Mnih et al. 2015) and Dopamine, with the replay
size and schedules shortened so that the default run fits a laptop. The classic-control
values (CartPole) started from the rl-baselines3-zoo DQN preset and were tuned here
(lower gamma, learning-rate annealing) until the greedy policy stopped oscillating.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

__all__ = [
    "ALE_V5_STICKY_ACTIONS",
    "APEX_PRIORITY_EXPONENT",
    "EXPLORATIONS",
    "RECIPES",
    "DQNConfig",
    "config_for_env",
    "is_atari",
    "with_batch_size",
    "with_replay_ratio",
]

#: The priority exponent of Ape-X's (and Rainbow's) prioritized replay, which
#: ``--prioritized`` turns on (with :attr:`DQNConfig.priority_weight`'s 0.4).
APEX_PRIORITY_EXPONENT = 0.6
#: ``ALE/*-v5``'s own ``repeat_action_probability`` (Machado et al. 2018), the
#: preset's :attr:`DQNConfig.sticky_actions`.
ALE_V5_STICKY_ACTIONS = 0.25
#: What :attr:`DQNConfig.exploration` may name (examples/atari_dqn/exploration.py).
EXPLORATIONS = ("linear", "ape-x")

#: Named runs: the command-line defaults ``python -m examples.atari_dqn --recipe NAME``
#: takes (flags given beside it still win). Keys are the flags' names, dashes as
#: underscores; the hyperparameters they do not name are the env preset's below.
RECIPES: dict[str, dict[str, Any]] = {
    # Issue 24: Pong on one H100/H200 with 16 cores, within 10 minutes of wall time.
    "pong-10min": {
        "env": "ALE/Pong-v5",
        "collectors": 12,  # 48 emulators on 16 cores, beside the learner and the driver
        "transport": "cpu",  # the collectors act on the CPU: the learner has the GPU alone
        "total_frames": 100_000_000,  # more than 10 minutes hold: the time bound ends it
        "train_seconds": 508,  # start-up and the final evaluation fit the rest
        "replay_capacity": 1_000_000,
        # the Nature DQN's replay start size (the preset's 2,000 suits a short demo): with
        # spare steps up to 32 samples per transition, starting on the first 2,000 would
        # fit the network to them, which can slow all later learning (the primacy bias,
        # Nikishin et al. 2022); about 7 s of collection at 30,000 frames/s
        "learning_starts": 50_000,
        "eval_every": 500_000,
        "eval_episodes": 8,
        "eval_max_frames": 0,  # each evaluation game to its end
        "cuda_graph": True,
        # the learner steps whenever it has time, up to 32 samples per transition; the
        # collectors never wait below the preset's 8
        "max_replay_ratio": 32.0,
        # no sticky actions: the deterministic ALE (with up to 30 no-op starts) that the
        # Nature DQN, Ape-X, CleanRL's PongNoFrameskip-v4, EnvPool's Pong-v5 and RLlib's
        # Pong benchmarks learn and score on; ALE/Pong-v5's own 0.25 (Machado et al.
        # 2018) is the preset's, and `--sticky-actions 0.25` restores it
        "sticky_actions": 0.0,
    },
}


@dataclasses.dataclass
class DQNConfig:
    """Everything the learner, the collectors and the driver need to agree on.

    A plain dataclass of numbers and strings, so it pickles into actor constructors and
    into checkpoints unchanged.

    Attributes:
        env_id: Gymnasium environment id (``"ALE/Pong-v5"``, ``"CartPole-v1"``...).
        atari: Whether the Atari preprocessing and the Nature CNN are used.
        frame_skip: Emulator frames per agent step (4 on Atari, 1 elsewhere); frame budgets
            count emulator frames, as the Atari literature does.
        frame_stack: Observations stacked into one network input (4 on Atari, 1 elsewhere).
        total_frames: Emulator frames to collect, summed over all collectors.
        train_seconds: Wall-clock seconds of collection and training, from the start of
            the collectors' runs; the final evaluation follows, whichever of this and
            ``total_frames`` comes first (None: ``total_frames`` alone). Makes a recipe
            "so many minutes on this machine" whatever the machine's pace.
        num_envs_per_collector: Environments each collector steps in lockstep.
        steps_per_push: Vector steps a collector batches into one push to the learner.
        max_in_flight: Pushes a collector may have outstanding before it waits (backpressure).
        weight_refresh_every: Vector steps between two weight requests by a collector.
        replay_capacity: Frames held by the replay ring (one frame per agent step).
        batch_size: Transitions per gradient step.
        gpu_batch_size: The batch a learner on a GPU trains on by default, the replay ratio
            kept (:func:`with_batch_size`); None: ``batch_size`` everywhere. 8 samples
            per transition at 15,000 frames/s are 30,000 samples/s: 940 steps/s at 32,
            each paying the step's fixed cost (Python, kernel launches), or 59 steps/s
            at 512 (Ape-X's learner batch).
        learning_starts: Transitions in replay before the first gradient step.
        train_every: Transitions received per gradient step (sets the replay ratio:
            ``batch_size / train_every`` samples per transition, independent of speed).
        max_replay_ratio: None: the learner makes exactly one step per ``train_every``
            transitions. A ratio (samples per transition, at least the replay ratio):
            the learner's training thread also steps while it owes nothing, until its
            steps reach this ratio, so a learner faster than the collectors spends its
            spare time learning instead of waiting, and collectors faster than it still
            wait for the replay ratio (the floor). Ape-X's learner runs free; this
            bounds it. Only for a learner that trains in its own thread (the actor).
        target_update_every: Gradient steps between two hard target-network copies.
        max_train_lag: Transitions the learner's training thread may trail the data by
            before pushes wait for it (the backpressure that keeps the replay ratio; see
            :class:`~examples.atari_dqn.learner.Learner`).
        gamma: Discount factor.
        n_step: Steps each sampled transition spans at most (n-step returns, as Ape-X
            and Rainbow use; 1: plain one-step DQN). A sample stops early at a terminal
            frame or at the newest frame of its stream, and bootstraps with ``gamma``
            to the power of the steps it took (:meth:`FrameReplay.sample`).
        priority_exponent: 0: the replay is sampled uniformly. Above 0: prioritized
            replay (Schaul et al. 2016), each transition drawn in proportion to its
            latest absolute TD error to this power (Ape-X and Rainbow: 0.6), new ones at
            the highest error seen (:class:`~examples.atari_dqn.replay.FrameReplay`).
        priority_weight: Importance-sampling exponent of prioritized samples (Ape-X: 0.4,
            constant, which a CUDA-graph step needs).
        lr: Adam learning rate.
        lr_final_fraction: Learning rate at ``total_frames`` as a fraction of ``lr``; it
            decays linearly in between (1.0: constant). Annealing lets a small problem
            such as CartPole settle instead of oscillating at the end of the budget.
        adam_eps: Adam epsilon (1.5e-4 for Atari as in Dopamine's Rainbow/DQN-Adam).
        max_grad_norm: Global gradient-norm clip (None: no clipping).
        hidden_sizes: MLP hidden layers (non-Atari envs).
        dueling: The Q-network ends in a dueling head, a value and an advantage stream
            (:class:`~examples.atari_dqn.networks.DuelingHead`); False: one linear head.
        exploration: ``"linear"``: one epsilon for every environment, from ``eps_start``
            to ``eps_end`` over ``eps_decay_frames``. ``"ape-x"``: a fixed epsilon per
            environment, 0.4 down to 0.4 ** 8 across the run's environments
            (:func:`~examples.atari_dqn.exploration.apex_epsilons`); the ``eps_*``
            fields are then unused.
        eps_start: Exploration epsilon at frame 0.
        eps_end: Exploration epsilon after ``eps_decay_frames``.
        eps_decay_frames: Frames over which epsilon decays linearly.
        eval_episodes: Episodes of the final (and periodic) evaluation.
        eval_epsilon: Epsilon used during evaluation.
        eval_max_steps: Agent-step cap of one evaluation episode (None: the env's own limit).
        eval_max_frames: Emulator-frame cap of one whole evaluation, shared equally by its
            episodes, which run side by side (None: only ``eval_max_steps``). An episode
            cut by either cap counts with the score it reached.
        seed: Base seed; collector ``i`` env ``j`` uses ``seed + 1000 * (i + 1) + j``.
        sticky_actions: Atari's ``repeat_action_probability``: at each emulator frame the
            previous action is kept with this probability (Machado et al. 2018). 0.25 is
            ``ALE/*-v5``'s default; 0 is the deterministic emulator of the Nature DQN,
            Ape-X and EnvPool's defaults. Training and evaluation use the same.
        ale_vector_env: Atari collectors step ale-py's ``AtariVectorEnv`` (C++
            preprocessing) instead of a list of gymnasium envs with Python wrappers
            (``envs.AleVectorPool`` vs ``envs.EnvPool``; see docs/performance.md).
        cuda_graph: A learner on a GPU captures its gradient step as a CUDA graph and
            replays it (:class:`~examples.atari_dqn.graphed.GraphedStep`): one launch a
            step instead of about a hundred. Needs a constant learning rate
            (``lr_final_fraction`` 1.0); no effect on a learner on the CPU.
        channels_last: The learner keeps its Nature CNNs and their input batches in the
            channels-last (NHWC) memory layout, the one cuDNN's tensor-core convolutions
            work in, instead of NCHW. Meant for a learner on a GPU (whether it is faster
            there is for a GPU run to measure: ``benchmarks.dqn_learner
            --channels-last``); the values are the same. The weights it serves are
            plain NCHW tensors, so collectors are unaffected. No effect off Atari.
    """

    env_id: str = "ALE/Pong-v5"
    atari: bool = True
    frame_skip: int = 4
    frame_stack: int = 4
    total_frames: int = 40_000
    train_seconds: float | None = None
    num_envs_per_collector: int = 4
    steps_per_push: int = 16
    max_in_flight: int = 4
    weight_refresh_every: int = 64
    replay_capacity: int = 200_000
    batch_size: int = 32
    gpu_batch_size: int | None = 512
    learning_starts: int = 2_000
    train_every: int = 4
    max_replay_ratio: float | None = None
    target_update_every: int = 1_000
    max_train_lag: int = 1_024
    gamma: float = 0.99
    n_step: int = 1
    priority_exponent: float = 0.0
    priority_weight: float = 0.4
    lr: float = 1e-4
    lr_final_fraction: float = 1.0
    adam_eps: float = 1.5e-4
    max_grad_norm: float | None = 10.0
    hidden_sizes: tuple[int, ...] = (256, 256)
    dueling: bool = False
    exploration: str = "linear"
    eps_start: float = 1.0
    eps_end: float = 0.01
    eps_decay_frames: int = 1_000_000
    eval_episodes: int = 2
    eval_epsilon: float = 0.05
    eval_max_steps: int | None = 27_000
    eval_max_frames: int | None = 50_000
    seed: int = 0
    sticky_actions: float = ALE_V5_STICKY_ACTIONS
    ale_vector_env: bool = True
    cuda_graph: bool = False
    channels_last: bool = False

    def to_dict(self) -> dict[str, Any]:
        """Plain dict (for checkpoints and logs)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DQNConfig:
        """Inverse of :meth:`to_dict`; unknown keys (from newer versions) are ignored."""
        names = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in names}
        if "hidden_sizes" in kwargs:
            kwargs["hidden_sizes"] = tuple(kwargs["hidden_sizes"])
        return cls(**kwargs)


def is_atari(env_id: str) -> bool:
    """True for ALE ids (``ALE/Pong-v5``, ``PongNoFrameskip-v4``-style names are not used)."""
    return env_id.startswith("ALE/")


# Per-family presets. Only the differences from the DQNConfig defaults (the Atari preset)
# are listed, so each family reads as "Atari, except ...".
_CLASSIC_CONTROL: dict[str, Any] = {
    "atari": False,
    "frame_skip": 1,
    "frame_stack": 1,
    "total_frames": 80_000,
    "num_envs_per_collector": 4,
    "steps_per_push": 8,
    "weight_refresh_every": 16,
    "replay_capacity": 100_000,
    "batch_size": 128,
    "gpu_batch_size": None,  # an MLP this small trains as fast on the CPU
    "learning_starts": 1_000,
    # One gradient step per 2 transitions at batch 128: 64 samples per transition.
    "train_every": 2,
    "target_update_every": 200,
    # A push returns once the steps it paid for are done, as when the learner trained
    # inside push: the data as fresh as the policy CartPole was tuned with.
    "max_train_lag": 0,
    # gamma 0.98 keeps Q-values (~50) and their errors small; with 0.99 and a constant
    # learning rate the greedy policy kept oscillating between 100 and 500 steps.
    "gamma": 0.98,
    "lr": 1e-3,
    "lr_final_fraction": 0.1,
    "adam_eps": 1e-8,
    "hidden_sizes": (128, 128),
    "eps_end": 0.04,
    "eps_decay_frames": 16_000,
    "eval_episodes": 20,
    "eval_epsilon": 0.0,
    "eval_max_steps": None,  # keep CartPole-v1's own 500-step limit
    "eval_max_frames": None,  # 20 episodes of at most 500 steps: bounded already
}

_PRESETS: dict[str, dict[str, Any]] = {
    "CartPole-v1": _CLASSIC_CONTROL,
    "CartPole-v0": _CLASSIC_CONTROL,
    "Acrobot-v1": _CLASSIC_CONTROL,
    "MountainCar-v0": _CLASSIC_CONTROL,
}


def config_for_env(env_id: str, **overrides: Any) -> DQNConfig:
    """Returns the preset for ``env_id`` with ``overrides`` applied (None values skipped).

    Args:
        env_id: Gymnasium id. ``ALE/*`` ids get the Atari preset; ids listed in the
            classic-control table get the MLP preset; anything else is an error.
        **overrides: DQNConfig fields to change; a value of None keeps the preset's value,
            so argparse defaults of None can be passed straight through.

    Raises:
        ValueError: For an unknown env family, an unknown field name or a bad value.
    """
    if is_atari(env_id):
        preset: dict[str, Any] = {}
    elif env_id in _PRESETS:
        preset = dict(_PRESETS[env_id])
    else:
        known = ", ".join(sorted(_PRESETS))
        raise ValueError(
            f"no DQN preset for env {env_id!r}: use an Atari id such as 'ALE/Pong-v5' or one "
            f"of {known} (or add a preset to examples/atari_dqn/config.py)."
        )
    names = {f.name for f in dataclasses.fields(DQNConfig)}
    unknown = sorted(set(overrides) - names)
    if unknown:
        raise ValueError(f"unknown DQNConfig field(s): {', '.join(unknown)}")
    preset.update({k: v for k, v in overrides.items() if v is not None})
    preset["env_id"] = env_id
    seconds = preset.get("train_seconds")
    if seconds is not None and not float(seconds) > 0:
        raise ValueError(f"train_seconds={seconds} must be > 0 (or None: no time budget)")
    if int(preset.get("n_step", 1)) < 1:
        raise ValueError(f"n_step={preset['n_step']} must be >= 1 (1: one-step DQN)")
    if not float(preset.get("priority_exponent", 0.0)) >= 0:
        raise ValueError(
            f"priority_exponent={preset['priority_exponent']} must be >= 0 (0: uniform replay)"
        )
    most = preset.get("max_replay_ratio")
    if most is not None and not float(most) > 0:
        raise ValueError(f"max_replay_ratio={most} must be > 0 (or None: no spare steps)")
    if preset.get("exploration", "linear") not in EXPLORATIONS:
        raise ValueError(
            f"exploration={preset['exploration']!r} must be one of {', '.join(EXPLORATIONS)}"
        )
    if not 0 <= float(preset.get("priority_weight", 0.4)) <= 1:
        raise ValueError(f"priority_weight={preset['priority_weight']} must be in [0, 1]")
    if not 0 <= float(preset.get("sticky_actions", ALE_V5_STICKY_ACTIONS)) < 1:
        raise ValueError(
            f"sticky_actions={preset['sticky_actions']} must be in [0, 1) "
            f"(0: deterministic emulator; ALE/*-v5's default: {ALE_V5_STICKY_ACTIONS})"
        )
    if preset.get("cuda_graph") and float(preset.get("lr_final_fraction", 1.0)) != 1.0:
        raise ValueError(
            "cuda_graph needs a constant learning rate (a captured step keeps the one it "
            "was captured with), and this preset decays it (lr_final_fraction="
            f"{preset['lr_final_fraction']} in examples/atari_dqn/config.py): leave "
            "--cuda-graph off, or set lr_final_fraction=1.0 there"
        )
    return DQNConfig(**preset)


def with_batch_size(cfg: DQNConfig, batch_size: int) -> DQNConfig:
    """``cfg`` with another batch size, at the same replay ratio and target drift.

    A batch ``k`` times larger: one gradient step per ``k * train_every`` transitions (the
    same samples per transition), a learning rate ``sqrt(k)`` times larger (the
    square-root scaling usual for Adam; at ``k = 16``, 1e-4 becomes 4e-4), and a target
    copy every ``target_update_every / sqrt(k)`` steps, so that the learning rate times
    the steps between copies, how far the online network may move away from its target,
    stays the preset's (at ``k = 16``, 1,000 steps become 250). Dividing the period by
    ``k`` instead (the same transitions between copies: 62 steps at 512, the rule until
    2026-11-27) let the online network move only a quarter as far from its target
    between copies as the preset's does, nearer to having no target network (though
    CleanRL's Pong DQN has that figure and learns Pong). How well a given game learns
    with either is for a run to show (examples/atari_dqn/README.md).

    Args:
        cfg: The configuration to start from (not changed).
        batch_size: The new batch size.

    Raises:
        ValueError: When ``batch_size * train_every`` is not a multiple of the old batch
            size (the replay ratio could not be kept exactly); the message says which
            sizes work.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size={batch_size} must be >= 1")
    if batch_size == cfg.batch_size:
        return dataclasses.replace(cfg)
    every, rest = divmod(batch_size * cfg.train_every, cfg.batch_size)
    if rest or every < 1:
        step = cfg.batch_size // math.gcd(cfg.batch_size, cfg.train_every)
        raise ValueError(
            f"batch_size={batch_size} cannot keep the replay ratio of {cfg.batch_size} "
            f"samples per {cfg.train_every} transitions: use a multiple of {step}"
        )
    scale = batch_size / cfg.batch_size
    return dataclasses.replace(
        cfg,
        batch_size=batch_size,
        train_every=every,
        target_update_every=max(1, round(cfg.target_update_every / math.sqrt(scale))),
        lr=cfg.lr * math.sqrt(scale),
    )


def with_replay_ratio(cfg: DQNConfig, ratio: float) -> DQNConfig:
    """``cfg`` training on each transition ``ratio`` times on average, at the same batch.

    The replay ratio is ``batch_size / train_every`` samples per transition (8 in the
    Atari preset, as the Nature DQN's batch of 32 every 4 agent steps). A higher one makes
    more gradient steps per frame: where the collectors, not the learner, set the pace
    (a CUDA-graph learner on a GPU), the learner's spare steps go to learning instead of
    waiting. The target period stays in gradient steps, as the literature counts it.

    Raises:
        ValueError: When ``batch_size / ratio`` is not a whole number of transitions of at
            least 1; the message says which ratios work at this batch.
    """
    if not ratio > 0:
        raise ValueError(f"replay ratio {ratio} must be > 0 (samples per transition)")
    every = cfg.batch_size / ratio
    if every < 1 or every != int(every):
        fits = [r for r in range(1, 65) if cfg.batch_size % r == 0]  # the usual ratios
        raise ValueError(
            f"replay ratio {ratio:g} at batch {cfg.batch_size} is not a whole number of "
            f"transitions per gradient step: use one that divides the batch, e.g. "
            f"{', '.join(map(str, fits))}"
        )
    return dataclasses.replace(cfg, train_every=int(every))
