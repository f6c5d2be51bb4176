"""The DQN example with ``--transport cuda``: collectors push CUDA tensors to the learner.

Runs ``python -m examples.atari_dqn`` (CartPole: no Atari ROMs needed) from the
repository root in a subprocess with a timeout; on timeout it and every process it
started are killed by pid.
"""

from __future__ import annotations

import json
import sys

import pytest
from gpu_testlib import ROOT, cuda_count, requires_cuda, run_bounded

pytestmark = [requires_cuda, pytest.mark.slow, pytest.mark.timeout(480)]

_RUN_S = 420  # bound on the whole training run (four processes start CUDA)


def _gpu_flags(n_gpus: int) -> list[str]:
    """GPU shares that fit this machine: by default the learner and each collector take
    a whole GPU (3 for 2 collectors); with fewer GPUs, collectors (and the learner) share."""
    if n_gpus >= 3:
        return []
    if n_gpus == 2:
        return ["--collector-gpus", "0.5"]
    return ["--learner-gpus", "0.5", "--collector-gpus", "0.25"]


def test_dqn_cartpole_with_cuda_transport(tmp_path):
    pytest.importorskip("gymnasium", reason="needs the atari extra: pip install -e '.[atari]'")
    pytest.importorskip("tqdm", reason="needs the atari extra: pip install -e '.[atari]'")
    logdir = tmp_path / "run"
    argv = [
        sys.executable, "-m", "examples.atari_dqn", "--env", "CartPole-v1",
        "--transport", "cuda", "--collectors", "2", "--total-frames", "4000",
        "--no-progress", "--logdir", str(logdir), *_gpu_flags(cuda_count()),
    ]  # fmt: skip
    rc, out, err = run_bounded(argv, timeout=_RUN_S, cwd=ROOT)
    tail = f"\n--- stdout\n{out[-3000:]}\n--- stderr\n{err[-6000:]}"
    assert rc is not None, f"the run did not end within {_RUN_S} s and was killed{tail}"
    assert rc == 0, f"exit status {rc}{tail}"
    assert "final evaluation: env=CartPole-v1" in out, tail

    for name in ("metrics.csv", "checkpoint.pt"):
        assert (logdir / name).is_file() and (logdir / name).stat().st_size > 0, name + tail
    rows = (logdir / "metrics.csv").read_text().splitlines()
    assert rows[0].startswith("wall_s,frames") and len(rows) >= 2, rows[:3]

    if str(ROOT) not in sys.path:  # `examples` is a repository folder, not a package
        sys.path.insert(0, str(ROOT))
    from examples.atari_dqn.checkpoint import load_checkpoint

    ckpt = load_checkpoint(logdir / "checkpoint.pt", "CartPole-v1")
    assert ckpt["frames"] >= 4000, ckpt["frames"]
    assert ckpt["learner"]["updates"] > 0, "the learner never trained"

    plan = logdir / "plan.json"
    assert plan.is_file(), f"no plan.json in {logdir}: {sorted(p.name for p in logdir.iterdir())}"
    data = json.loads(plan.read_text())  # Plan.to_dict(), as `actorrt plan --json` prints
    assert data["transport"] == "cuda", data["transport"]
    procs = data["processes"]
    (learner,) = [p for p in procs if "learner" in p["labels"]]
    collectors = [p for p in procs if "collector" in p["labels"]]
    assert learner["gpus"], f"the learner's process got no GPU: {learner}"
    assert len(collectors) == 2 and all(p["gpus"] for p in collectors), collectors
    for p in collectors:  # collectors push CUDA tensors GPU to GPU into the learner
        assert p["device_maps"].get(learner["name"]), (p["name"], p["device_maps"])


def test_dqn_cuda_transport_without_gpu_flags_fits_fewer_gpus_than_slots(tmp_path):
    """No --learner-gpus / --collector-gpus: the example picks shares that fit, and says so.

    Was: ``PlacementError: label 'collector' needs 1 GPU`` on a machine with fewer GPUs
    than the learner and the collectors (issue 24).
    """
    pytest.importorskip("gymnasium", reason="needs the atari extra: pip install -e '.[atari]'")
    if cuda_count() >= 3:
        pytest.skip("3 or more GPUs: every slot gets a whole one, nothing to share")
    argv = [
        sys.executable, "-m", "examples.atari_dqn", "--env", "CartPole-v1",
        "--transport", "cuda", "--collectors", "2", "--total-frames", "2000",
        "--no-progress", "--logdir", str(tmp_path / "run"),
    ]  # fmt: skip
    rc, out, err = run_bounded(argv, timeout=_RUN_S, cwd=ROOT)
    tail = f"\n--- stdout\n{out[-3000:]}\n--- stderr\n{err[-6000:]}"
    assert rc == 0, f"exit status {rc}{tail}"
    assert "GPUs: " in out and "each collector" in out, tail
    assert "final evaluation: env=CartPole-v1" in out, tail
