"""`actorrt worker` flags that share their parsing with the placement package."""

from __future__ import annotations

import argparse

import pytest

from actorrt.cli import main
from actorrt.cluster import worker_cli
from actorrt.cluster.node import child_gpus
from actorrt.placement.plan import TRANSPORT_MODES


def test_gpus_flag_parses_like_local_cuda_devices():
    assert worker_cli._gpus("0,2") == (0, 2)
    assert worker_cli._gpus(" 1 ") == (1,)
    assert worker_cli._gpus("") == ()  # '' offers no GPU
    assert worker_cli._gpus(None) is None  # every visible GPU (or LOCAL_RANK's)


def test_under_a_launcher_the_worker_picks_its_local_ranks_gpu_unless_gpus_is_given():
    env = {"RANK": "2", "WORLD_SIZE": "4", "LOCAL_RANK": "3", "ACTORRT_INIT_METHOD": INIT}
    cfg = worker_cli.config_from_args(_args(), environ=env)
    assert (cfg.rank, cfg.world_size, cfg.gpus, cfg.local_rank) == (3, 5, None, 3)
    cfg = worker_cli.config_from_args(_args("--gpus", "1"), environ=env)
    assert (cfg.gpus, cfg.local_rank) == ((1,), None)  # the flag wins over LOCAL_RANK


@pytest.mark.parametrize(
    ("flag", "words"),
    [("0,x", "--gpus entry 'x' is not a GPU index"), ("1,1", "--gpus lists GPU 1 twice")],
)
def test_bad_gpus_flag_is_a_value_error_naming_the_flag(flag, words):
    with pytest.raises(ValueError, match=words):
        worker_cli._gpus(flag)


# --nproc

INIT = "tcp://127.0.0.1:29500"


def _args(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    worker_cli.add_arguments(p)
    return p.parse_args(list(argv))


def _by_hand(*argv: str) -> argparse.Namespace:
    return _args("--init-method", INIT, *argv)


def test_nproc_defaults_to_one_and_takes_the_last_rank_there_is():
    assert _by_hand("--rank", "1", "--world-size", "4").nproc == 1
    cfg = worker_cli.config_from_args(
        _by_hand("--rank", "2", "--world-size", "128", "--nproc", "126"), environ={}
    )
    assert (cfg.rank, cfg.world_size) == (2, 128)  # the first child's; ranks 2..127


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (("--rank", "1", "--world-size", "4", "--nproc", "0"), "--nproc 0 must be at least 1"),
        (("--rank", "1", "--world-size", "4", "--nproc", "-2"), "--nproc -2 must be at least 1"),
        (
            ("--rank", "2", "--world-size", "4", "--nproc", "3"),
            r"--nproc 3 from --rank 2 takes ranks 2\.\.4, but world size 4 has workers "
            r"1\.\.3 only: use --nproc 2 or less, or a larger --world-size",
        ),
        (
            ("--rank", "1", "--world-size", "4", "--nproc", "2", "--cuda-device-map", "0_0_1"),
            "--cuda-device-map with --nproc 2: a device map belongs to one process; start "
            "that worker with its own `actorrt worker` command",
        ),
    ],
)
def test_bad_nproc_is_refused_naming_the_fix(argv, words):
    with pytest.raises(ValueError, match=words):
        worker_cli.config_from_args(_by_hand(*argv), environ={})


def test_nproc_with_grow_is_refused_naming_the_fix():
    with pytest.raises(ValueError, match="--nproc 3 with --grow: .* start that many `actorrt"):
        worker_cli.config_from_args(_by_hand("--grow", "--nproc", "3"), environ={})
    assert worker_cli.config_from_args(_by_hand("--grow", "--nproc", "1"), environ={}).grow


@pytest.mark.parametrize(
    ("env", "launcher"),
    [
        ({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0"}, "torchrun"),
        ({"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_LOCALID": "1"}, "slurm"),
    ],
)
def test_nproc_under_a_launcher_is_refused_unless_ranks_are_given_by_hand(env, launcher):
    env = {**env, "ACTORRT_INIT_METHOD": INIT}
    with pytest.raises(ValueError, match=f"--nproc 2 under {launcher}: the launcher already"):
        worker_cli.config_from_args(_args("--nproc", "2"), environ=env)
    with pytest.raises(ValueError, match="torchrun --nproc-per-node, srun --ntasks-per-node"):
        worker_cli.config_from_args(_args("--nproc", "2", "--rank", "1"), environ=env)
    assert worker_cli.config_from_args(_args("--nproc", "1"), environ=env).world_size == 3
    # By hand (an sbatch script has SLURM_PROCID too): the flags say which ranks.
    cfg = worker_cli.config_from_args(
        _args("--nproc", "2", "--rank", "3", "--world-size", "5"), environ=env
    )
    assert (cfg.rank, cfg.world_size) == (3, 5)


def test_nproc_children_offer_one_gpu_each_in_turn():
    assert child_gpus((0, 1), 3) == [(0,), (1,), (0,)]
    assert child_gpus((5,), 2) == [(5,), (5,)]
    assert child_gpus((), 2) == [(), ()]  # --gpus '': none
    assert child_gpus(None, 2) == [None, None]  # each takes visible GPU local_rank % count


def test_the_worker_command_refuses_bad_nproc_in_one_line(capsys):
    argv = ["worker", "--init-method", INIT, "--rank", "3", "--world-size", "4", "--nproc", "2"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0, err
    assert err.startswith("actorrt worker: --nproc 2 from --rank 3 takes ranks 3..4"), err


def test_transport_choices_are_the_planners():
    p = argparse.ArgumentParser()
    worker_cli.add_arguments(p)
    action = next(a for a in p._actions if a.dest == "transport")
    assert tuple(action.choices) == TRANSPORT_MODES


def _config(*argv, environ=None):
    p = argparse.ArgumentParser()
    worker_cli.add_arguments(p)
    return worker_cli.config_from_args(p.parse_args(list(argv)), environ or {})


def test_grow_takes_no_rank_and_ignores_a_launchers_ranks():
    init = ("--init-method", "tcp://127.0.0.1:29500")
    cfg = _config(*init, "--grow", environ={"RANK": "3", "WORLD_SIZE": "4"})
    assert cfg.grow and (cfg.rank, cfg.world_size) == (0, 0)
    assert not _config(*init, "--rank", "1", "--world-size", "3").grow
    for extra in (("--rank", "1"), ("--world-size", "3")):
        with pytest.raises(ValueError, match="--grow takes the next rank"):
            _config(*init, "--grow", *extra)
    with pytest.raises(ValueError, match="--cuda-device-map cannot be used with --grow"):
        _config(*init, "--grow", "--cuda-device-map", "0_0_0")


@pytest.mark.parametrize("labels", ["1bad", "collector,has space", "ok,-x"])
def test_a_label_no_plan_could_name_is_refused_naming_the_flag(labels):
    args = _by_hand("--rank", "1", "--world-size", "2", "--labels", labels)
    with pytest.raises(ValueError, match=r"--labels=.* is not a valid label"):
        worker_cli.config_from_args(args, environ={})


def test_labels_given_comma_separated_or_repeated():
    args = _by_hand("--rank", "1", "--world-size", "2", "--labels", "learner, collector")
    args.labels.append("eval")
    assert worker_cli.config_from_args(args, environ={}).labels == ("learner", "collector", "eval")
