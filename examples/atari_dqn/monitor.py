"""The driver's view of a run: progress, logs, evaluations and checkpoints while it runs."""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import torch

from examples.atari_dqn.backend import Backend
from examples.atari_dqn.checkpoint import save_checkpoint
from examples.atari_dqn.config import DQNConfig, is_atari
from examples.atari_dqn.envs import AleVectorPool, EnvPool, obs_spec
from examples.atari_dqn.evaluation import eval_pool, evaluate
from examples.atari_dqn.exploration import run_epsilon
from examples.atari_dqn.metrics import MetricsLogger
from examples.atari_dqn.networks import build_q_network
from examples.atari_dqn.recovery import Crew, rerun_collector

__all__ = ["CALL_TIMEOUT_S", "Evaluator", "Monitor", "progress_fields"]

_POLL_S = 1.0  # progress / log interval
# fps is taken over the polls of this many seconds: a push lands in bursts (the learner's
# backpressure), so two polls a second apart may see no new frame while frames flow.
_FPS_WINDOW_S = 10.0
#: Bound on any single driver wait for an actor reply (seconds).
CALL_TIMEOUT_S = 300.0


class Evaluator:
    """Evaluates the learner's current weights in the driver process.

    The episodes run side by side in one vectorised pool (:func:`evaluate`), acting in
    one batch per step, on this process's GPU when it has one. What an evaluation would
    otherwise start with is done ahead, on a thread of the evaluator's own, while the
    cluster starts and while training runs: the network's first forward pass (on a GPU,
    setting cuDNN up) and the next evaluation's pool (its emulators built and reset).
    """

    def __init__(self, cfg: DQNConfig, rt: Backend) -> None:
        obs_shape, obs_dtype, n_actions = obs_spec(cfg)
        self.cfg = cfg
        self.rt = rt
        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        self.q_net = build_q_network(cfg, obs_shape, n_actions).to(self.device)
        self.seconds: list[float] = []  # how long each evaluation took
        self.seed = cfg.seed + 999_999
        # Made before the cluster starts (driver.main): this work runs while it does.
        self._ahead = ThreadPoolExecutor(max_workers=1, thread_name_prefix="evaluator-ahead")
        blank = np.zeros((max(1, cfg.eval_episodes), *obs_shape), dtype=obs_dtype)
        self._warm_up = self._ahead.submit(self._forward, blank)
        self._next_pool: Future[EnvPool | AleVectorPool] | None = None
        self._prepare()

    def _forward(self, obs: np.ndarray) -> None:
        """One forward pass on a batch of the evaluation's shape, its actions read back."""
        with torch.no_grad():
            self.q_net(torch.as_tensor(obs, device=self.device)).argmax(dim=1).cpu()

    def _prepare(self) -> None:
        """Starts building the next evaluation's pool (the config's episodes)."""
        if self.cfg.eval_episodes >= 1:
            self._next_pool = self._ahead.submit(
                eval_pool, self.cfg, self.cfg.eval_episodes, self.seed
            )

    def _take_pool(self, episodes: int) -> EnvPool | AleVectorPool | None:
        """The pool built ahead for ``episodes``, once ready; None: build one now."""
        ready, self._next_pool = self._next_pool, None
        if ready is None:
            return None
        pool = ready.result(CALL_TIMEOUT_S)  # long done, unless the run was shorter
        if len(pool) == episodes:
            return pool
        pool.close()
        return None

    def __call__(
        self, learner: Any, episodes: int | None = None, *, last: bool = False
    ) -> list[float]:
        """Plays ``episodes`` (the config's) with the learner's weights; their returns.

        Args:
            learner: The learner actor's handle.
            episodes: Episodes to play (default ``cfg.eval_episodes``).
            last: No evaluation follows (the final one): build no pool for the next.
        """
        began = time.monotonic()
        self._warm_up.result(CALL_TIMEOUT_S)
        reply = self.rt.get(learner.get_weights.remote(-1, cpu=True), CALL_TIMEOUT_S)
        _, state = reply
        self.q_net.load_state_dict({k: v.to(self.device) for k, v in state.items()})
        n = self.cfg.eval_episodes if episodes is None else episodes
        returns = evaluate(
            self.q_net, self.cfg, n, seed=self.seed, device=self.device, pool=self._take_pool(n)
        )
        self.seconds.append(time.monotonic() - began)
        if not last:
            self._prepare()
        return returns

    def close(self) -> None:
        """Lets go of the pool built ahead, if any, and of the evaluator's thread.

        Does not wait: a pool still being built is closed when it is done.
        """
        ready, self._next_pool = self._next_pool, None
        if ready is not None:
            ready.add_done_callback(_close_pool)  # at once if it is done already
        self._ahead.shutdown(wait=False, cancel_futures=True)


def _close_pool(built: Future[EnvPool | AleVectorPool]) -> None:
    if not built.cancelled() and built.exception() is None:
        built.result().close()


class Monitor:
    """Polls the learner while collectors run: progress, logs, evaluations, checkpoints.

    One per training run; it outlives learner restarts (:meth:`learner_replaced`).
    """

    def __init__(
        self,
        args: argparse.Namespace,
        cfg: DQNConfig,
        logger: MetricsLogger,
        evaluator: Evaluator,
        ckpt_path: Path,
        frame_offset: int,
        t_start: float,
    ) -> None:
        from tqdm import tqdm

        self.args, self.cfg, self.logger = args, cfg, logger
        self.evaluator, self.ckpt_path, self.t_start = evaluator, ckpt_path, t_start
        self.recent: deque[float] = deque(maxlen=20 if not is_atari(cfg.env_id) else 10)
        self.seen_episodes = 0
        self.next_eval = frame_offset + args.eval_every if args.eval_every else math.inf
        self.bar = tqdm(
            total=cfg.total_frames,
            initial=frame_offset,
            unit="frame",
            unit_scale=True,
            disable=args.no_progress or None,
            dynamic_ncols=True,
            file=sys.stdout,
        )
        self.window: deque[tuple[float, int]] = deque([(time.monotonic(), frame_offset)])
        # Without a terminal (logs, CI) tqdm stays off; print a plain line now and then.
        self.plain_every = math.inf if args.no_progress or not self.bar.disable else 15.0
        self.last_plain = time.monotonic()
        self.last_logged = -1

    def learner_replaced(self, crew: Crew) -> None:
        """A new learner took over: its episodes (from the checkpoint) were logged already."""
        stats = crew.rt.get(crew.learner.stats.remote(), CALL_TIMEOUT_S)
        self.seen_episodes = stats["episodes_total"]
        self.window = deque([(time.monotonic(), stats["frames"])])

    def close(self) -> None:
        self.bar.close()

    def watch(self, crew: Crew) -> None:
        """Polls until every collector's run finished (raising the error of one that failed).

        A collector whose process died (it is recreated: ``--collector-restarts``) gets a
        new run, over its share of the frames still to collect. Each evaluation also
        writes the checkpoint (``crew.checkpoint``).
        """
        args, cfg, rt = self.args, self.cfg, crew.rt
        pending = list(crew.runs)
        while pending:
            ready, pending = rt.wait(pending, len(pending), _POLL_S)
            stats = rt.get(crew.learner.stats.remote(self.seen_episodes), CALL_TIMEOUT_S)
            for ref in ready:
                rerun = rerun_collector(
                    crew, ref, args.collector_restarts, cfg.total_frames, stats["frames"],
                    CALL_TIMEOUT_S,
                )  # fmt: skip
                if rerun is not None:
                    pending.append(rerun)
            for frame, ret, length in stats["episodes"]:
                self.recent.append(ret)
                self.logger.log_episode(frame, ret, length)
            self.seen_episodes = stats["episodes_total"]
            now = time.monotonic()
            frames = stats["frames"]
            fps = self._fps(now, frames)
            row = {
                "wall_s": now - self.t_start,
                "frames": frames,
                "fps": fps,
                "episodes": self.seen_episodes,
                "return_mean": float(np.mean(self.recent)) if self.recent else math.nan,
                "loss_mean": stats["loss_mean"],
                "q_mean": stats["q_mean"],
                "epsilon": run_epsilon(
                    cfg.exploration,
                    frames,
                    cfg.eps_start,
                    cfg.eps_end,
                    cfg.eps_decay_frames,
                    args.collectors * cfg.num_envs_per_collector,
                ),  # fmt: skip
                "updates": stats["updates"],
                "replay_size": stats["replay_size"],
            }
            if self.next_eval <= frames < cfg.total_frames and pending:  # the end has its own
                self._evaluate(crew, row)
            if frames != self.last_logged or "eval_return" in row:
                self.logger.log(row)
                self.last_logged = frames
            self._show(row, stats["last_loss"])
        rt.get(list(crew.runs), CALL_TIMEOUT_S)

    def _fps(self, now: float, frames: int) -> float:
        """Frames per second over the last :data:`_FPS_WINDOW_S` seconds of polls."""
        window = self.window
        while len(window) > 1 and now - window[1][0] >= _FPS_WINDOW_S:
            window.popleft()
        t0, f0 = window[0]
        window.append((now, frames))
        return (frames - f0) / max(now - t0, 1e-9)

    def _evaluate(self, crew: Crew, row: dict[str, Any]) -> None:
        """Evaluates the learner's weights into ``row`` and writes the checkpoint."""
        frames = row["frames"]
        returns = self.evaluator(crew.learner)
        row["eval_return"] = float(np.mean(returns))
        state = crew.rt.get(crew.learner.checkpoint_state.remote(), CALL_TIMEOUT_S)
        save_checkpoint(self.ckpt_path, state, frames, self.cfg.env_id)
        crew.checkpoint = self.ckpt_path
        self.bar.write(
            f"eval at {frames:,} frames: mean return {row['eval_return']:.2f} "
            f"over {len(returns)} episodes (checkpoint {self.ckpt_path})"
        )
        while self.next_eval <= frames:
            self.next_eval += self.args.eval_every

    def _show(self, row: dict[str, Any], last_loss: float) -> None:
        """The progress bar, or a plain line every 15 s without a terminal."""
        postfix = progress_fields(row, last_loss, have_returns=bool(self.recent))
        self.bar.update(max(0, min(row["frames"], self.cfg.total_frames) - self.bar.n))
        self.bar.set_postfix(postfix, refresh=False)
        now = time.monotonic()
        if now - self.last_plain >= self.plain_every:
            self.last_plain = now
            fields = " ".join(f"{k}={v}" for k, v in postfix.items())
            print(f"frames={row['frames']:,}/{self.cfg.total_frames:,} {fields}", flush=True)


def progress_fields(row: dict[str, Any], last_loss: float, have_returns: bool) -> dict[str, str]:
    """The progress line's fields (tqdm postfix, or the plain line without a terminal).

    The loss shown is the TD loss of the learner's latest gradient step, ``last_loss``:
    a different number from ``metrics.csv``'s ``loss_mean`` (the mean over the gradient
    steps since the previous row), so it carries a different name.

    Args:
        row: This poll's ``metrics.csv`` row (``fps``, ``return_mean``, ``epsilon``).
        last_loss: The latest step's TD loss (NaN before training starts).
        have_returns: Whether any episode has finished yet (else ``ret`` shows ``-``).

    Returns:
        ``{"fps", "ret", "last_loss", "eps"}`` as printed.
    """
    return {
        "fps": f"{row['fps']:.0f}",
        "ret": f"{row['return_mean']:.1f}" if have_returns else "-",
        "last_loss": f"{last_loss:.4f}" if math.isfinite(last_loss) else "-",
        "eps": f"{row['epsilon']:.2f}",
    }
