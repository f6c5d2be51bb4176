"""The DQN example's very actor classes on Ray (``--backend ray``): a tiny run to the end.

The driver runs in a subprocess of its own session, with a time limit; on timeout that
session is killed by its pid.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("ray", reason="ray is not installed: the Ray backend cannot run")
pytest.importorskip("gymnasium", reason="needs the atari extra: pip install -e '.[atari]'")

_ROOT = Path(__file__).resolve().parents[2]
if str(_ROOT) not in sys.path:  # `examples` is a repository folder, not an installed package
    sys.path.insert(0, str(_ROOT))

from examples.atari_dqn.checkpoint import load_checkpoint  # noqa: E402

pytestmark = pytest.mark.slow

_T = 300  # seconds: bound on the whole run (Ray starts a process per actor)


def test_the_dqn_trains_on_ray_with_the_same_classes(tmp_path):
    logdir = tmp_path / "run"
    argv = [
        sys.executable, "-m", "examples.atari_dqn", "--backend", "ray", "--env", "CartPole-v1",
        "--total-frames", "2000", "--collectors", "2", "--eval-episodes", "2",
        "--learning-starts", "200", "--learner-gpus", "0", "--no-progress",
        "--logdir", str(logdir),
    ]  # fmt: skip
    proc = subprocess.Popen(
        argv, cwd=_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        out, _ = proc.communicate(timeout=_T)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)  # the run's own session, by its pid
            proc.communicate(timeout=30)
    assert proc.returncode == 0, out[-4000:]
    assert "final evaluation: env=CartPole-v1 episodes=2" in out, out[-4000:]
    assert "placement" not in out  # no actorrt plan on Ray
    for name in ("metrics.csv", "learning_curve.png", "checkpoint.pt", "learner.json"):
        assert (logdir / name).stat().st_size > 0, name
    assert not (logdir / "plan.json").exists()
    # The actors ran in Ray's own worker processes, not in the driver.
    pids = {c["pid"] for c in json.loads((logdir / "collectors.json").read_text())}
    (learner,) = json.loads((logdir / "learner.json").read_text())
    assert len(pids | {learner["pid"]}) == 3 and proc.pid not in pids
    # Collectors' transitions reached the learner through Ray, and it trained on them.
    final = load_checkpoint(logdir / "checkpoint.pt", "CartPole-v1")
    assert final["frames"] >= 2000
    assert final["learner"]["updates"] > 0
