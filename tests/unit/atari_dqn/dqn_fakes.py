"""A fake environment whose frames encode their origin, for exact replay checks."""

from __future__ import annotations

import gymnasium as gym
import numpy as np


class CounterEnv(gym.Env):
    """An env whose 84x84 uint8 frames say exactly where they come from.

    Pixel [0, 0] = env id, [0, 1] = episode number (mod 256), [0, 2] = step in episode,
    [0, 3] = action that led to this frame, [0, 4] = 1 on a terminal frame. Episodes last
    1..max_len steps and end by termination or truncation at random. The reward of the
    step that produces frame t of episode e is ``(e + t) % 5 - 2``.
    """

    observation_space = gym.spaces.Box(0, 255, (84, 84), np.uint8)
    action_space = gym.spaces.Discrete(6)

    def __init__(self, env_id: int, seed: int, max_len: int = 9) -> None:
        self.env_id = env_id
        self.rng = np.random.default_rng(seed)
        self.max_len = max_len
        self.episode = -1
        self.t = 0
        self.length = 0
        self.terminates = False

    def _frame(self, action: int, terminal: bool) -> np.ndarray:
        f = np.zeros((84, 84), np.uint8)
        f[0, :5] = (self.env_id, self.episode % 256, self.t, action, int(terminal))
        return f

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.episode += 1
        self.t = 0
        self.length = int(self.rng.integers(1, self.max_len + 1))
        self.terminates = bool(self.rng.integers(0, 2))
        return self._frame(0, False), {}

    def step(self, action):
        self.t += 1
        end = self.t >= self.length
        term = end and self.terminates
        trunc = end and not self.terminates
        reward = float((self.episode + self.t) % 5 - 2)
        info = {"episode": {"r": 1.0, "l": self.t}} if end else {}
        return self._frame(int(action), term), reward, term, trunc, info


def counter_stack(env_id: int, episode: int, t: int, stack: int = 4) -> np.ndarray:
    """Ground truth: the (stack, 84, 84) observation FrameStackObservation shows at step t.

    Only pixels [0, :3] are compared (actions and terminal flags are checked separately).
    """
    ts = [max(0, t - k) for k in range(stack - 1, -1, -1)]  # reset padding repeats frame 0
    out = np.zeros((stack, 3), np.int64)
    for i, ti in enumerate(ts):
        out[i] = (env_id, episode % 256, ti)
    return out


def make_counter_envs(n: int, seed: int = 0, max_len: int = 9, stack: int = 4) -> list[gym.Env]:
    return [
        gym.wrappers.FrameStackObservation(CounterEnv(j, seed + j, max_len), stack)
        for j in range(n)
    ]
