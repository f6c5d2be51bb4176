"""GPU shares that fit the machine: the arithmetic, and actorrt's planner accepting it.

Pure: synthetic GPU counts, planned on described machines (no GPU is needed).
"""

from __future__ import annotations

import json

import pytest

from actorrt.placement import make_plan
from actorrt.placement.clusterfile import parse_cluster
from actorrt.placement.layout import parse_layout
from examples.atari_dqn.driver import build_layout, fit_gpus, parse_args
from examples.atari_dqn.gpus import MIN_SHARE, share_gpus


def _shares(gpus, collectors, transport, learner=None, collector=None):
    s = share_gpus(gpus, collectors, transport, learner, collector)
    return s.learner, s.collector


def test_whole_gpus_when_there_are_enough():
    assert _shares(5, 4, "cuda") == (1.0, 1.0)
    assert _shares(1, 12, "cpu") == (1.0, 0.0)  # only the learner wants one
    assert _shares(0, 12, "cpu") == (0.0, 0.0)  # no GPU, no cuda: none asked
    assert share_gpus(5, 4, "cuda").note == ""  # nothing shared, nothing printed


@pytest.mark.parametrize(
    ("gpus", "collectors", "expected"),
    [
        (1, 4, (0.5, 0.125)),  # tests/gpu's hand-made flags, found
        (1, 12, (0.5, 1 / 32)),  # the 12 collectors on one H200
        (1, 1, (0.5, 0.5)),
        (2, 4, (1.0, 0.25)),  # the learner keeps a whole GPU when one is left
        (3, 4, (1.0, 0.5)),
        (2, 64, (1.0, 1 / 64)),
        (4, 4, (1.0, 0.5)),  # 5 slots on 4 GPUs
    ],
)
def test_fewer_gpus_than_slots_share_by_powers_of_two(gpus, collectors, expected):
    shares = share_gpus(gpus, collectors, "cuda")
    assert (shares.learner, shares.collector) == expected
    assert shares.learner + collectors * shares.collector <= gpus
    assert f"learner {expected[0]:g} GPU, each collector {expected[1]:g} GPU" in shares.note


def test_values_given_are_kept_and_the_rest_fits_around_them():
    assert _shares(1, 4, "cuda", learner=0.25) == (0.25, 0.125)  # 0.75 left: 0.125 fits 6
    assert _shares(1, 4, "cuda", collector=0.1) == (0.5, 0.1)
    assert _shares(2, 4, "cuda", learner=0.5, collector=0.5) == (0.5, 0.5)  # fits as given
    # given values that cannot fit are not changed: the placement's error says why
    shares = share_gpus(1, 4, "cuda", 1.0, 0.5)
    assert (shares.learner, shares.collector) == (1.0, 0.5)
    assert "do not fit" in shares.note


def test_unknown_gpus_and_none_at_all():
    assert _shares(None, 4, "cuda") == (1.0, 1.0)  # several nodes: the defaults, whole
    shares = share_gpus(0, 4, "cuda")  # cuda without a GPU: nothing to share
    assert (shares.learner, shares.collector) == (1.0, 1.0) and "do not fit" in shares.note
    assert share_gpus(1, 200, "cuda").collector == 1.0  # past MIN_SHARE: left as asked
    assert MIN_SHARE == 1 / 64


@pytest.mark.parametrize(("gpus", "collectors"), [(1, 4), (1, 12), (2, 7), (3, 16), (1, 31)])
def test_actorrt_plans_the_shares_on_a_machine_with_that_many_gpus(gpus, collectors, monkeypatch):
    monkeypatch.setattr("torch.cuda.device_count", lambda: gpus)
    args = parse_args(["--transport", "cuda", "--collectors", str(collectors)])
    shares = fit_gpus(args)
    assert (args.learner_gpus, args.collector_gpus) == (shares.learner, shares.collector)
    layout = build_layout(args)
    cluster = parse_cluster(
        {
            "nodes": [
                {
                    "hostname": "box",
                    "gpus": gpus,
                    "processes": [
                        {"name": "driver", "hosts_actors": False},
                        {"name": "w", "count": collectors + 1},
                    ],
                }
            ]
        },
        "test",
    )
    plan = json.loads(
        make_plan(cluster.processes, parse_layout(**layout), transport="cuda").to_json()
    )
    slots = [s for p in plan["processes"] for s in p["slots"]]
    assert len(slots) == collectors + 1 and all(s["gpus"] for s in slots)  # every slot got a GPU


def test_fit_gpus_prints_what_it_chose_and_keeps_given_flags(monkeypatch, capsys):
    monkeypatch.setattr("torch.cuda.device_count", lambda: 1)
    args = parse_args(["--transport", "cuda", "--collectors", "4"])
    fit_gpus(args)
    assert "learner 0.5 GPU, each collector 0.125 GPU" in capsys.readouterr().out
    fit_gpus(args)  # again (train after --plan): the values are now given, nothing printed
    assert capsys.readouterr().out == ""
    args = parse_args(["--transport", "cuda", "--local-cuda-devices", "0,1", "--collectors", "4"])
    fit_gpus(args)  # two GPUs named: those count, not the machine's one
    assert (args.learner_gpus, args.collector_gpus) == (1.0, 0.25)
    args = parse_args(
        [
            "--transport",
            "cuda",
            "--init-method",
            "tcp://h:1",
            "--world-size",
            "6",
            "--collectors",
            "4",
        ]
    )
    fit_gpus(args)  # the GPUs are on other nodes: whole, as before
    assert (args.learner_gpus, args.collector_gpus) == (1.0, 1.0)
