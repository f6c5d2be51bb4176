"""A DQN-shaped pipeline: collectors push frame batches to one learner that trains.

Synthetic (the example in ``examples/atari_dqn`` is still changing): each collector
cycles through pre-generated random uint8 84x84x4 frame batches (no emulator cost, so
the figure is about moving frames and running the learner), pushes them to the learner
with at most ``MAX_IN_FLIGHT`` pushes outstanding, and every ``WEIGHTS_EVERY`` pushes
asks for the latest weights. The learner copies each batch into a replay ring and runs
``UPDATES_PER_PUSH`` Q-network updates (Nature-DQN-sized CNN, batch 32, one thread).
The same classes run as actorrt actors and as Ray actors; only the wrapper differs.
"""

from __future__ import annotations

import time
from typing import Any

import torch
from torch import nn

BATCH_FRAMES = 64  # frames per push (4x84x84 uint8 each: 1.7 MB per push)
MAX_IN_FLIGHT = 2
WEIGHTS_EVERY = 8
UPDATES_PER_PUSH = 1
REPLAY = 4096
NUM_COLLECTORS = 2


def _net() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(4, 32, 8, 4),
        nn.ReLU(),
        nn.Conv2d(32, 64, 4, 2),
        nn.ReLU(),
        nn.Conv2d(64, 64, 3, 1),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(64 * 7 * 7, 512),
        nn.ReLU(),
        nn.Linear(512, 6),
    )


class Learner:
    def __init__(self, as_numpy: bool) -> None:
        torch.set_num_threads(1)
        torch.manual_seed(0)
        self.as_numpy = as_numpy
        self.net = _net()
        self.target = _net()
        self.opt = torch.optim.Adam(self.net.parameters(), lr=1e-4)
        self.frames = torch.zeros(REPLAY, 4, 84, 84, dtype=torch.uint8)
        self.actions = torch.zeros(REPLAY, dtype=torch.int64)
        self.rewards = torch.zeros(REPLAY)
        self.pos = 0
        self.size = 0
        self.updates = 0
        self.received = 0

    def push(self, frames: Any, actions: Any, rewards: Any) -> int:
        if self.as_numpy:
            frames, actions, rewards = map(torch.from_numpy, (frames, actions, rewards))
        n = frames.shape[0]
        idx = (torch.arange(n) + self.pos) % REPLAY
        self.frames[idx] = frames
        self.actions[idx] = actions
        self.rewards[idx] = rewards
        self.pos = (self.pos + n) % REPLAY
        self.size = min(REPLAY, self.size + n)
        self.received += n
        for _ in range(UPDATES_PER_PUSH):
            self._update()
        return self.updates

    def _update(self) -> None:
        i = torch.randint(0, self.size, (32,))
        obs = self.frames[i].float().div_(255)
        q = self.net(obs).gather(1, self.actions[i].unsqueeze(1)).squeeze(1)
        with torch.no_grad():
            target = self.rewards[i] + 0.99 * self.target(obs).max(1).values
        loss = nn.functional.smooth_l1_loss(q, target)
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        self.updates += 1

    def weights(self) -> Any:
        sd = {k: v.detach().clone() for k, v in self.net.state_dict().items()}
        return {k: v.numpy() for k, v in sd.items()} if self.as_numpy else sd

    def stats(self) -> dict:
        return {"updates": self.updates, "frames": self.received}


class Collector:
    """``get`` / ``wait`` are the system's own (actorrt.get/wait or ray.get/wait)."""

    def __init__(self, seed: int, as_numpy: bool, system: str) -> None:
        torch.set_num_threads(1)
        g = torch.Generator().manual_seed(seed)
        pool = [
            torch.randint(0, 256, (BATCH_FRAMES, 4, 84, 84), dtype=torch.uint8, generator=g)
            for _ in range(4)
        ]
        self.pool = [p.numpy() for p in pool] if as_numpy else pool
        self.actions = torch.randint(0, 6, (BATCH_FRAMES,), generator=g)
        self.rewards = torch.randn(BATCH_FRAMES, generator=g)
        if as_numpy:
            self.actions, self.rewards = self.actions.numpy(), self.rewards.numpy()
        self.net = _net()
        self.system = system

    def _sys(self) -> tuple:
        if self.system == "ray":
            import ray

            return ray.get, lambda refs: ray.wait(refs, num_returns=1)
        import actorrt

        return (
            lambda r: actorrt.get(r, timeout=120),
            lambda refs: actorrt.wait(refs, num_returns=1, timeout=120),
        )

    def run(self, learner: Any, seconds: float) -> dict:
        get, wait = self._sys()
        pending: list = []
        weights_ref = None
        frames = pushes = 0
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            if len(pending) >= MAX_IN_FLIGHT:
                _, pending = wait(pending)
            batch = self.pool[pushes % len(self.pool)]
            pending.append(learner.push.remote(batch, self.actions, self.rewards))
            pushes += 1
            frames += BATCH_FRAMES
            if pushes % WEIGHTS_EVERY == 0:
                if weights_ref is not None:
                    sd = get(weights_ref)
                    self.net.load_state_dict(
                        {k: torch.as_tensor(v) for k, v in sd.items()}, strict=True
                    )
                weights_ref = learner.weights.remote()
        for ref in pending:
            get(ref)
        return {"frames": frames, "seconds": time.perf_counter() - t0}

    def ping(self) -> None:
        return None


def run(system: str, cfg: dict) -> dict:
    seconds = cfg["dqn_seconds"]
    as_numpy = system == "ray"
    if system == "ray":
        import ray

        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        try:
            L = ray.remote(num_cpus=0)(Learner)
            C = ray.remote(num_cpus=0)(Collector)
            return _pipeline(L, C, ray.get, as_numpy, system, seconds)
        finally:
            ray.shutdown()
    import actorrt

    with actorrt.start(num_workers=NUM_COLLECTORS + 1):
        L = actorrt.actor(Learner)
        C = actorrt.actor(Collector)
        return _pipeline(L, C, lambda r: actorrt.get(r, timeout=300), as_numpy, system, seconds)


def _pipeline(L, C, get, as_numpy: bool, system: str, seconds: float) -> dict:  # noqa: N803
    learner = L.remote(as_numpy)
    collectors = [C.remote(i, as_numpy, system) for i in range(NUM_COLLECTORS)]
    get([c.ping.remote() for c in collectors])
    get([c.run.remote(learner, 1.0) for c in collectors])  # warm-up
    before = get(learner.stats.remote())
    t0 = time.perf_counter()
    results = get([c.run.remote(learner, seconds) for c in collectors])
    wall = time.perf_counter() - t0
    after = get(learner.stats.remote())
    frames = sum(r["frames"] for r in results)
    return {
        "dqn": {
            "frames_per_s": frames / wall,
            "updates_per_s": (after["updates"] - before["updates"]) / wall,
            "frames": frames,
            "seconds": wall,
            "synthetic": True,
        }
    }
