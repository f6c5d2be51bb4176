"""Environment construction: gymnasium's own Atari preprocessing, nothing hand-rolled.

Wrapper order for Atari (inner to outer)::

    ALE/<Game>-v5 (frameskip=1)        the raw emulator, one frame per step, sticky actions
                                       as DQNConfig.sticky_actions says (v5's own: 0.25)
    AtariPreprocessing                 noop reset (<=30), max-pool + skip 4, 84x84 grayscale
    RecordEpisodeStatistics            raw (unclipped) episode return and length in info
    ClipReward(-1, 1)                  what the learner trains on
    FrameStackObservation(4)           (4, 84, 84) uint8, padded with the reset frame

RecordEpisodeStatistics sits inside the clipping so reported returns are game scores
(Pong: -21..21), not sums of clipped rewards. The frame stack is outermost so that the
newest frame of each observation (``obs[-1]``) is exactly what the replay ring stores.
"""

from __future__ import annotations

import threading
from typing import Any

import gymnasium as gym
import numpy as np

from examples.atari_dqn.config import ALE_V5_STICKY_ACTIONS, DQNConfig, is_atari

__all__ = [
    "NOOP_MAX",
    "AleVectorPool",
    "EnvPool",
    "ale_game",
    "ale_vector_env",
    "make_env",
    "make_pool",
    "newest_frame",
    "obs_spec",
]

#: Most no-op actions at an Atari episode's start (the Nature DQN's random starts).
NOOP_MAX = 30

_ALE_REGISTERED = False
# Actors in one process are constructed on threads of their own. ale_py's package imports
# its vector_env submodule partway through its own import; a second thread's import of
# ale_py.vector_env then finds that submodule complete and does not wait for the package,
# so it used the half-made one ("partially initialized module 'ale_py' has no attribute
# 'ALEVectorInterface'"). The first import of each process, and the registration, happen
# under this lock.
_ALE_LOCK = threading.Lock()


def check_env_id(env_id: str) -> None:
    """Raises ``gymnasium.error.Error`` naming what is wrong if gymnasium has no ``env_id``.

    ALE ids are looked up once ale-py registered its games, so a typo fails before any
    actor is made.
    """
    if env_id.startswith("ALE/"):
        _register_ale()
    gym.spec(env_id)


def _register_ale() -> None:
    """Registers the ALE namespace once per process (ale-py ships the ROMs)."""
    global _ALE_REGISTERED
    with _ALE_LOCK:
        if not _ALE_REGISTERED:
            import ale_py

            gym.register_envs(ale_py)
            _ALE_REGISTERED = True


def make_env(
    env_id: str,
    seed: int | None = None,
    *,
    clip_rewards: bool = True,
    max_episode_steps: int | None = None,
    frame_stack: int = 4,
    sticky_actions: float = ALE_V5_STICKY_ACTIONS,
) -> gym.Env:
    """Builds one preprocessed environment.

    Args:
        env_id: ``ALE/*`` ids get the Atari stack described in the module docstring; other
            ids (CartPole...) get only episode statistics.
        seed: Seeds the action space here; pass it to the first ``reset`` as well.
        clip_rewards: Clip rewards to [-1, 1] (Atari only; evaluation turns it off).
        max_episode_steps: Optional cap in agent steps (truncation), e.g. for tests.
        frame_stack: Frames stacked by FrameStackObservation (Atari only).
        sticky_actions: ``repeat_action_probability`` of the emulator (Atari only;
            ``ALE/*-v5``'s default 0.25, 0: deterministic).

    Returns:
        The wrapped environment.
    """
    if is_atari(env_id):
        _register_ale()
        # frameskip=1: AtariPreprocessing does the skipping (with max-pooling of the last
        # two frames), and it refuses an env that already skips.
        env = gym.make(env_id, frameskip=1, repeat_action_probability=sticky_actions)
        env = gym.wrappers.AtariPreprocessing(
            env,
            noop_max=NOOP_MAX,
            frame_skip=4,
            screen_size=84,
            terminal_on_life_loss=False,
            grayscale_obs=True,
            scale_obs=False,  # keep uint8: 4x less memory and wire traffic than float
        )
        if max_episode_steps is not None:
            env = gym.wrappers.TimeLimit(env, max_episode_steps)
        env = gym.wrappers.RecordEpisodeStatistics(env)
        if clip_rewards:
            env = gym.wrappers.ClipReward(env, -1.0, 1.0)
        env = gym.wrappers.FrameStackObservation(env, frame_stack, padding_type="reset")
    else:
        env = gym.make(env_id, max_episode_steps=max_episode_steps)
        env = gym.wrappers.RecordEpisodeStatistics(env)
    if seed is not None:
        env.action_space.seed(seed)
    return env


def make_env_for(cfg: DQNConfig, seed: int | None = None, **kwargs: Any) -> gym.Env:
    """:func:`make_env` with the stacking and sticky actions taken from ``cfg``."""
    if cfg.atari:
        kwargs.setdefault("frame_stack", cfg.frame_stack)
        kwargs.setdefault("sticky_actions", cfg.sticky_actions)
    return make_env(cfg.env_id, seed, **kwargs)


def obs_spec(cfg: DQNConfig) -> tuple[tuple[int, ...], np.dtype, int]:
    """Observation shape, dtype and action count of ``cfg.env_id`` (builds one env)."""
    env = make_env_for(cfg)
    try:
        space = env.observation_space
        n_actions = int(env.action_space.n)  # DQN needs a Discrete action space
        return tuple(space.shape), np.dtype(space.dtype), n_actions
    finally:
        env.close()


def newest_frame(obs: np.ndarray, frame_stack: int) -> np.ndarray:
    """The part of an observation the replay ring stores: the newest frame of a stack."""
    return obs[-1] if frame_stack > 1 else obs


class EnvPool:
    """Several environments stepped in lockstep, with resets done here.

    A plain list rather than gymnasium's vector env: the collector must see every
    episode's last observation and the reset observation that follows it as two separate
    records (the replay ring stores both), which a list makes explicit.

    Attributes:
        envs: The environments.
        obs: Current observation of each env, shape ``(num_envs, *obs_shape)``.

    Args:
        cfg: Configuration (env id and stacking).
        num_envs: Environments to build.
        base_seed: Env ``j`` is seeded with ``base_seed + j``.
        envs: Use these environments instead of building them (tests).
    """

    def __init__(
        self, cfg: DQNConfig, num_envs: int, base_seed: int, envs: list[gym.Env] | None = None
    ) -> None:
        if envs is None:
            envs = [make_env_for(cfg, base_seed + j) for j in range(num_envs)]
        self.envs = envs
        self._seeds = [base_seed + j for j in range(len(envs))]
        first = [env.reset(seed=s)[0] for env, s in zip(self.envs, self._seeds, strict=True)]
        self.obs = np.stack(first)

    def __len__(self) -> int:
        return len(self.envs)

    @property
    def n_actions(self) -> int:
        """Actions of the (Discrete) action space."""
        return int(self.envs[0].action_space.n)

    def step(
        self, actions: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, list[dict]]:
        """Steps every env once; an env whose episode ended is reset.

        Args:
            actions: One action per env.

        Returns:
            ``(next_obs, rewards, terminated, truncated, reset_obs, infos)`` where
            ``next_obs[j]`` is the observation the step produced (the episode's last one if
            it ended), ``reset_obs[j]`` is the first observation of the next episode for
            envs that ended (and equals ``next_obs[j]`` otherwise), and ``self.obs`` has
            moved on to ``reset_obs``.
        """
        n = len(self.envs)
        next_obs = np.empty_like(self.obs)
        rewards = np.zeros(n, dtype=np.float32)
        terminated = np.zeros(n, dtype=bool)
        truncated = np.zeros(n, dtype=bool)
        infos: list[dict] = []
        reset_obs = np.empty_like(self.obs)
        for j, env in enumerate(self.envs):
            o, r, term, trunc, info = env.step(int(actions[j]))
            next_obs[j] = o
            rewards[j] = r
            terminated[j] = term
            truncated[j] = trunc
            infos.append(info)
            reset_obs[j] = env.reset()[0] if (term or trunc) else o
        self.obs = reset_obs.copy()
        return next_obs, rewards, terminated, truncated, reset_obs, infos

    def close(self) -> None:
        for env in self.envs:
            env.close()


def ale_game(env_id: str) -> str:
    """The ROM name of an ``ALE/<Game>-v5`` id: ``ALE/MsPacman-v5`` -> ``ms_pacman``."""
    game = env_id.removeprefix("ALE/").rsplit("-v", 1)[0]
    return "".join("_" + c.lower() if c.isupper() and i else c.lower() for i, c in enumerate(game))


def ale_vector_env(
    cfg: DQNConfig,
    num_envs: int,
    *,
    num_threads: int = 1,
    max_episode_steps: int | None = None,
    sticky_actions: float | None = None,
    noop_max: int = NOOP_MAX,
) -> Any:
    """ale-py's ``AtariVectorEnv`` with the collectors' settings (see :class:`AleVectorPool`;
    ``sticky_actions`` None: ``cfg.sticky_actions``).

    Also what ``benchmarks.dqn_throughput`` steps with random actions for the emulator's
    own rate, so both measure the same emulation.
    """
    with _ALE_LOCK:  # see _ALE_LOCK
        from ale_py.vector_env import AtariVectorEnv

    frames_cap = 108_000 if max_episode_steps is None else max_episode_steps * cfg.frame_skip
    return AtariVectorEnv(
        ale_game(cfg.env_id),
        num_envs,
        num_threads=num_threads,
        max_num_frames_per_episode=frames_cap,
        repeat_action_probability=(
            cfg.sticky_actions if sticky_actions is None else sticky_actions
        ),
        autoreset_mode="SameStep",  # the last frame comes in info["final_obs"]
        stack_num=1,
        frameskip=cfg.frame_skip,
        noop_max=noop_max,
        reward_clipping=False,
        use_fire_reset=False,
    )


class AleVectorPool:
    """The Atari pool on ale-py's ``AtariVectorEnv``: one C++ vector env, same records.

    The emulator steps, frame skip with max-pooling, no-op resets, grayscale and the
    84x84 resize run in ale-py's C++ (on ``num_threads`` threads) instead of one Python
    wrapper stack per env. The settings follow :func:`make_env`'s: the sticky actions of
    ``cfg`` (``ALE/*-v5``'s 0.25 by default), no fire on reset, no life-loss episodes,
    raw rewards (clipped here, after the raw score is added to the episode's return).
    Stacking is done here, one frame per step, with reset padding, as
    ``FrameStackObservation(padding_type="reset")`` does, so the policy sees the stacks the
    replay rebuilds.

    Same interface as :class:`EnvPool` (``obs``, ``n_actions``, ``step``, ``close``).

    Args:
        cfg: Configuration (an Atari env id; skip and stack).
        num_envs: Environments.
        base_seed: Env ``j`` is seeded with ``base_seed + j``.
        num_threads: ale-py's worker threads (1: one core per collector, as its policy
            has).
        max_episode_steps: Optional cap in agent steps (truncation), e.g. for tests.
        sticky_actions: ``repeat_action_probability`` (None: ``cfg.sticky_actions``; 0
            for tests that replay a game exactly).
        noop_max: Most no-op steps at a reset (0 for such tests).
    """

    def __init__(
        self,
        cfg: DQNConfig,
        num_envs: int,
        base_seed: int,
        *,
        num_threads: int = 1,
        max_episode_steps: int | None = None,
        sticky_actions: float | None = None,
        noop_max: int = NOOP_MAX,
    ) -> None:
        self._env = ale_vector_env(
            cfg,
            num_envs,
            num_threads=num_threads,
            max_episode_steps=max_episode_steps,
            sticky_actions=sticky_actions,
            noop_max=noop_max,
        )
        self._n = num_envs
        self._stack = cfg.frame_stack
        frames, _ = self._env.reset(seed=base_seed)
        self.obs = np.repeat(frames, self._stack, axis=1)
        self._returns = np.zeros(num_envs, dtype=np.float64)
        self._lengths = np.zeros(num_envs, dtype=np.int64)

    def __len__(self) -> int:
        return self._n

    @property
    def n_actions(self) -> int:
        """Actions of the minimal action set."""
        return int(self._env.single_action_space.n)

    def step(
        self, actions: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, list[dict]]:
        """Steps every env once; see :meth:`EnvPool.step` (same returns).

        Rewards come back clipped to [-1, 1]; the episode's ``info["episode"]`` return
        is the raw game score.
        """
        frames, rewards, terminated, truncated, info = self._env.step(
            np.asarray(actions, dtype=np.int64)
        )
        done = terminated | truncated
        newest = frames[:, 0]
        if done.any():  # the vector env already reset these; their last frame is here
            newest = np.where(done[:, None, None], info["final_obs"][:, 0], newest)
        next_obs = np.concatenate([self.obs[:, 1:], newest[:, None]], axis=1)
        self._returns += rewards
        self._lengths += 1
        infos: list[dict] = [{} for _ in range(self._n)]
        reset_obs = next_obs.copy()
        for j in np.flatnonzero(done):
            infos[j] = {"episode": {"r": self._returns[j], "l": int(self._lengths[j])}}
            self._returns[j] = 0.0
            self._lengths[j] = 0
            reset_obs[j] = frames[j, 0]  # a new episode's stack: its first frame, repeated
        self.obs = reset_obs.copy()
        clipped = np.clip(rewards, -1.0, 1.0).astype(np.float32)
        return next_obs, clipped, terminated, truncated, reset_obs, infos

    def close(self) -> None:
        self._env.close()


def make_pool(cfg: DQNConfig, num_envs: int, base_seed: int) -> EnvPool | AleVectorPool:
    """The collector's pool: ale-py's vector env for Atari when ``cfg.ale_vector_env``."""
    if cfg.atari and cfg.ale_vector_env:
        return AleVectorPool(cfg, num_envs, base_seed)
    return EnvPool(cfg, num_envs, base_seed)
