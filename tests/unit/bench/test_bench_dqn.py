"""The real-DQN benchmark's set-up: the example's preset, trained within the warm-up."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("gymnasium", reason="needs the atari extra: pip install -e '.[atari]'")

_ROOT = str(Path(__file__).resolve().parents[3])
if _ROOT not in sys.path:  # `examples` is a repository folder, not an installed package
    sys.path.insert(0, _ROOT)

from benchmarks import dqn  # noqa: E402
from examples.atari_dqn.config import config_for_env  # noqa: E402


def test_the_config_is_the_examples_pong_preset_with_training_inside_the_warmup():
    cfg = dqn.dqn_config()
    preset = config_for_env(dqn.ENV_ID)
    changed = {k for k, v in cfg.to_dict().items() if v != preset.to_dict()[k]}
    assert changed <= {"learning_starts", "replay_capacity"}
    # Every collector count's warm-up (frames, 4 a transition) fills learning_starts.
    for n in dqn.COLLECTORS:
        assert (dqn.WARMUP_FRAMES // n) * n // cfg.frame_skip >= cfg.learning_starts
    assert not dqn.dqn_config(vector_env=False).ale_vector_env
    assert dqn.dqn_config(train=False).learning_starts > 10**15  # never trains


def test_the_actorrt_layout_has_a_slot_for_the_most_collectors_talking_to_the_learner():
    got = dqn.layout(max(dqn.COLLECTORS))
    assert got["labels"]["collector"]["count"] == 4
    assert got["labels"]["learner"]["count"] == 1
    assert got["talks"] == [("collector", "learner")]
