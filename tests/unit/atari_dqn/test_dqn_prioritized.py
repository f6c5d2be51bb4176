"""FrameReplay with priorities: draws in proportion to them, weights, and updates."""

from __future__ import annotations

import pytest
import torch
from test_dqn_replay import _check_samples, _core

from examples.atari_dqn.driver import batch_line, build_config, parse_args
from examples.atari_dqn.replay import PREV_NONE, FrameReplay


def _chain_push(start: int, n: int, stream: int = 0) -> dict[str, torch.Tensor]:
    """``n`` frames of one stream, the first an episode start: ``n - 1`` transitions,
    each frame's value its global id when pushed into an empty ring at ``start``."""
    return {
        "frame": torch.arange(start, start + n, dtype=torch.float32).unsqueeze(1),
        "stream": torch.full((n,), stream, dtype=torch.int64),
        "prev": torch.tensor([PREV_NONE, *range(n - 1)], dtype=torch.int64),
        "action": torch.zeros(n, dtype=torch.int64),
        "reward": torch.zeros(n, dtype=torch.float32),
        "terminated": torch.zeros(n, dtype=torch.bool),
    }


def _ring(capacity: int = 64, exponent: float = 1.0, weight: float = 0.4) -> FrameReplay:
    return FrameReplay(
        capacity, (1,), torch.float32, stack=1, priority_exponent=exponent, priority_weight=weight
    )


def _counts(index: torch.Tensor, size: int) -> torch.Tensor:
    return torch.bincount(index, minlength=size).double()


@pytest.mark.parametrize("how", ["check", "no-check", "graph-safe"])
def test_transitions_are_drawn_in_proportion_to_their_priorities(how):
    replay = _ring(exponent=0.5)
    assert replay.prioritized and replay.add(_chain_push(0, 5)) == 4  # ids 1..4
    # Errors 0, 3, 8, 15 to the power 0.5 (plus the floor): about 0, 1.7, 2.8, 3.9.
    replay.update_priorities(torch.tensor([1, 2, 3, 4]), torch.tensor([0.0, 3.0, 8.0, 15.0]))
    want = (torch.tensor([0.0, 3.0, 8.0, 15.0], dtype=torch.float64) + 1e-6).sqrt()
    want /= want.sum()
    draws = torch.zeros(5, dtype=torch.float64)
    for _ in range(20):
        if how == "graph-safe":
            s = replay.sample(1_000, graph_safe=True)
        else:
            s = replay.sample(1_000, check=how == "check")
        draws += _counts(s["index"], 5)
        # every sample is a real transition: the frame before its destination
        assert torch.equal(s["next_obs"][:, 0] - 1, s["obs"][:, 0])
    assert draws[0] == 0  # the episode's first frame is no transition
    got = draws[1:] / draws.sum()
    # 20,000 draws: each share within 0.015 of its probability (over 4 standard errors)
    assert torch.allclose(got, want, atol=0.015), (got, want)
    assert got[0] < 0.01  # a zero error leaves only the floor


def test_new_transitions_get_the_highest_error_seen_and_first_frames_none():
    replay = _ring(exponent=1.0)
    replay.add(_chain_push(0, 3))  # ids 0 (first), 1, 2
    assert replay.priority is not None
    assert replay.priority[:3].tolist() == [0.0, 1.0, 1.0]  # the initial maximum is 1
    replay.update_priorities(torch.tensor([1]), torch.tensor([-5.0]))  # |error| counts
    replay.add(_chain_push(3, 2, stream=1))  # ids 3 (first), 4
    assert replay.priority[3].item() == 0.0
    assert replay.priority[4].item() == pytest.approx(5.0)  # the highest error so far
    assert replay.priority[2].item() == 1.0  # not trained on yet: unchanged


def test_importance_weights_follow_the_probabilities_and_the_largest_is_one():
    replay = _ring(exponent=1.0, weight=0.5)
    replay.add(_chain_push(0, 4))  # 4 records held, transitions 1, 2, 3
    replay.update_priorities(torch.tensor([1, 2, 3]), torch.tensor([1.0, 2.0, 5.0]))
    s = replay.sample(2_000, check=False)
    p = (torch.tensor([1.0, 2.0, 5.0], dtype=torch.float64) + 1e-6) / (8.0 + 3e-6)
    raw = (4 * p) ** -0.5  # N = 4 records held
    for k, index in enumerate((1, 2, 3)):
        mine = s["weight"][s["index"] == index]
        assert mine.numel() > 0
        # divided by the batch's largest: the rarest transition's (index 1, all drawn)
        torch.testing.assert_close(mine, torch.full_like(mine, float(raw[k] / raw[0])))
    assert s["weight"].max().item() == 1.0
    assert _ring(exponent=1.0, weight=0.0).prioritized  # beta 0: every weight 1
    flat = _ring(exponent=1.0, weight=0.0)
    flat.add(_chain_push(0, 4))
    flat.update_priorities(torch.tensor([1, 2, 3]), torch.tensor([1.0, 2.0, 5.0]))
    assert torch.all(flat.sample(100, check=False)["weight"] == 1.0)


def test_an_overwritten_record_keeps_the_newcomers_priority_and_ids_wrap():
    replay = _ring(capacity=8, exponent=1.0)
    replay.add(_chain_push(0, 6))  # ids 0..5 in slots 0..5
    replay.add(_chain_push(6, 5, stream=1))  # ids 6..10: 8, 9, 10 take slots 0, 1, 2
    # Ids 1 and 2 were drawn before the second push and are trained on after it; id 9
    # (slot 1 now) is in the same batch. Either order in the batch: id 9's error wins.
    for order in ([9, 1, 2], [1, 2, 9]):
        replay.update_priorities(torch.tensor([9]), torch.tensor([1.0]))  # from a known 1
        errors = {9: 7.0, 1: 3.0, 2: 3.0}
        replay.update_priorities(torch.tensor(order), torch.tensor([errors[i] for i in order]))
        assert replay.priority is not None
        assert replay.priority[1].item() == pytest.approx(7.0)  # id 9: held, updated
        assert replay.priority[2].item() == 1.0  # id 10, never trained on: unchanged
    # draws map slots back to the ids living there, past the wrap
    s = replay.sample(500, check=False)
    assert int(s["index"].min()) >= replay.oldest and int(s["index"].max()) < replay.total
    assert torch.equal(s["next_obs"][:, 0] - 1, s["obs"][:, 0])
    assert torch.equal(s["next_obs"][:, 0].long(), s["index"])  # frame value == its id


def test_stacks_are_still_whole_episodes_when_drawn_by_priority():
    core = _core(num_envs=3)
    replay = FrameReplay(
        1_000, (84, 84), torch.uint8, stack=4, priority_exponent=0.6, priority_weight=0.4
    )
    for _ in range(40):  # past the ring's capacity: chains run off its tail
        replay.add(core.collect(16))
        s = replay.sample(64, check=False)
        replay.update_priorities(s["index"], torch.rand(64) * 3)
    _check_samples(replay.sample(300))
    _check_samples(replay.sample(300, check=False))


def test_bad_priority_settings_and_updates_on_a_uniform_ring_are_refused():
    with pytest.raises(ValueError, match="priority_exponent=-1"):
        FrameReplay(8, (1,), torch.float32, stack=1, priority_exponent=-1)
    with pytest.raises(ValueError, match="priority_weight=2"):
        FrameReplay(8, (1,), torch.float32, stack=1, priority_exponent=0.6, priority_weight=2)
    uniform = FrameReplay(8, (1,), torch.float32, stack=1)
    uniform.add(_chain_push(0, 3))
    assert not uniform.prioritized and "weight" not in uniform.sample(4)
    with pytest.raises(RuntimeError, match="needs a prioritized replay"):
        uniform.update_priorities(torch.tensor([1]), torch.tensor([1.0]))


def test_the_flag_turns_on_ape_x_priorities():
    cfg = build_config(parse_args(["--prioritized"]))
    assert (cfg.priority_exponent, cfg.priority_weight) == (0.6, 0.4)
    assert "prioritized replay (exponent 0.6, importance weights 0.4)" in batch_line(cfg)
    plain = build_config(parse_args([]))
    assert plain.priority_exponent == 0.0 and "prioritized" not in batch_line(plain)
