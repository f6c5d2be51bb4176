"""The DQN example on a real local actorrt cluster: collectors stream Pong to the learner.

Starts worker processes; every wait is bounded and the cluster is always shut down.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("ale_py", reason="needs the atari extra: pip install -e '.[atari]'")
pytest.importorskip("cv2", reason="AtariPreprocessing needs opencv-python-headless")

import torch  # noqa: E402

_ROOT = Path(__file__).resolve().parents[2]
if str(_ROOT) not in sys.path:  # `examples` is a repository folder, not an installed package
    sys.path.insert(0, str(_ROOT))

import actorrt  # noqa: E402
from examples.atari_dqn.checkpoint import load_checkpoint, save_checkpoint  # noqa: E402
from examples.atari_dqn.config import config_for_env  # noqa: E402
from examples.atari_dqn.driver import launch_actors  # noqa: E402
from examples.atari_dqn.learner import Learner  # noqa: E402

pytestmark = pytest.mark.slow

_T = 120  # seconds: bound on any single wait below


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k].cpu(), b[k].cpu()) for k in a)


def test_pong_collectors_stream_to_learner(cluster, tmp_path):
    cfg = config_for_env(
        "ALE/Pong-v5",
        num_envs_per_collector=2,
        steps_per_push=8,
        max_in_flight=2,
        weight_refresh_every=16,
        learning_starts=64,
        batch_size=16,
        train_every=4,
        target_update_every=10,
        replay_capacity=4096,
        # Pushes wait for the steps they paid for: the learner's versions then advance
        # while the collectors run, which the weight refreshes below count on (with the
        # preset's lag of 1,024 transitions a loaded machine could train them all late).
        max_train_lag=0,
    )
    learner, collectors = launch_actors(cfg, 2, learner_threads=1)
    _, w0 = actorrt.get(learner.get_weights.remote(-1, cpu=True), timeout=_T)

    frames_each = 800  # 200 agent steps per collector
    results = actorrt.get([c.run.remote(frames_each) for c in collectors], timeout=_T)
    # The learner trains in a thread of its own: the steps the last pushes paid for.
    updates = actorrt.get(learner.drain.remote(), timeout=_T)
    stats = actorrt.get(learner.stats.remote(), timeout=_T)
    assert stats["updates"] == updates and stats["train_lag"] < cfg.train_every
    version, w1_ref = actorrt.get(learner.get_weights.remote(-1), timeout=_T)
    # The learner publishes weights: the reply holds a ref to the object in its process.
    assert isinstance(w1_ref, actorrt.ObjectRef) and w1_ref._loc.owner == learner.worker
    w1 = actorrt.get(w1_ref, timeout=_T)

    # Transitions reached the learner: every agent step of every collector, none lost.
    agent_steps = sum(r["agent_steps"] for r in results)
    assert agent_steps >= 2 * frames_each // 4
    assert stats["transitions"] == agent_steps
    assert stats["frames"] == sum(r["frames"] for r in results)
    assert stats["pushes"] == sum(r["pushes"] for r in results)
    assert stats["replay_size"] >= agent_steps  # plus the episode-start frames
    # The learner trained: finite loss, weights moved.
    assert stats["updates"] >= (agent_steps - cfg.learning_starts) // cfg.train_every - 1 > 0
    assert math.isfinite(stats["last_loss"])
    assert version == stats["updates"]
    assert not _same(w0, w1), "the learner's weights did not change"
    # Collectors refreshed their policy with trained weights, with bounded pushes in flight.
    for r in results:
        assert r["weight_refreshes"] >= 2, r
        assert 0 < r["weight_version"] <= version
        assert 1 <= r["max_in_flight_seen"] <= cfg.max_in_flight
    assert stats["weights_served"] >= sum(r["weight_refreshes"] for r in results)
    # each version was put once, however many collectors asked for it
    assert 0 < stats["weights_published"] <= stats["weights_served"]

    # Checkpoint round trip: save, load into a fresh learner actor, same weights.
    state = actorrt.get(learner.checkpoint_state.remote(), timeout=_T)
    path = save_checkpoint(tmp_path / "checkpoint.pt", state, stats["frames"], cfg.env_id)
    loaded = load_checkpoint(path, cfg.env_id)
    fresh = actorrt.actor(label="learner")(Learner).remote(cfg.to_dict(), num_threads=1)
    _, before = actorrt.get(fresh.get_weights.remote(-1), timeout=_T)
    assert not _same(before, w1)
    actorrt.get(fresh.load_checkpoint_state.remote(loaded["learner"]), timeout=_T)
    _, after = actorrt.get(fresh.get_weights.remote(-1), timeout=_T)
    assert _same(after, w1)
    fresh_stats = actorrt.get(fresh.stats.remote(), timeout=_T)
    assert fresh_stats["updates"] == stats["updates"]
    assert fresh_stats["transitions"] == stats["transitions"]


def _line(out: str, prefix: str) -> str:
    lines = [ln for ln in out.splitlines() if ln.startswith(prefix)]
    assert len(lines) == 1, f"expected one {prefix!r} line in:\n{out[-3000:]}"
    return lines[0][len(prefix) :]


def _holders(plan: dict, label: str) -> list[str]:
    return [p["name"] for p in plan["processes"] for s in p["slots"] if s["label"] == label]


def _actor_processes(out: str) -> dict[str, list[str]]:
    """``actors: learner=worker1@host collector=...``: label -> processes, as printed."""
    where: dict[str, list[str]] = {}
    for item in _line(out, "actors: ").split():
        label, _, at = item.partition("=")
        where.setdefault(label, []).append(at.split("@")[0])
    return where


def test_driver_cli_runs_saves_and_resumes(tmp_path):
    """``python -m examples.atari_dqn`` end to end (CartPole: fast), then ``--resume``."""
    logdir = tmp_path / "run"
    base = [
        sys.executable, "-m", "examples.atari_dqn", "--env", "CartPole-v1",
        "--logdir", str(logdir), "--no-progress", "--eval-episodes", "2",
        "--learning-starts", "200",
        "--learner-gpus", "0",  # the CPU road, also where a GPU exists (tests/gpu has the other)
    ]  # fmt: skip

    def run(*extra: str) -> str:
        proc = subprocess.run(
            [*base, *extra], cwd=_ROOT, capture_output=True, text=True, timeout=_T
        )
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        return proc.stdout

    out = run("--total-frames", "4000", "--eval-every", "500", "--trace")
    assert "final evaluation: env=CartPole-v1 episodes=2" in out
    # --trace: one Chrome trace of every process, where the collectors' pushes ran on
    # the learner's process, each wait and run inside the collector's round trip
    trace = json.loads((logdir / "timeline.json").read_text())
    rows = {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"}
    assert len(rows) == 4, rows  # the driver, the learner's worker, two collectors'
    runs = {e["args"]["call"]: e for e in trace["traceEvents"] if e.get("cat") == "run"}
    assert {"Learner.push", "Collector.run"} <= {e["name"] for e in runs.values()}
    trips = {e["id"]: e for e in trace["traceEvents"] if e.get("cat") == "call" and e["ph"] == "b"}
    pushes = [k for k, e in runs.items() if e["name"] == "Learner.push" and k in trips]
    assert pushes and all(trips[k]["ts"] <= runs[k]["ts"] for k in pushes)
    assert all(trips[k]["args"]["bytes_out"] > 0 for k in pushes)  # the batches' tensors
    # the example's own spans: the learner's steps on its training thread, their parts
    # inside them, and the collectors' collection on the collectors' processes
    spans = [e for e in trace["traceEvents"] if e.get("cat") == "span"]
    steps = [e for e in spans if e["name"] == "train step"]
    learner_pid = runs[pushes[0]]["pid"]
    assert steps and {e["pid"] for e in steps} == {learner_pid}, {e["name"] for e in spans}
    threads = {
        (e["pid"], e["tid"]): e["args"]["name"]
        for e in trace["traceEvents"]
        if e["name"] == "thread_name"
    }
    assert {threads[e["pid"], e["tid"]] for e in steps} == {"learner-train"}
    for part in ("sample", "loss and backward", "optimizer"):
        inner = [e for e in spans if e["name"] == part]
        assert len(inner) == len(steps), part
        assert all(
            any(
                s["tid"] == e["tid"]
                and s["ts"] <= e["ts"]
                and e["ts"] + e["dur"] <= s["ts"] + s["dur"] + 1
                for s in steps
            )
            for e in inner
        ), part
    collects = {e["pid"] for e in spans if e["name"] == "collect"}
    assert len(collects) == 2 and learner_pid not in collects, collects
    # ... and the run says where its time went, read from that file
    assert "learner thread in steps: " in out and "the limit (in the second half): " in out, out[
        -2000:
    ]
    assert "eval at" in out  # the periodic evaluation ran
    for name in ("metrics.csv", "learning_curve.png", "checkpoint.pt", "plan.json"):
        assert (logdir / name).stat().st_size > 0, name
    assert list(logdir.glob("events.out.tfevents.*")), "no TensorBoard event file"
    first = load_checkpoint(logdir / "checkpoint.pt", "CartPole-v1")
    assert first["frames"] >= 4000

    # The layout decided the local cluster: one worker per slot, each slot on its own
    # worker, and the actors ran where plan.json says.
    plan = json.loads((logdir / "plan.json").read_text())
    assert plan["strategy"] == "spread" and plan["talks"] == [["collector", "learner"]]
    assert [p["labels"] for p in plan["processes"]] == [
        [],
        ["learner"],
        ["collector"],
        ["collector"],
    ]
    learner, collectors = _holders(plan, "learner"), _holders(plan, "collector")
    assert _actor_processes(out) == {"learner": learner, "collector": collectors}
    assert _line(out, "placement (spread, transport cpu): ") == (
        f"learner={learner[0]}@{plan['processes'][1]['node']} collector="
        + ",".join(f"{p['name']}@{p['node']}" for p in plan["processes"][2:])
    )

    # --num-workers still sets the local cluster's size: 2 workers for 3 slots.
    out = run("--total-frames", "6000", "--resume", "--num-workers", "2")
    assert f"resuming from {logdir / 'checkpoint.pt'} at {first['frames']:,} frames" in out
    second = load_checkpoint(logdir / "checkpoint.pt", "CartPole-v1")
    assert second["frames"] >= 6000
    assert second["learner"]["updates"] > first["learner"]["updates"]
    rows = (logdir / "metrics.csv").read_text().splitlines()
    assert rows[0].startswith("wall_s,frames") and rows.count(rows[0]) == 1  # appended
    walls = [float(r.split(",")[0]) for r in rows[1:]]
    assert walls == sorted(walls), walls  # the resumed run's wall_s goes on from the first's
    plan = json.loads((logdir / "plan.json").read_text())  # this run's plan replaced it
    assert len(plan["processes"]) == 3
    where = _actor_processes(out)
    assert where == {"learner": _holders(plan, "learner"), "collector": _holders(plan, "collector")}
    assert len(where["collector"]) == 2 and {*where["learner"], *where["collector"]} == {
        "worker1",
        "worker2",
    }


def test_the_last_metrics_row_says_what_the_summary_line_says(tmp_path):
    """Pong's learner lags its collectors: the steps it drains at the end count in the
    last row of metrics.csv (was: the row before the drain, 0 updates against 16)."""
    logdir = tmp_path / "pong"
    argv = [
        sys.executable, "-m", "examples.atari_dqn", "--total-frames", "8000",
        "--eval-episodes", "1", "--eval-max-frames", "2000", "--no-progress",
        "--learner-gpus", "0", "--logdir", str(logdir),
    ]  # fmt: skip
    proc = subprocess.run(argv, cwd=_ROOT, capture_output=True, text=True, timeout=_T)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = _line(proc.stdout, "final evaluation: ")
    updates = int(summary.split(" updates=")[1].split()[0].replace(",", ""))
    rows = (logdir / "metrics.csv").read_text().splitlines()
    last = dict(zip(rows[0].split(","), rows[-1].split(","), strict=True))
    assert updates > 0 and int(last["updates"]) == updates, (summary, rows[-2:])
    assert last["eval_return"] != "" and last["loss_mean"] != ""


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a GPU")
def test_a_gpu_the_machine_lacks_ends_the_run_with_one_error_line(tmp_path):
    argv = [
        sys.executable, "-m", "examples.atari_dqn", "--env", "CartPole-v1",
        "--transport", "cuda", "--logdir", str(tmp_path / "run"), "--no-progress",
    ]  # fmt: skip
    proc = subprocess.run(argv, cwd=_ROOT, capture_output=True, text=True, timeout=_T)
    assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert "python -m examples.atari_dqn: error: label 'learner' needs 1 GPU" in proc.stderr
    assert "--learner-gpus, --collector-gpus" in proc.stderr
    assert not (tmp_path / "run").exists()  # a run that could not start leaves no logdir


def test_a_multi_node_run_whose_workers_never_come_says_how_to_wait_longer(tmp_path):
    from netns import free_port

    argv = [
        sys.executable, "-m", "examples.atari_dqn", "--env", "CartPole-v1",
        "--init-method", f"tcp://127.0.0.1:{free_port()}", "--world-size", "2",
        "--start-timeout", "2", "--logdir", str(tmp_path / "run"), "--no-progress",
    ]  # fmt: skip
    proc = subprocess.run(argv, cwd=_ROOT, capture_output=True, text=True, timeout=_T)
    assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert "rank(s) 1 of 2 never joined within 2 s" in proc.stderr, proc.stderr[-3000:]
    assert "give them time with --start-timeout S" in proc.stderr
    assert not (tmp_path / "run").exists()


def test_train_seconds_ends_a_run_on_time_short_of_its_frames(tmp_path):
    """``--train-seconds``: the collectors stop at the budget, then the run evaluates."""
    logdir = tmp_path / "timed"
    total = 10_000_000  # hours of CartPole here: only the budget can end this run
    proc = subprocess.run(
        [sys.executable, "-m", "examples.atari_dqn", "--env", "CartPole-v1",
         "--logdir", str(logdir), "--no-progress", "--eval-episodes", "2",
         "--learning-starts", "200", "--learner-gpus", "0",
         "--total-frames", str(total), "--train-seconds", "6"],
        cwd=_ROOT, capture_output=True, text=True, timeout=_T,
    )  # fmt: skip
    out = proc.stdout
    assert proc.returncode == 0, out[-3000:] + proc.stderr[-3000:]
    frames = load_checkpoint(logdir / "checkpoint.pt", "CartPole-v1")["frames"]
    assert 0 < frames < total
    assert (
        f"--train-seconds 6: collection and training stopped at the time budget, at "
        f"{frames:,} of {total:,} frames" in out
    ), out[-2000:]
    assert "final evaluation: env=CartPole-v1 episodes=2" in out


def test_driver_plan_flag_prints_the_plan_and_exits(tmp_path):
    """``--plan json``: the plan of the layout, printed; nothing trained or written."""
    logdir = tmp_path / "never"
    proc = subprocess.run(
        [sys.executable, "-m", "examples.atari_dqn", "--env", "CartPole-v1", "--collectors",
         "3", "--logdir", str(logdir), "--plan", "json"],
        cwd=_ROOT, capture_output=True, text=True, timeout=_T,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    plan = json.loads(proc.stdout)
    assert [(s["label"], s["count"]) for s in plan["specs"]] == [("learner", 1), ("collector", 3)]
    assert [p["labels"] for p in plan["processes"][1:]] == [["learner"]] + [["collector"]] * 3
    assert not logdir.exists(), "--plan trained or wrote outputs"


def _run_killing(tmp_path, extra: list[str], victim) -> tuple[int, str, Path]:
    """Runs the driver on CartPole and SIGKILLs the pid ``victim(logdir)`` names mid-run.

    ``victim`` returns None until the moment has come (polled every 0.2 s, for at most
    ``_T`` seconds). Returns the exit code, the output and the logdir.
    """
    import os
    import signal
    import time

    logdir = tmp_path / "run"
    argv = [
        sys.executable, "-m", "examples.atari_dqn", "--env", "CartPole-v1",
        "--logdir", str(logdir), "--no-progress", "--eval-episodes", "2",
        "--learning-starts", "200", "--learner-gpus", "0", "--collectors", "2",
        "--total-frames", "30000", *extra,
    ]  # fmt: skip
    out_path = tmp_path / "out.txt"
    with open(out_path, "w") as out:
        proc = subprocess.Popen(argv, cwd=_ROOT, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + _T
        pid = None
        while pid is None and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
            pid = victim(logdir)
        assert pid is not None, out_path.read_text()[-3000:]
        os.kill(pid, signal.SIGKILL)
        rc = proc.wait(timeout=3 * _T)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)  # the run's own process group, by its pid
            proc.wait(timeout=30)
    # torch prints a "Leaking RRef" line per RRef left at a crashed driver's exit: left
    # out, so that a failure shows the run's own last lines
    lines = out_path.read_text().splitlines(keepends=True)
    text = "".join(line for line in lines if not line.startswith("Leaking RRef"))
    assert "final evaluation: env=CartPole-v1 episodes=2" in text, text[-4000:]
    outputs = ["metrics.csv", "learning_curve.png", "checkpoint.pt"]
    if "ray" not in extra:  # Ray has no plan
        outputs.append("plan.json")
    for name in outputs:
        assert (logdir / name).stat().st_size > 0, name
    return rc, text, logdir


@pytest.mark.parametrize("backend", ["actorrt", "ray"])
def test_a_collector_killed_mid_run_is_restarted_and_the_run_finishes(tmp_path, backend):
    """Kill -9 a collector's process while it collects: the collector is recreated
    (``--collector-restarts``, the actor's max_restarts), gets a new run, and the training
    run ends with all its outputs and its whole frame budget. The same on Ray."""
    import time

    if backend == "ray":
        pytest.importorskip("ray", reason="ray is not installed: the Ray backend cannot run")

    started: list[float] = []

    def collector_pid(logdir: Path) -> int | None:
        where = logdir / "collectors.json"
        if not where.exists():
            return None
        started.append(time.monotonic())
        if time.monotonic() - started[0] < 2.0:  # in the middle of collecting
            return None
        return json.loads(where.read_text())[0]["pid"]

    extra = ["--collector-restarts", "2", "--backend", backend]
    rc, text, logdir = _run_killing(tmp_path, extra, collector_pid)
    assert rc == 0, text[-4000:]
    assert "collector 0 died" in text and "restarted" in text, text[-4000:]
    assert load_checkpoint(logdir / "checkpoint.pt", "CartPole-v1")["frames"] >= 30000


@pytest.mark.parametrize("backend", ["actorrt", "ray"])
def test_a_learner_killed_mid_run_is_resumed_from_its_checkpoint(tmp_path, backend):
    """Kill -9 the learner's process once a checkpoint exists: with ``--learner-restarts``
    the driver makes a new learner that loads that checkpoint (its own counters go on
    from the checkpoint's, not from 0), the collectors push to it, and the run ends with
    all its outputs. The same on Ray (``--backend ray``)."""
    if backend == "ray":
        pytest.importorskip("ray", reason="ray is not installed: the Ray backend cannot run")
    seen: dict = {}

    def learner_pid(logdir: Path) -> int | None:
        where, ckpt = logdir / "learner.json", logdir / "checkpoint.pt"
        if not (where.exists() and ckpt.exists()):
            return None
        seen["checkpoint"] = load_checkpoint(ckpt, "CartPole-v1")  # written atomically
        return json.loads(where.read_text())[0]["pid"]

    extra = ["--eval-every", "3000", "--learner-restarts", "1", "--backend", backend]
    rc, text, logdir = _run_killing(tmp_path, extra, learner_pid)
    assert rc == 0, text[-4000:]
    assert "learner died" in text and "learner restarted on" in text, text[-4000:]
    first, second = json.loads((logdir / "learner.json").read_text())
    assert second["pid"] != first["pid"]
    assert second["checkpoint"] == str(logdir / "checkpoint.pt")
    # The new learner reported these counters itself, right after loading: the
    # checkpoint's (that one, or a later one written before the kill landed).
    before = seen["checkpoint"]
    assert second["updates"] >= before["learner"]["updates"] > 0
    assert second["frames"] >= before["frames"] > 0
    final = load_checkpoint(logdir / "checkpoint.pt", "CartPole-v1")
    assert final["frames"] >= 30000
    assert final["learner"]["updates"] > second["updates"]  # it went on training
