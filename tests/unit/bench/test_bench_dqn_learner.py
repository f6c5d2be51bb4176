"""The learner-alone benchmark: it times real steps at the preset's replay ratio."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("ale_py", reason="needs the atari extra: pip install -e '.[atari]'")

_ROOT = str(Path(__file__).resolve().parents[3])
if _ROOT not in sys.path:  # `examples` is a repository folder, not an installed package
    sys.path.insert(0, _ROOT)

from benchmarks import dqn_learner  # noqa: E402

pytestmark = pytest.mark.timeout(120)


def test_it_times_steps_per_batch_and_the_frames_they_pay_for():
    got = dqn_learner.measure([8, 16], seconds=0.2, device="cpu", fill=2_000)
    rows = got["rows"]
    assert [r["batch_size"] for r in rows] == [8, 16]
    for r in rows:
        assert r["device"] == "cpu" and r["steps_per_s_no_sync"] > 0
        assert r["steps_per_s_sync_per_step"] > 0 and r["push_ms"] > 0
        assert r["samples_per_s"] == pytest.approx(r["steps_per_s_no_sync"] * r["batch_size"])
        # 8 samples per transition, 4 frames per transition
        assert r["frames_per_s_paid"] == pytest.approx(r["samples_per_s"] / 8 * 4)


def test_prioritized_times_steps_that_sample_and_update_priorities(monkeypatch):
    from examples.atari_dqn.replay import FrameReplay

    updates = []
    update = FrameReplay.update_priorities

    def counted(self, index, td_error):
        updates.append(len(index))
        update(self, index, td_error)

    monkeypatch.setattr(FrameReplay, "update_priorities", counted)
    got = dqn_learner.measure([8], seconds=0.2, device="cpu", fill=2_000, prioritized=True)
    (row,) = got["rows"]
    assert row["steps_per_s_no_sync"] > 0
    assert updates and set(updates) == {8}  # each timed step set its batch's priorities


def test_pushers_time_the_learner_in_its_thread_while_threads_push_to_it():
    got = dqn_learner.measure(
        [64], seconds=0.5, device="cpu", fill=500, env_id="CartPole-v1", pushers=4
    )
    (row,) = got["rows"]
    assert row["pushers"] == 4
    # the steps went on while pushes arrived; training started once 500 transitions
    # (8 pushes of 64) were in, and its pushes return in bursts (CartPole's lag is 0)
    assert row["steps_per_s_with_pushers"] > 0 and row["pushes_returned"] >= 500 // 64
    # CartPole's preset: 64 samples per transition (128 every 2), frame skip 1
    assert row["frames_per_s_paid"] == pytest.approx(row["samples_per_s"] / 64)


def test_profile_writes_a_chrome_trace_of_the_largest_batchs_steps(tmp_path):
    import json

    path = tmp_path / "learner_profile.json"
    got = dqn_learner.measure(
        [8, 16], seconds=0.1, device="cpu", fill=2_000, profile_path=str(path), profile_steps_n=3
    )
    first, last = got["rows"]
    assert "profile" not in first  # only the largest batch is profiled
    prof = last["profile"]
    assert prof["steps"] == 3 and prof["wall_ms_per_step"] > 0
    # on the CPU: no kernels, only the host ops' own time
    assert prof["gpu_ms_per_step"] == 0 and prof["gpu_busy"] == 0
    assert 0 < prof["cpu_ms_per_step"]
    names = [name for name, _ in prof["top"]]
    assert len(names) == 10 and any("conv" in n or "addmm" in n for n in names), names
    trace = json.loads(path.read_text())
    assert any(e.get("name", "").startswith("aten::") for e in trace["traceEvents"])


def test_device_time_is_counted_once_from_the_devices_own_entries():
    """A host op that launched a kernel carries its time too (``self_device_time_total``);
    only the kernel's own entry counts, as in torch's table."""
    from types import SimpleNamespace

    from torch.autograd import DeviceType

    def entry(device, device_us, annotation=False):
        return SimpleNamespace(
            device_type=device, self_device_time_total=device_us, is_user_annotation=annotation
        )

    conv_op = entry(DeviceType.CPU, 1_000)  # aten::cudnn_convolution, holding its kernel's
    kernel = entry(DeviceType.CUDA, 1_000)  # the kernel it launched
    marker = entry(DeviceType.CUDA, 5_000, annotation=True)  # a record_function's span
    got = dqn_learner.device_events([conv_op, kernel, marker])
    assert got == [kernel]
    assert sum(e.self_device_time_total for e in got) == 1_000
