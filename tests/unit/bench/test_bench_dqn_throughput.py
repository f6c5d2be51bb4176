"""The emulator-ceiling benchmark: the preset it trains with, and its raw phase.

The raw phase starts real processes (one here, for half a second): each is joined
within a bound and killed by its pid if it lingers (``raw_rate`` does both).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("ale_py", reason="needs the atari extra: pip install -e '.[atari]'")

_ROOT = str(Path(__file__).resolve().parents[3])
if _ROOT not in sys.path:  # `examples` is a repository folder, not an installed package
    sys.path.insert(0, _ROOT)

from benchmarks import dqn_throughput  # noqa: E402
from benchmarks.cli import JOBS  # noqa: E402
from examples.atari_dqn.config import config_for_env  # noqa: E402

pytestmark = pytest.mark.timeout(120)


def test_it_trains_at_the_presets_replay_ratio_and_passes_learning_starts_in_the_warmup():
    cfg = dqn_throughput.dqn_config()
    preset = config_for_env(dqn_throughput.ENV_ID)
    changed = {k for k, v in cfg.to_dict().items() if v != preset.to_dict()[k]}
    assert changed <= {"learning_starts", "replay_capacity"}
    assert cfg.batch_size / cfg.train_every == preset.batch_size / preset.train_every
    assert dqn_throughput.dqn_config(num_envs=8).num_envs_per_collector == 8
    # With the learner on a GPU, the example's batch there, at the same replay ratio.
    gpu = dqn_throughput.dqn_config(learner_gpus=0.5)
    assert (gpu.batch_size, gpu.train_every) == (preset.gpu_batch_size, 64)
    assert dqn_throughput.dqn_config(batch_size=128).train_every == 16
    # --replay-ratio: at the learner's batch, as the example's flag
    assert dqn_throughput.dqn_config(learner_gpus=0.5, replay_ratio=16).train_every == 32
    # --prioritized: Ape-X's priorities, as the example's flag
    assert dqn_throughput.dqn_config(prioritized=True).priority_exponent == 0.6
    assert dqn_throughput.dqn_config().priority_exponent == 0.0
    # --max-replay-ratio: the learner's spare steps, as the example's flag
    assert dqn_throughput.dqn_config(max_replay_ratio=32).max_replay_ratio == 32
    assert ("actorrt", "dqn-throughput") in JOBS


def test_the_raw_phase_steps_the_collectors_emulator_and_counts_its_frames():
    cfg = dqn_throughput.dqn_config(num_envs=2)
    got = dqn_throughput.raw_rate(cfg, processes=1, seconds=0.5)
    assert got["processes"] == 1 and got["frames_per_s"] > 0
    # 16 vector steps of 2 envs at a time, 4 frames each
    assert got["frames"] > 0 and got["frames"] % (16 * 2 * cfg.frame_skip) == 0
