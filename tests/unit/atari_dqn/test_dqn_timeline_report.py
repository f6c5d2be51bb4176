"""``examples.atari_dqn.timeline_report``: which part of a traced run was the limit."""

from __future__ import annotations

import json
import re

import pytest

from examples.atari_dqn import timeline_report

LEARNER, COLLECTOR, THREAD, GPU = 2, 3, 7, 1 << 48


def _trace(steps, gpu=None, collect_ms=0.0, wait_ms=0.0, parts=True):
    """``steps`` steps of 10 ms, 10 ms apart on the learner's training thread (parts:
    sample 2 ms, loss and backward 5 ms, optimizer 3 ms); ``gpu``: (its busy ms per step,
    its lag in ms) on a cuda:0 track; one collector whose every 20 ms holds
    ``collect_ms`` of collecting and ``wait_ms`` of waiting; ``parts`` False: steps
    without parts, as CUDA graph replays are."""
    ev = [
        {"ph": "M", "name": "thread_name", "pid": LEARNER, "tid": THREAD,
         "args": {"name": "learner-train"}},
        {"ph": "M", "name": "thread_name", "pid": LEARNER, "tid": GPU, "args": {"name": "cuda:0"}},
    ]  # fmt: skip

    def span(pid, tid, name, ts, dur, **args):
        ev.append({"cat": "span", "ph": "X", "pid": pid, "tid": tid, "name": name,
                   "ts": ts, "dur": dur, "args": args})  # fmt: skip

    for i in range(steps):
        t = i * 10_000.0
        span(LEARNER, THREAD, "train step", t, 10_000)
        for name, at, dur in (("sample", 0, 2_000), ("loss and backward", 2_000, 5_000),
                              ("optimizer", 7_000, 3_000)) if parts else ():  # fmt: skip
            span(LEARNER, THREAD, name, t + at, dur)
        if gpu is not None:
            busy, lag = gpu
            end = t + 10_000 + lag * 1000
            span(LEARNER, GPU, "train step", end - busy * 1000, busy * 1000, lag_ms=lag)
        if i % 2 == 0:
            if collect_ms:
                span(COLLECTOR, THREAD, "collect", t, collect_ms * 1000)
            if wait_ms:
                span(COLLECTOR, THREAD, "wait for learner", t + collect_ms * 1000, wait_ms * 1000)
    return {"traceEvents": ev}


def test_a_gpu_that_trails_the_thread_is_the_limit():
    f = timeline_report.summarize(_trace(100, gpu=(10.0, 40.0), collect_ms=10, wait_ms=10))
    assert f["steps"] == 100 and f["window_s"] == pytest.approx(1.0)
    assert f["learner_busy"] == pytest.approx(1.0)
    assert f["parts"] == pytest.approx({"sample": 0.2, "loss and backward": 0.5, "optimizer": 0.3})
    assert f["gpu_busy"] == pytest.approx(0.96, abs=0.01)  # the last 4 steps end past it
    assert f["gpu_lag_ms"] == 40.0
    assert f["collect_share"] == pytest.approx(0.5) and f["wait_share"] == pytest.approx(0.5)
    assert "the learner's GPU" in f["limit"]


def test_a_gpu_that_keeps_up_leaves_the_limit_with_the_thread():
    f = timeline_report.summarize(_trace(100, gpu=(3.0, 0.05)))
    assert f["gpu_busy"] == pytest.approx(0.3, abs=0.01)
    assert "training thread" in f["limit"] and f["collect_share"] is None


def test_busy_collectors_and_an_idle_learner():
    trace = _trace(100, collect_ms=19, wait_ms=0.5)
    for e in trace["traceEvents"]:  # the learner steps 10% of the time instead
        if e.get("pid") == LEARNER and e.get("cat") == "span":
            e["dur"] /= 10
    f = timeline_report.summarize(trace)
    assert f["learner_busy"] == pytest.approx(0.1, abs=0.01) and f["gpu_busy"] is None
    assert f["limit"] == "the collectors (emulators and acting)"
    text = timeline_report.report(trace)
    assert "learner thread in steps: 10%" in text and "collecting 95%" in text


def test_a_trace_without_steps_says_what_is_missing(tmp_path, capsys):
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": []}))
    with pytest.raises(SystemExit, match="--trace"):
        timeline_report.main([str(path)])
    path.write_text(json.dumps(_trace(10)))
    timeline_report.main([str(path)])
    out = capsys.readouterr().out
    assert "the limit (in the second half): the learner's gradient steps (on the CPU)" in out


def test_the_limit_is_read_past_the_start_ups_catch_up():
    # First half: the learner trains flat out on what was collected before its first
    # step while the collector waits; second half: the collector collects 19 of every
    # 20 ms and the learner steps 3 of every 10 ms, waiting for its pushes.
    trace = _trace(100, collect_ms=19, wait_ms=0.5, parts=False)
    for e in trace["traceEvents"]:
        if e.get("cat") != "span":
            continue
        if e["pid"] == LEARNER and e["ts"] >= 500_000:
            e["dur"] = 3_000
        elif e["pid"] == COLLECTOR and e["ts"] < 500_000:
            if e["name"] == "collect":
                e["dur"] = 1_000
            else:
                e["ts"], e["dur"] = e["ts"] - 18_000, 18_500  # right after its collect
    f = timeline_report.summarize(trace)
    assert f["learner_busy"] == pytest.approx(0.65, abs=0.02)  # the whole phase: neither
    assert f["collect_share"] == pytest.approx(0.5, abs=0.02)
    late = f["late"]
    assert late["learner_busy"] == pytest.approx(0.3, abs=0.02)
    assert late["collect_share"] == pytest.approx(0.95, abs=0.02)
    assert late["wait_share"] == pytest.approx(0.025, abs=0.01)
    assert f["limit"] == "the collectors (emulators and acting)"
    text = timeline_report.report(trace)
    assert re.search(r"second half of the phase: learner thread in steps 3\d%, collectors "
                     r"collecting 9\d%, waiting [0-5]%", text), text  # fmt: skip
    assert text.endswith("the limit (in the second half): the collectors (emulators and acting)")


def test_a_collector_that_finished_early_is_measured_over_its_own_part():
    # the collector collects 19 of every 20 ms, but only over the first half of the
    # phase; then the learner goes on training on what it owes
    trace = _trace(100, collect_ms=19, wait_ms=0.5)
    trace["traceEvents"] = [
        e for e in trace["traceEvents"] if e.get("pid") != COLLECTOR or e["ts"] < 500_000
    ]
    f = timeline_report.summarize(trace)
    assert f["collect_share"] == pytest.approx(0.95, abs=0.01), f  # not about half of it
    assert f["wait_share"] == pytest.approx(0.025, abs=0.005), f


def test_graph_replays_without_parts_are_reported_as_such():
    f = timeline_report.summarize(_trace(100, gpu=(10.0, 12.0), parts=False))
    assert f["parts"] == {"sample": 0.0, "loss and backward": 0.0, "optimizer": 0.0}
    assert "the learner's GPU" in f["limit"]
    text = timeline_report.report(_trace(100, gpu=(10.0, 12.0), parts=False))
    assert "(no parts: each step one CUDA graph replay)" in text
    assert "of a step" in timeline_report.report(_trace(100, gpu=(10.0, 12.0)))
