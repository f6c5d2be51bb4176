"""examples/atari_dqn/gpu_check.sh, the script a GPU loan runs, with a stand-in Python.

A loan is rare and short: a script that passes the wrong flags wastes it. These run the
script's own logic (run names parsed into flags, the graph gate, the Pong run's time
budget) with ``$PYTHON`` replaced by a stub that records its arguments and exits.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "examples" / "atari_dqn" / "gpu_check.sh"

pytestmark = pytest.mark.skipif(
    shutil.which("bash") is None or shutil.which("timeout") is None,
    reason="gpu_check.sh needs bash and coreutils' timeout",
)

_STUB = """#!/usr/bin/env bash
echo "$*" >> "$STUB_LOG"
case "$*" in
*"-m pytest"*)
    printf '%s' "${STUB_PYTEST_FAILED:-}"; echo "1 failed"; exit "${STUB_PYTEST_RC:-0}" ;;
esac
exit 0
"""


def _run(tmp_path: Path, **env: str) -> tuple[list[str], str]:
    """Runs the script; returns the stub's calls (one line each) and the summary."""
    stub = tmp_path / "python"
    stub.write_text(_STUB)
    stub.chmod(0o755)
    log = tmp_path / "calls.log"
    log.touch()
    out = tmp_path / "out"
    full = {**os.environ, "OUT": str(out), "PYTHON": str(stub), "STUB_LOG": str(log), **env}
    subprocess.run(["bash", str(SCRIPT)], cwd=ROOT, env=full, check=True, timeout=60)
    return log.read_text().splitlines(), (out / "summary.txt").read_text()


def test_throughput_run_names_become_the_benchmarks_flags(tmp_path):
    calls, summary = _run(
        tmp_path,
        STEPS="throughput",
        THROUGHPUT_RUNS="cpu-graph-b256-r16-m32-per cuda gpu-graph cpu-zzz",
    )
    assert len(calls) == 3, calls  # the two well-named runs, no more, then the pick
    first, second, chooser = calls
    assert "-m benchmarks.dqn_throughput" in first and "--transport cpu" in first
    assert first.endswith(
        "--cuda-graph --batch-size 256 --replay-ratio 16 --max-replay-ratio 32 --prioritized "
        f"--json {tmp_path}/out/throughput-cpu-graph-b256-r16-m32-per.json"
    )
    assert "--transport cuda" in second and "--cuda-graph" not in second
    # the batch for Pong, picked from the runs that ran
    out = f"{tmp_path}/out"
    assert chooser == (
        f"-m benchmarks.dqn_pick_batch {out}/throughput-cpu-graph-b256-r16-m32-per.json "
        f"{out}/throughput-cuda.json"
    )
    assert "benchmarks.dqn_pick_batch (exit 0)" in summary
    assert "throughput run gpu-graph: begin its name with cpu or cuda" in summary
    assert "throughput run cpu-zzz: unknown part zzz" in summary


def test_learner_mode_names_become_the_benchmarks_flags(tmp_path):
    calls, summary = _run(
        tmp_path, STEPS="graph", GRAPH_MODES="eager graph-cl eager-per-cl graph-zzz"
    )
    assert "-m pytest" in calls[0] and len(calls) == 5, calls  # the tests, three modes
    assert "-m pytest" in calls[1] and "test_gpu_dqn_channels_last.py" in calls[1]  # -cl
    eager, graph_cl, eager_per_cl = (c.split(" --json")[0] for c in calls[2:])
    assert eager.endswith("--batch-sizes 512 --seconds 5 --pushers 48")
    assert graph_cl.endswith("--seconds 5 --cuda-graph --channels-last --pushers 48")
    assert eager_per_cl.endswith("--seconds 5 --prioritized --channels-last --pushers 48")
    assert "learner mode graph-zzz: unknown part zzz" in summary
    (tmp_path / "again").mkdir()
    calls, _ = _run(tmp_path / "again", STEPS="graph", GRAPH_MODES="eager graph-per")
    assert len(calls) == 3, calls
    assert not any("channels_last" in c for c in calls), calls  # no -cl mode: no such tests


@pytest.mark.parametrize("graph_tests_rc", [0, 1])
def test_failed_graph_tests_drop_the_graph_from_the_pong_run_only(tmp_path, graph_tests_rc):
    calls, summary = _run(
        tmp_path,
        STEPS="graphtest pong",
        STUB_PYTEST_RC=str(graph_tests_rc),
        DEADLINE_S="200",
        PONG_TRANSPORT="cpu",
        PONG_EXTRA="--cuda-graph --max-replay-ratio 32 --eval-max-frames 0",
    )
    (pong,) = [c for c in calls if "-m examples.atari_dqn" in c]
    assert ("--cuda-graph" in pong) == (graph_tests_rc == 0)
    assert "--max-replay-ratio 32 --eval-max-frames 0" in pong and "--transport cpu" in pong
    # the run fills the command's time: DEADLINE_S less what ran before, less its end (60)
    train_s = int(pong.split("--train-seconds ")[1].split()[0])
    assert 130 <= train_s <= 140
    dropped = "--cuda-graph dropped from the pong and timeline runs" in summary
    assert dropped == (graph_tests_rc != 0)


_FAILED = "FAILED tests/gpu/test_gpu_dqn_learner.py::test_a_graphed_step_updates_{}[{}] - x\n"


@pytest.mark.parametrize(
    ("failed", "extra", "kept"),
    [
        # only the prioritized case failed, and the Pong run samples uniformly: kept
        (_FAILED.format("the_weights", "prioritized"), "", True),
        # ... but the Pong run is prioritized itself: dropped
        (_FAILED.format("the_weights", "prioritized"), " --prioritized", False),
        # a uniform case failed beside it: dropped
        (
            _FAILED.format("the_weights", "prioritized") + _FAILED.format("x", "one-step"),
            "",
            False,
        ),
        # the word in a uniform case's message is not its id: dropped
        (_FAILED.format("x", "one-step").replace(" - x", " - prioritized"), "", False),
        # a failure pytest did not name (a crash, an import error): dropped
        ("", "", False),
    ],
)
def test_the_graph_gate_keeps_the_graph_when_only_prioritized_cases_failed(
    tmp_path, failed, extra, kept
):
    calls, summary = _run(
        tmp_path,
        STEPS="graphtest pong",
        STUB_PYTEST_RC="1",
        STUB_PYTEST_FAILED=failed,
        PONG_TRANSPORT="cpu",
        PONG_EXTRA="--cuda-graph --max-replay-ratio 32" + extra,
    )
    (pong,) = [c for c in calls if "-m examples.atari_dqn" in c]
    assert ("--cuda-graph" in pong) == kept, summary
    assert ("--cuda-graph kept" in summary) == kept
    assert ("--cuda-graph dropped" in summary) == (not kept)
    for line in failed.splitlines():  # the failures are named in the summary
        assert line in summary


def _header_commands() -> list[str]:
    """The commands the script's header gives (``OUT=... bash ...``), one string each."""
    commands, current = [], None
    for line in SCRIPT.read_text().splitlines():
        if not line.startswith("#"):
            break  # the header ends where the code begins
        body = line[1:].strip()
        if body.startswith("OUT="):
            current = []
        if current is None:
            continue
        current.append(body.removesuffix("\\").strip())
        if not body.endswith("\\"):
            commands.append(" ".join(current))
            current = None
    return commands


def test_the_headers_pong_command_is_the_pong_recipe_spelled_out(tmp_path):
    # The loan's Pong run spells the recipe's flags out (so that the graph gate can drop
    # one); this keeps the two from drifting apart.
    import shlex

    from examples.atari_dqn.driver import parse_args

    (command,) = [c for c in _header_commands() if '"graphtest pong"' in c]
    words = shlex.split(command)
    env = dict(w.split("=", 1) for w in words[: words.index("bash")])
    for name in ("OUT", "PACK"):  # where the results go: the test's own
        env.pop(name)
    assert env.pop("PONG_PICK") == "/tmp/g1/pick-batch.log"  # the first command's pick
    env["PONG_PICK"] = str(tmp_path / "no-pick.log")  # none here: the recipe's batch
    assert env.pop("GRAPHTEST_FROM") == "/tmp/g1"  # the first command's graph verdict
    env["GRAPHTEST_FROM"] = str(tmp_path / "no-first-command")  # none: the tests run
    calls, _ = _run(tmp_path, **env)
    (pong,) = [c for c in calls if "-m examples.atari_dqn" in c]
    spelled = vars(parse_args(pong.split("-m examples.atari_dqn", 1)[1].split()))
    recipe = vars(parse_args(["--recipe", "pong-10min"]))
    # what the run fits to the command (its time, where it writes) or does not print
    for key in ("recipe", "train_seconds", "logdir", "no_progress"):
        spelled.pop(key)
        recipe.pop(key)
    assert spelled == recipe


def test_one_throughput_run_picks_no_batch(tmp_path):
    calls, summary = _run(tmp_path, STEPS="throughput", THROUGHPUT_RUNS="cpu-graph-m32")
    assert len(calls) == 1 and "-m benchmarks.dqn_throughput" in calls[0], calls
    assert "dqn_pick_batch" not in summary


@pytest.mark.parametrize(
    ("pick_line", "extra", "batch"),
    [
        ("pick: --batch-size 256 (throughput-cpu-graph-b256-m32)\n", "", "256"),
        ("pick: none (no run collected 15,000 frames/s)\n", "", None),  # the recipe's
        (None, "", None),  # no file: a fresh machine lost the first command's
        ("pick: --batch-size 256 (x)\n", " --batch-size 512", "512"),  # given wins
    ],
)
def test_the_pong_run_takes_the_batch_the_throughput_step_picked(tmp_path, pick_line, extra, batch):
    pick = tmp_path / "pick-batch.log"
    if pick_line is not None:
        pick.write_text("run   batch ...\n" + pick_line)
    calls, summary = _run(
        tmp_path,
        STEPS="pong",
        PONG_PICK=str(pick),
        PONG_EXTRA="--cuda-graph" + extra,
    )
    (pong,) = [c for c in calls if "-m examples.atari_dqn" in c]
    got = pong.split("--batch-size ")[1].split()[0] if "--batch-size" in pong else None
    assert got == batch
    assert pong.count("--batch-size") <= 1
    if not extra:
        said = f"batch 256, as {pick} picked" if batch else f"no batch picked in {pick}"
        assert said in summary


@pytest.mark.parametrize(
    ("kept_rc", "failed", "graph"),
    [
        ("0", "", True),  # the first command's tests passed: no second run, graph kept
        ("1", _FAILED.format("x", "one-step"), False),  # they failed: dropped
        (None, "", True),  # nothing kept (a fresh machine): the tests run again
    ],
)
def test_the_graph_gate_can_take_an_earlier_commands_verdict(tmp_path, kept_rc, failed, graph):
    first = tmp_path / "g1"
    first.mkdir()
    if kept_rc is not None:
        (first / "graphtest.rc").write_text(kept_rc + "\n")
        (first / "graphtest.log").write_text(failed + "1 passed\n")
    calls, summary = _run(
        tmp_path,
        STEPS="graphtest pong",
        GRAPHTEST_FROM=str(first),
        PONG_EXTRA="--cuda-graph --max-replay-ratio 32",
    )
    ran_tests = any(c.startswith("-m pytest") for c in calls)
    assert ran_tests == (kept_rc is None)
    (pong,) = [c for c in calls if "-m examples.atari_dqn" in c]
    assert ("--cuda-graph" in pong) == graph, summary
    if kept_rc is None:  # this command's own verdict, kept for a later one
        assert (tmp_path / "out" / "graphtest.rc").read_text().strip() == "0"
    else:
        assert f"the graph tests as {first} ran them" in summary
