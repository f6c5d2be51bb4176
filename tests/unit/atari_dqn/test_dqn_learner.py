"""The learner in-process: replay ratio, weights versions, target sync, checkpoints."""

from __future__ import annotations

import math

import pytest
import torch

from examples.atari_dqn.bench_support import InProcessLink, run_in_process
from examples.atari_dqn.checkpoint import load_checkpoint, save_checkpoint
from examples.atari_dqn.collector import CollectorCore, run_collect_loop
from examples.atari_dqn.config import config_for_env
from examples.atari_dqn.learner import Learner


def _cfg(**kw):
    base = dict(
        learning_starts=100,
        train_every=2,
        batch_size=16,
        target_update_every=5,
        replay_capacity=5_000,
        num_envs_per_collector=2,
        steps_per_push=8,
        weight_refresh_every=16,
    )
    base.update(kw)
    return config_for_env("CartPole-v1", **base)


def _same_state(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k].cpu(), b[k].cpu()) for k in a)


def test_training_starts_after_warmup_and_keeps_the_replay_ratio():
    cfg = _cfg()
    learner = Learner(cfg)
    core = CollectorCore(cfg)
    paid = 0  # transitions received from the push that crossed learning_starts on
    while learner.transitions < 400:
        batch = core.collect(cfg.steps_per_push)
        before = learner.replay.transitions_added
        learner.push(batch)
        if learner.replay.transitions_added >= cfg.learning_starts:
            paid += learner.replay.transitions_added - before
        else:
            assert learner.updates == 0
    assert learner.updates == paid // cfg.train_every > 0
    stats = learner.stats()
    assert math.isfinite(stats["last_loss"]) and math.isfinite(stats["loss_mean"])
    assert stats["transitions"] == core.agent_steps
    assert stats["frames"] == core.agent_steps  # CartPole: frame skip 1
    assert stats["episodes_total"] == len(stats["episodes"]) > 0
    assert math.isnan(learner.stats()["loss_mean"])  # means are since the previous call


def test_weights_versions_and_target_sync():
    cfg = _cfg()
    learner = Learner(cfg)
    version0, w0 = learner.get_weights()
    assert learner.get_weights(version0) is None  # caller is current: no payload
    run_in_process(cfg, 600, learner=learner)
    version, w = learner.get_weights(version0)
    assert version == learner.updates > 0
    assert not _same_state(w0, w), "training must change the weights"
    # The target network equals the online one right after each sync.
    target_before = {k: v.clone() for k, v in learner.target_net.state_dict().items()}
    while learner.updates % cfg.target_update_every != cfg.target_update_every - 1:
        learner.train_step()
    assert _same_state(target_before, learner.target_net.state_dict())
    learner.train_step()
    assert _same_state(learner.q_net.state_dict(), learner.target_net.state_dict())


def test_collect_loop_refreshes_weights_and_bounds_in_flight():
    cfg = _cfg(max_in_flight=3)
    learner = Learner(cfg)
    core = CollectorCore(cfg)
    result = run_collect_loop(core, InProcessLink(learner), 800)
    assert result["frames"] >= 800
    assert result["pushes"] == learner.pushes
    assert result["max_in_flight_seen"] <= cfg.max_in_flight
    assert result["weight_refreshes"] >= 2
    assert result["weight_version"] > 0 and result["weight_version"] <= learner.weight_version


def test_checkpoint_round_trip(tmp_path):
    cfg = _cfg()
    learner = Learner(cfg)
    run_in_process(cfg, 500, learner=learner)
    path = save_checkpoint(tmp_path / "ck.pt", learner.checkpoint_state(), 500, cfg.env_id)
    data = load_checkpoint(path, cfg.env_id)
    fresh = Learner(cfg)
    assert not _same_state(fresh.q_net.state_dict(), learner.q_net.state_dict())
    fresh.load_checkpoint_state(data["learner"])
    assert _same_state(fresh.q_net.state_dict(), learner.q_net.state_dict())
    assert _same_state(fresh.target_net.state_dict(), learner.target_net.state_dict())
    assert fresh.optimizer.state_dict()["state"][0]["step"] == learner.updates
    assert fresh.updates == learner.updates and fresh.transitions == learner.transitions
    assert fresh.weight_version > learner.weight_version  # collectors will refetch
    assert data["frames"] == 500
    with pytest.raises(ValueError, match="trained on"):
        load_checkpoint(path, "ALE/Pong-v5")


def test_dict_config_and_bad_transport():
    cfg = _cfg()
    assert Learner(cfg.to_dict()).cfg == cfg
    with pytest.raises(ValueError, match="transport"):
        Learner(cfg, transport="tcp")


def test_in_process_baseline_without_training():
    cfg = _cfg()
    result = run_in_process(cfg, 400, train=False)
    assert result["frames"] >= 400 and result["updates"] == 0 and result["fps"] > 0


def test_learning_rate_anneals_to_the_final_fraction():
    cfg = _cfg(lr=1e-3, lr_final_fraction=0.1, total_frames=600)
    learner = Learner(cfg)
    run_in_process(cfg, 300, learner=learner)
    mid = learner.optimizer.param_groups[0]["lr"]
    assert 1e-4 < mid < 1e-3
    run_in_process(cfg, 400, learner=learner)  # past total_frames
    assert learner.optimizer.param_groups[0]["lr"] == pytest.approx(1e-4)
