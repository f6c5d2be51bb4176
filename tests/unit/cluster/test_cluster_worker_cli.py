"""`actorrt worker` flags that share their parsing with the placement package."""

from __future__ import annotations

import argparse

import pytest

from actorrt.cluster import worker_cli
from actorrt.placement.plan import TRANSPORT_MODES


def test_gpus_flag_parses_like_local_cuda_devices():
    assert worker_cli._gpus("0,2", None) == (0, 2)
    assert worker_cli._gpus(" 1 ", 5) == (1,)  # the flag wins over LOCAL_RANK
    assert worker_cli._gpus("", None) == ()  # '' offers no GPU
    assert worker_cli._gpus(None, None) is None  # every visible GPU


@pytest.mark.parametrize(
    ("flag", "words"),
    [("0,x", "--gpus entry 'x' is not a GPU index"), ("1,1", "--gpus lists GPU 1 twice")],
)
def test_bad_gpus_flag_is_a_value_error_naming_the_flag(flag, words):
    with pytest.raises(ValueError, match=words):
        worker_cli._gpus(flag, None)


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
