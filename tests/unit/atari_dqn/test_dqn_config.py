"""Presets, overrides and the driver's flag handling (no cluster is started)."""

from __future__ import annotations

import re

import pytest

from examples.atari_dqn.config import (
    DQNConfig,
    config_for_env,
    is_atari,
    with_batch_size,
    with_replay_ratio,
)
from examples.atari_dqn.driver import batch_line, build_config, parse_args


def test_presets_per_family():
    pong = config_for_env("ALE/Pong-v5")
    cart = config_for_env("CartPole-v1")
    assert pong.atari and pong.frame_skip == 4 and pong.frame_stack == 4
    assert not cart.atari and cart.frame_skip == 1 and cart.frame_stack == 1
    assert is_atari("ALE/Breakout-v5") and not is_atari("CartPole-v1")


def test_overrides_none_keeps_preset_and_unknown_fails():
    assert config_for_env("CartPole-v1", lr=None).lr == config_for_env("CartPole-v1").lr
    assert config_for_env("CartPole-v1", lr=0.5).lr == 0.5
    with pytest.raises(ValueError, match="unknown DQNConfig"):
        config_for_env("CartPole-v1", learning_rate=1.0)
    with pytest.raises(ValueError, match="no DQN preset"):
        config_for_env("Pendulum-v1")


def test_dict_round_trip():
    cfg = config_for_env("CartPole-v1", seed=7)
    assert DQNConfig.from_dict({**cfg.to_dict(), "added_later": 1}) == cfg


def test_driver_defaults_are_the_short_pong_demo():
    args = parse_args([])
    cfg = build_config(args)
    assert args.env == "ALE/Pong-v5" and args.collectors == 2 and args.transport == "cpu"
    # The ring is sized to the run, not to the preset's 200k frames.
    assert cfg.replay_capacity <= cfg.total_frames // cfg.frame_skip * 1.1 + 1024


def test_driver_flags():
    args = parse_args(
        [
            "--env",
            "CartPole-v1",
            "--collectors",
            "3",
            "--total-frames",
            "5000",
            "--seed",
            "4",
            "--transport",
            "cuda",
            "--cuda-device-map",
            "1_0_0",
            "--local-cuda-devices",
            "0,1",
            "--resume",
            "--eval-every",
            "1000",
        ]
    )
    cfg = build_config(args)
    assert (cfg.env_id, cfg.total_frames, cfg.seed) == ("CartPole-v1", 5000, 4)
    assert args.resume == "" and args.eval_every == 1000 and args.collectors == 3
    assert args.cuda_device_map == "1_0_0" and args.local_cuda_devices == "0,1"
    with pytest.raises(SystemExit):
        parse_args(["--init-method", "tcp://127.0.0.1:29500"])  # needs --world-size


def test_backend_and_learner_restart_flags(capsys):
    args = parse_args([])
    assert args.backend == "actorrt" and args.learner_restarts == 0  # the defaults
    args = parse_args(["--backend", "ray", "--learner-restarts", "-1", "--collectors", "4"])
    assert args.backend == "ray" and args.learner_restarts == -1
    with pytest.raises(SystemExit):
        parse_args(["--learner-restarts", "-2"])
    assert "--learner-restarts must be >= 0, or -1" in capsys.readouterr().err
    # What only an actorrt cluster has is refused on Ray, every such flag named.
    with pytest.raises(SystemExit):
        parse_args(["--backend", "ray", "--plan", "--num-workers", "2", "--transport", "cuda"])
    err = capsys.readouterr().err
    assert "--num-workers, --plan, --transport cuda: only with --backend actorrt" in err
    with pytest.raises(SystemExit):
        parse_args(["--backend", "torch"])


def test_a_larger_batch_keeps_the_replay_ratio_and_the_target_drift():
    pong = config_for_env("ALE/Pong-v5")
    big = with_batch_size(pong, 512)
    assert (big.batch_size, big.train_every) == (512, 64)
    assert big.batch_size / big.train_every == pong.batch_size / pong.train_every == 8
    assert big.lr == pytest.approx(4 * pong.lr)  # sqrt(16)
    # lr x steps between two target copies kept: 1e-4 x 1000 = 4e-4 x 250
    assert big.target_update_every == 250
    assert big.lr * big.target_update_every == pytest.approx(pong.lr * pong.target_update_every)
    assert with_batch_size(pong, 128).target_update_every == 500  # sqrt(4)
    # the flag sets it at the run's batch, after the scaling
    args = parse_args(["--learner-gpus", "1", "--target-update-every", "1000"])
    assert build_config(args).target_update_every == 1000
    assert "target copy every 1000 steps" in batch_line(build_config(args))
    assert with_batch_size(pong, 32) == pong and pong.batch_size == 32  # not changed
    with pytest.raises(ValueError, match="use a multiple of 8"):
        with_batch_size(pong, 100)


def test_a_replay_ratio_sets_the_steps_per_transition_at_the_same_batch():
    big = with_batch_size(config_for_env("ALE/Pong-v5"), 512)
    twice = with_replay_ratio(big, 16)
    assert (twice.batch_size, twice.train_every) == (512, 32)
    assert (twice.lr, twice.target_update_every) == (big.lr, big.target_update_every)
    assert with_replay_ratio(big, 8) == big and big.train_every == 64  # not changed
    assert with_replay_ratio(big, 512).train_every == 1
    for bad, why in ((3, "use one that divides the batch"), (1024, "not a whole"), (0, "> 0")):
        with pytest.raises(ValueError, match=why):
            with_replay_ratio(big, bad)
    # the flag, after the batch the learner's device chose: a ratio at that batch
    args = parse_args(["--learner-gpus", "1", "--replay-ratio", "16"])
    cfg = build_config(args)
    assert (cfg.batch_size, cfg.train_every) == (512, 32)
    assert "(16 samples per transition)" in batch_line(cfg)
    assert build_config(parse_args(["--replay-ratio", "4"])).train_every == 8  # batch 32


def test_a_max_replay_ratio_is_a_ceiling_above_the_runs_ratio():
    cfg = build_config(parse_args(["--learner-gpus", "1", "--max-replay-ratio", "32"]))
    assert (cfg.batch_size, cfg.train_every, cfg.max_replay_ratio) == (512, 64, 32.0)
    assert "(8 samples per transition, up to 32 with spare steps)" in batch_line(cfg)
    assert build_config(parse_args([])).max_replay_ratio is None
    args = parse_args([])
    args.max_replay_ratio = 4.0  # past parse_args, which refuses it (below)
    with pytest.raises(ValueError, match="--max-replay-ratio 4 is below the run's replay ratio 8"):
        build_config(args)
    # at the ratio --replay-ratio set, not the preset's
    cfg = build_config(parse_args(["--replay-ratio", "16", "--max-replay-ratio", "16"]))
    assert cfg.max_replay_ratio == 16.0


def test_a_recipe_sets_its_flags_as_defaults_and_given_flags_win():
    from examples.atari_dqn.config import RECIPES
    from examples.atari_dqn.driver import emulator_line, recipe_line

    args = parse_args(["--recipe", "pong-10min"])
    for key, value in RECIPES["pong-10min"].items():
        assert getattr(args, key) == value, key
    cfg = build_config(parse_args(["--recipe", "pong-10min", "--learner-gpus", "1"]))
    assert cfg.cuda_graph and cfg.max_replay_ratio == 32 and cfg.train_seconds == 508
    assert (cfg.batch_size, cfg.target_update_every, cfg.eval_max_frames) == (512, 250, None)
    assert cfg.sticky_actions == 0.0  # the deterministic emulator; the preset keeps v5's
    mine = parse_args(["--recipe", "pong-10min", "--collectors", "4", "--transport", "cuda"])
    assert (mine.collectors, mine.transport, mine.eval_episodes) == (4, "cuda", 8)
    v5 = build_config(parse_args(["--recipe", "pong-10min", "--sticky-actions", "0.25"]))
    assert v5.sticky_actions == 0.25
    # the run says which emulator its scores come from
    assert emulator_line(cfg).endswith("up to 30 no-op starts, no sticky actions (deterministic)")
    assert emulator_line(v5).endswith("no-op starts, sticky actions 0.25")
    assert parse_args([]).collectors == 2  # no recipe: the plain defaults
    assert build_config(parse_args([])).sticky_actions == 0.25
    line = recipe_line("pong-10min")
    assert line.startswith("recipe pong-10min: --env ALE/Pong-v5 --collectors 12")
    assert "--cuda-graph --max-replay-ratio 32.0 --sticky-actions 0.0 (" in line


def test_a_recipe_naming_a_missing_flag_is_caught(monkeypatch):
    from examples.atari_dqn import driver

    monkeypatch.setitem(driver.RECIPES, "typo", {"colectors": 12})
    with pytest.raises(ValueError, match="recipe 'typo' names no flag colectors"):
        parse_args(["--recipe", "typo"])


def test_the_batch_follows_the_learners_device(capsys):
    # No flag: the preset's batch on a CPU learner, its gpu_batch_size on a GPU one.
    assert build_config(parse_args(["--learner-gpus", "0"])).batch_size == 32
    gpu = build_config(parse_args(["--learner-gpus", "0.5"]))
    assert (gpu.batch_size, gpu.train_every) == (512, 64)
    # --batch-size wins either way; CartPole has no GPU batch and keeps its own.
    assert build_config(parse_args(["--learner-gpus", "1", "--batch-size", "64"])).batch_size == 64
    assert build_config(parse_args(["--batch-size", "256"])).train_every == 32
    cart = build_config(parse_args(["--env", "CartPole-v1", "--learner-gpus", "1"]))
    assert cart.batch_size == config_for_env("CartPole-v1").batch_size
    assert batch_line(gpu) == (
        "batch 512: one gradient step per 64 transitions (8 samples per transition), "
        "lr 0.0004, target copy every 250 steps"
    )


def test_the_evaluations_shared_frame_cap_can_be_set_or_lifted(capsys):
    assert build_config(parse_args([])).eval_max_frames == 50_000  # the Atari preset
    assert build_config(parse_args(["--eval-max-frames", "800000"])).eval_max_frames == 800_000
    assert build_config(parse_args(["--eval-max-frames", "0"])).eval_max_frames is None
    with pytest.raises(SystemExit):
        parse_args(["--eval-max-frames", "-1"])
    assert "--eval-max-frames must be >= 0" in capsys.readouterr().err


def test_n_step_returns_are_a_flag_and_show_in_the_batch_line(capsys):
    assert build_config(parse_args([])).n_step == 1  # the preset: one-step DQN
    cfg = build_config(parse_args(["--n-step", "3", "--learner-gpus", "0"]))
    assert cfg.n_step == 3 and batch_line(cfg).endswith(", 3-step returns")
    assert "step returns" not in batch_line(build_config(parse_args(["--learner-gpus", "0"])))
    with pytest.raises(SystemExit):
        parse_args(["--n-step", "0"])
    assert "--n-step must be >= 1" in capsys.readouterr().err
    with pytest.raises(ValueError, match="n_step=0 must be >= 1"):
        config_for_env("CartPole-v1", n_step=0)


def test_cuda_graph_is_a_flag_that_needs_a_constant_learning_rate():
    assert build_config(parse_args([])).cuda_graph is False  # off by default
    cfg = build_config(parse_args(["--cuda-graph", "--learner-gpus", "0"]))
    assert cfg.cuda_graph and batch_line(cfg).endswith(", steps as a CUDA graph on a GPU")
    assert "CUDA graph" not in batch_line(build_config(parse_args(["--learner-gpus", "0"])))
    # CartPole's preset anneals its learning rate: a captured step could not follow it
    with pytest.raises(ValueError, match="cuda_graph needs a constant learning rate") as info:
        config_for_env("CartPole-v1", cuda_graph=True)
    assert "leave --cuda-graph off" in str(info.value)  # a flag the user has
    assert config_for_env("CartPole-v1", cuda_graph=True, lr_final_fraction=1.0).cuda_graph


def test_channels_last_is_a_flag_that_shows_in_the_batch_line():
    assert build_config(parse_args([])).channels_last is False  # off by default
    cfg = build_config(parse_args(["--channels-last", "--learner-gpus", "0"]))
    assert cfg.channels_last and batch_line(cfg).endswith(", channels-last CNNs")
    assert "channels-last" not in batch_line(build_config(parse_args(["--learner-gpus", "0"])))
    cartpole = build_config(parse_args(["--env", "CartPole-v1", "--channels-last"]))
    assert "channels-last" not in batch_line(cartpole)  # an MLP has no layout to change


def test_train_seconds_is_a_time_budget_flag(capsys):
    assert build_config(parse_args([])).train_seconds is None  # frames alone by default
    cfg = build_config(parse_args(["--train-seconds", "540", "--total-frames", "100000000"]))
    assert cfg.train_seconds == 540.0
    with pytest.raises(SystemExit):
        parse_args(["--train-seconds", "0"])
    assert "--train-seconds must be > 0" in capsys.readouterr().err
    with pytest.raises(ValueError, match="train_seconds=-1 must be > 0"):
        config_for_env("CartPole-v1", train_seconds=-1)


def test_lr_sets_the_learning_rate_at_the_runs_batch(capsys):
    scaled = build_config(parse_args(["--batch-size", "512", "--learner-gpus", "0"]))
    assert scaled.lr == pytest.approx(4e-4)  # the preset's 1e-4 at 32, times sqrt(16)
    cfg = build_config(parse_args(["--batch-size", "512", "--lr", "6.25e-5"]))
    assert cfg.batch_size == 512 and cfg.lr == 6.25e-5
    assert cfg.train_every == scaled.train_every  # the replay ratio is the batch's
    assert "lr 6.25e-05" in batch_line(cfg)
    assert build_config(parse_args(["--lr", "1e-3", "--learner-gpus", "0"])).lr == 1e-3
    with pytest.raises(SystemExit):
        parse_args(["--lr", "0"])
    assert "--lr must be > 0" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse_args(["--target-update-every", "0"])
    assert "--target-update-every must be >= 1" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "why"),
    [
        (["--batch-size", "100"], "batch_size=100 cannot keep the replay ratio .* multiple of 8"),
        (["--max-replay-ratio", "4"], "--max-replay-ratio 4 is below the run's replay ratio 8"),
        (["--replay-ratio", "3"], "use one that divides the batch"),
        (["--env", "Pendulum-v1"], "no DQN preset for env 'Pendulum-v1'"),
        (["--sticky-actions", "1"], r"sticky_actions=1.0 must be in \[0, 1\)"),
    ],
)
def test_a_combination_the_preset_refuses_is_a_command_line_error(argv, why, capsys):
    # as a bad flag is: usage and the reason on stderr, exit status 2, no traceback
    with pytest.raises(SystemExit) as exited:
        parse_args(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage:") and "Traceback" not in err
    assert re.search(why, err), err


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--eval-every", "-5"], "--eval-every must be >= 0 (0: only at the end)"),  # hung
        (["--eval-episodes", "0"], "--eval-episodes must be >= 1"),  # crashed at the end
        (["--total-frames", "-100"], "--total-frames must be >= 1"),  # "succeeded"
        (["--envs-per-collector", "0"], "--envs-per-collector must be >= 1"),
        (["--learner-threads", "0"], "--learner-threads must be >= 1"),
        (["--collector-restarts", "-5"], "--collector-restarts must be >= -1 (-1: no limit)"),
        (["--learning-starts", "-10"], "--learning-starts must be >= 0"),
        (["--replay-capacity", "0"], "--replay-capacity must be >= 1"),
        (["--learner-gpus", "-1"], "--learner-gpus must be >= 0"),
        (["--world-size", "4"], "--world-size is for a multi-node cluster: give --init-method"),
        (["--start-timeout", "5"], "--start-timeout is for a multi-node cluster: give"),
        (
            ["--init-method", "tcp://127.0.0.1:1", "--world-size", "2", "--start-timeout", "0"],
            "--start-timeout must be > 0 seconds",
        ),
        (["--env", "ALE/NoSuchGame-v5"], "--env ALE/NoSuchGame-v5: Environment `NoSuchGame`"),
    ],
)
def test_bad_counts_and_ids_are_usage_errors_before_any_cluster(flags, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        parse_args(flags)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err
