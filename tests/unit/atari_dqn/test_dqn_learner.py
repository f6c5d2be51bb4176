"""The learner in-process: replay ratio, weights versions, target sync, checkpoints."""

from __future__ import annotations

import gc
import math
import threading
import time

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
    # where the loop's time went: acting and emulating are parts of it, counted per run
    assert 0 < result["act_seconds"] and 0 < result["env_seconds"]
    assert result["act_seconds"] + result["env_seconds"] <= result["seconds"]
    again = run_collect_loop(core, InProcessLink(learner), 200)
    assert again["env_seconds"] < core.env_seconds  # this run's share, not the total


def test_collect_loop_stops_at_its_time_budget_with_frames_left():
    cfg = _cfg(max_in_flight=3)
    learner = Learner(cfg)
    core = CollectorCore(cfg)
    none = run_collect_loop(core, InProcessLink(learner), 10**9, seconds=0.0)
    assert none["frames"] == 0 and none["pushes"] == 0
    t0 = time.monotonic()
    result = run_collect_loop(core, InProcessLink(learner), 10**9, seconds=0.5)
    assert 0 < result["frames"] < 10**9 and result["pushes"] == learner.pushes
    assert result["seconds"] >= 0.5 and time.monotonic() - t0 < _BOUND_S


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


# ----------------------------------------------------------------- the training thread
_BOUND_S = 30.0  # every wait on the training thread below is bounded by this


def _background(cfg):
    learner = Learner(cfg, background=True)
    return learner, CollectorCore(cfg)


def test_background_training_keeps_the_replay_ratio_once_drained():
    cfg = _cfg(max_train_lag=64)
    learner, core = _background(cfg)
    try:
        while learner.transitions < 600:
            learner.push(core.collect(cfg.steps_per_push))
            # The training thread trails the data by at most the lag bound, plus the
            # push that was just added.
            assert learner.stats()["train_lag"] <= cfg.max_train_lag + 16
        paid = learner.transitions - cfg.learning_starts
        # Pushes are 16 transitions, so the push that crossed learning_starts (100) paid
        # for all of its own: every transition from 96 on.
        assert learner.drain(_BOUND_S) == (paid + 4) // cfg.train_every
        stats = learner.stats()
        assert stats["train_lag"] < cfg.train_every and math.isfinite(stats["loss_mean"])
        assert stats["updates"] == learner.weight_version
    finally:
        learner.close()


def _updates_settle(learner: Learner, quiet_s: float = 0.5) -> int:
    """The learner's updates once they stop changing for ``quiet_s`` (bounded)."""
    deadline = time.monotonic() + _BOUND_S
    last, since = learner.updates, time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.05)
        now = learner.updates
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            return now
    raise AssertionError(f"the learner kept stepping for {_BOUND_S} s")


@pytest.mark.parametrize("most", [None, 32.0])
def test_spare_steps_reach_the_max_replay_ratio_and_never_pass_it(most):
    # replay ratio 8 (16 every 2); spare steps up to 32 samples: one per half transition
    cfg = _cfg(max_train_lag=64, max_replay_ratio=most)
    learner, core = _background(cfg)
    try:
        while learner.transitions < 400:
            learner.push(core.collect(cfg.steps_per_push))
        paying = learner.transitions - 96  # from the push that crossed learning_starts
        updates = _updates_settle(learner)
        if most is None:
            assert updates == paying // cfg.train_every  # the floor, exactly
        else:
            assert updates == int(paying * most / cfg.batch_size)  # the cap, exactly
            assert updates == 4 * (paying // cfg.train_every)
        assert learner.stats()["train_lag"] == 0 or most is None
        learner.push(core.collect(cfg.steps_per_push))  # 16 more transitions
        more = _updates_settle(learner) - updates
        assert more == (16 // cfg.train_every) * (4 if most else 1)
    finally:
        learner.close()


def test_a_max_replay_ratio_below_the_replay_ratio_is_refused():
    with pytest.raises(ValueError, match="max_replay_ratio=4 is below the replay ratio 8"):
        Learner(_cfg(max_replay_ratio=4.0))
    with pytest.raises(ValueError, match="must be > 0"):
        _cfg(max_replay_ratio=0)


class _SlowSteps(Learner):
    """A learner whose steps block until the test lets them go."""

    def __init__(self, *args, **kwargs):
        self.step_started = threading.Event()
        self.release = threading.Event()
        super().__init__(*args, **kwargs)

    def train_step(self):
        self.step_started.set()
        assert self.release.wait(_BOUND_S), "the test never released the step"
        return super().train_step()


def test_pushes_stats_and_weights_do_not_wait_behind_a_step():
    cfg = _cfg(max_train_lag=10_000)
    learner = _SlowSteps(cfg, background=True)
    core = CollectorCore(cfg)
    try:
        while not learner.step_started.is_set():
            learner.push(core.collect(cfg.steps_per_push))
            assert learner.transitions < 1_000, "the training thread never started a step"
        # A step is running (held): ingest, stats and weights are answered meanwhile.
        t0 = time.monotonic()
        learner.push(core.collect(cfg.steps_per_push))
        assert learner.stats()["updates"] == 0
        assert learner.get_weights()[0] == 0
        assert time.monotonic() - t0 < _BOUND_S / 2
        learner.release.set()
        assert learner.drain(_BOUND_S) > 0
    finally:
        learner.release.set()
        learner.close()


def test_a_push_waits_while_training_trails_by_more_than_the_lag():
    cfg = _cfg(max_train_lag=32)
    learner = _SlowSteps(cfg, background=True)
    core = CollectorCore(cfg)
    done = threading.Event()

    def push_past_the_lag():
        while learner.transitions < cfg.learning_starts + 4 * cfg.max_train_lag:
            learner.push(core.collect(cfg.steps_per_push))
        done.set()

    pusher = threading.Thread(target=push_past_the_lag, daemon=True)
    try:
        pusher.start()
        assert learner.step_started.wait(_BOUND_S)
        assert not done.wait(1.0), "pushes went on while training trailed past the lag"
        assert learner.stats()["train_lag"] <= cfg.max_train_lag + 16
        learner.release.set()
        assert done.wait(_BOUND_S)
    finally:
        learner.release.set()
        learner.close()
        pusher.join(_BOUND_S)


class _CountingCondition(threading.Condition):
    """Counts the waits a notify ended (a wait that timed out is not counted)."""

    def __init__(self, lock):
        super().__init__(lock)
        self.woken = 0

    def wait(self, timeout=None):
        notified = super().wait(timeout)
        if notified:
            self.woken += 1  # under the lock, which wait() took back
        return notified


def test_a_step_wakes_held_pushes_only_once_they_may_go_on():
    """Was: every step notified the one condition all waiters shared, so each push held
    by backpressure (48 in a 12-collector run) woke after every step only to wait again,
    and the training thread queued behind them for the GIL and the lock."""
    cfg = _cfg(max_train_lag=32)
    learner = Learner(cfg)  # no thread: _train_once runs here, one step a call
    core = CollectorCore(cfg)
    while learner.transitions < cfg.learning_starts + 64:
        learner.push(core.collect(cfg.steps_per_push))  # inline: each push pays its steps
    counting = _CountingCondition(learner._lock)
    learner._paid_cv = counting
    with learner._lock:
        learner._owed = cfg.max_train_lag + 3 * cfg.train_every
    released = []
    held = [
        threading.Thread(
            target=lambda k=k: (learner._wait_for_training(), released.append(k)), daemon=True
        )
        for k in range(4)
    ]
    for t in held:
        t.start()
    deadline = time.monotonic() + _BOUND_S
    while len(counting._waiters) < 4:  # every push held before the first step
        assert time.monotonic() < deadline, "the pushes were not held"
        time.sleep(0.01)
    updates = learner.updates
    for _ in range(2):  # training still trails by more than the lag after each
        assert learner._train_once(wait=0)
    time.sleep(0.2)
    assert counting.woken == 0 and released == []
    assert learner._train_once(wait=0)  # trailing by the lag: the held pushes go on
    for t in held:
        t.join(_BOUND_S)
    assert sorted(released) == [0, 1, 2, 3] and counting.woken == 4
    assert learner.updates == updates + 3


def test_a_collectors_pushes_are_added_in_its_order_whichever_thread_runs_first():
    cfg = _cfg(learning_starts=10**9)
    core = CollectorCore(cfg)
    pushes = [core.collect(cfg.steps_per_push) for _ in range(3)]
    in_order = Learner(cfg)
    for p in pushes:
        in_order.push(p)
    learner = Learner(cfg)
    # The second and third pushes reach the learner first, on threads of their own.
    late = [threading.Thread(target=learner.push, args=(p,)) for p in pushes[:0:-1]]
    for t in late:
        t.start()
    time.sleep(0.2)
    assert learner.pushes == 0, "a push was added before the ones its collector made first"
    learner.push(pushes[0])
    for t in late:
        t.join(_BOUND_S)
    assert learner.pushes == 3
    r, ref = learner.replay, in_order.replay
    assert torch.equal(r.prev[: r.total], ref.prev[: ref.total])
    assert torch.equal(r.frames[: r.total], ref.frames[: ref.total])


def test_a_failed_step_fails_the_next_push_and_a_dropped_learner_ends_its_thread():
    cfg = _cfg()
    learner, core = _background(cfg)

    def broken():
        raise ValueError("bad step")

    learner.train_step = broken
    with pytest.raises(RuntimeError, match="training thread failed") as info:
        for _ in range(100):
            learner.push(core.collect(cfg.steps_per_push))
            time.sleep(0.01)
    assert isinstance(info.value.__cause__, ValueError)

    other, _ = _background(cfg)
    thread = other._thread
    del other
    gc.collect()
    thread.join(_BOUND_S)
    assert not thread.is_alive()


def test_an_n_step_learner_samples_n_step_batches_and_trains(monkeypatch):
    cfg = _cfg(n_step=3)
    learner = Learner(cfg)
    asked = []
    real = learner.replay.sample

    def sample(*args, **kwargs):
        asked.append((kwargs.get("n_step"), kwargs.get("gamma")))
        return real(*args, **kwargs)

    monkeypatch.setattr(learner.replay, "sample", sample)
    run_in_process(cfg, 600, learner=learner)
    assert learner.updates > 0 and set(asked) == {(3, cfg.gamma)}
    assert math.isfinite(learner.stats()["loss_mean"])


def test_cuda_graph_leaves_a_learner_on_the_cpu_eager():
    cfg = _cfg(cuda_graph=True, lr_final_fraction=1.0)
    learner = Learner(cfg)
    assert learner.device.type == "cpu" and learner._graphed is None
    run_in_process(cfg, 300, learner=learner)
    assert learner.updates > 0 and learner.graph_batch is None
    assert not learner.optimizer.param_groups[0]["capturable"]


class _EagerGraph:
    """Stands in for GraphedStep on the CPU: every call runs the step's body eagerly, so
    the learner's graphed path (locks, counters, graph-safe sampling) runs here; the
    capture itself is tests/gpu's."""

    def __init__(self) -> None:
        self.calls = 0
        self.throttled = 0

    def throttle(self) -> None:
        self.throttled += 1

    def __call__(self, body):
        self.calls += 1
        return body()


@pytest.mark.parametrize("priority_exponent", [0.0, 0.6])
def test_the_graphed_path_makes_the_eager_update_on_its_own_batch(priority_exponent):
    from dqn_reference import eager_update, priorities_after, snapshot

    cfg = _cfg(
        cuda_graph=True, lr_final_fraction=1.0, n_step=3, priority_exponent=priority_exponent
    )
    learner = Learner(cfg)
    stand_in = _EagerGraph()
    learner._graphed = stand_in
    run_in_process(cfg, 300, learner=learner)
    assert learner.updates == stand_in.calls == stand_in.throttled > 0
    assert "discount" in learner.graph_batch  # the body sampled n-step, graph-safe
    before = snapshot(learner)
    updates = learner.updates
    loss = learner.train_step()
    assert learner.updates == updates + 1 and learner.weight_version == updates + 1
    batch = learner.graph_batch
    assert int(batch["index"].min()) >= learner.replay.oldest
    assert ("weight" in batch) == (priority_exponent > 0)
    want_loss, want, td_error = eager_update(learner, before, batch, capturable=False)
    assert torch.allclose(loss, want_loss)
    got = learner.q_net.state_dict()
    for k, v in want.items():
        assert not torch.equal(got[k], before["q_net"][k]), f"{k} did not change"
        assert torch.allclose(got[k], v, atol=1e-6), k
    if priority_exponent > 0:  # the body set the batch's priorities from its TD errors
        slots = batch["index"] % learner.replay.capacity
        assert learner.replay.priority is not None
        torch.testing.assert_close(
            learner.replay.priority[slots], priorities_after(learner, td_error)
        )
    stats = learner.stats()
    assert math.isfinite(stats["loss_mean"]) and math.isfinite(stats["q_mean"])


def test_a_channels_last_learner_makes_the_eager_learners_steps():
    import dataclasses

    import numpy as np

    from benchmarks.dqn_learner import _push

    cfg = config_for_env("ALE/Pong-v5", replay_capacity=2048, learning_starts=1 << 62, batch_size=8)
    plain, nhwc = Learner(cfg), Learner(dataclasses.replace(cfg, channels_last=True))
    for net in (nhwc.q_net, nhwc.target_net):
        assert net.features[0].weight.is_contiguous(memory_format=torch.channels_last)
    assert plain.q_net.features[0].weight.is_contiguous()
    assert _same_state(plain.q_net.state_dict(), nhwc.q_net.state_dict())  # one seed
    rng = np.random.default_rng(0)
    pushes = [_push(rng, 4, 16, j == 0, (84, 84), nhwc.n_actions) for j in range(4)]
    for learner in (plain, nhwc):
        for batch in pushes:
            learner.push(batch)
    for _ in range(3):  # the same samples (one replay seed), the same updates
        torch.testing.assert_close(nhwc.train_step(), plain.train_step(), rtol=1e-4, atol=1e-6)
    _, served = nhwc.get_weights()
    _, want = plain.get_weights()
    assert all(t.is_contiguous() for t in served.values())  # plain NCHW for the collectors
    for k in want:
        torch.testing.assert_close(served[k], want[k], rtol=1e-4, atol=1e-5)
