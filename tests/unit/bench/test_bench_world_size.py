"""The world-size suite: failure rows, the memory guard, memory figures and the table."""

from __future__ import annotations

from benchmarks import world_report, world_size

MB = 2**20

TRACEBACK = """\
/venv/torch/distributed/distributed_c10d.py:3500: UserWarning: You are using a Backend
[W1123 02:55:01 tensorpipe_agent.cpp:123] RPC agent for w7 encountered error when reading
Traceback (most recent call last):
  File "<frozen runpy>", line 198, in _run_module_as_main
  File "/venv/torch/distributed/rpc/__init__.py", line 208, in init_rpc
    raise RuntimeError(f"init_rpc failed: {exc}")
RuntimeError: [tensorpipe/common/socket.cc:114] connect: Resource temporarily unavailable
Traceback (most recent call last):
RuntimeError: second failure
"""


def test_the_first_exception_line_is_found_past_warnings_and_frames():
    assert world_size.first_error_line(TRACEBACK) == (
        "RuntimeError: [tensorpipe/common/socket.cc:114] connect: Resource temporarily unavailable"
    )
    qualified = "noise\nactorrt.errors.ClusterError: init_rpc failed on the driver: ...\n"
    assert world_size.first_error_line(qualified).startswith("actorrt.errors.ClusterError: ")
    assert world_size.first_error_line("UserWarning: deprecated\nall fine\n") is None


def test_a_failure_row_keeps_the_first_line_of_the_message():
    row = world_size.failure(64, "\n  ClusterError: Followers timed out\nmore detail\n", 61.5)
    assert row == {"world": 64, "failed": "ClusterError: Followers timed out", "seconds": 61.5}
    assert world_size.failure(8, "")["failed"] == "(no message)"


def test_a_world_too_big_for_the_memory_available_is_not_started():
    assert world_size.memory_check("torch", 8, available_mb=20_000) is None
    why = world_size.memory_check("torch", 128, available_mb=20_000)
    assert why is not None and why.startswith("not run: 128 processes need about 27.0 GB")
    assert "19.5 GB available" in why


def test_run_turns_an_exception_into_a_failed_row(monkeypatch):
    def boom(world, budget):
        raise RuntimeError("init_rpc failed on the driver: Followers [1, 2] timed out\nstack")

    monkeypatch.setattr(world_size, "_actorrt", boom)
    monkeypatch.setattr(world_size, "memory_check", lambda *a: None)
    out = world_size.run("actorrt", {"world": 64, "world_budget_s": 1.0})
    row = out["world_size"]["64"]
    assert row["failed"] == (
        "RuntimeError: init_rpc failed on the driver: Followers [1, 2] timed out"
    )
    assert row["seconds"] >= 0


def test_run_skips_a_world_the_memory_guard_refuses(monkeypatch):
    monkeypatch.setattr(world_size, "memory_check", lambda *a: "not run: too big")
    monkeypatch.setattr(world_size, "_torch", lambda *a: 1 / 0)  # must not be called
    out = world_size.run("torch", {"world": 128, "world_budget_s": 1.0})
    assert out == {"world_size": {"128": {"world": 128, "skipped": "not run: too big"}}}


def test_memory_figures_are_medians_and_sums_in_mb():
    out = world_size.summarize_memory(
        driver=(300 * MB, 200 * MB),
        members=[(100 * MB, 50 * MB), (120 * MB, 60 * MB), (500 * MB, 70 * MB)],
        tree_pss=[200 * MB, 50 * MB, 60 * MB, 70 * MB, 20 * MB],
    )
    assert out == {
        "driver_rss_mb": 300,
        "tree_pss_mb": 400,
        "processes": 5,
        "member_rss_mb": 120,
        "member_pss_mb": 60,
    }
    assert "member_rss_mb" not in world_size.summarize_memory((1, 1), [], [1])


def _formed(world, seconds, answered=None, **extra):
    members = world - 1
    return {
        "world": world,
        "seconds": seconds,
        "answered": members if answered is None else answered,
        "members": members,
        "driver_rss_mb": 250.0,
        "member_rss_mb": 200.0,
        "member_pss_mb": 50.0,
        "tree_pss_mb": 700.0,
        **extra,
    }


def _doc():
    return {
        "results": {
            "actorrt": {
                "world_size": {
                    "8": _formed(8, 2.0),
                    "64": world_size.failure(
                        64, "ClusterError: Followers ['w1', 'w2', 'w3', 'w4'] ECONNREFUSED", 61.0
                    ),
                }
            },
            "torch": {
                "world_size": {
                    "8": _formed(8, 8.0),
                    "128": {"world": 128, "skipped": "not run: 128 processes need about"},
                }
            },
            "ray": {"world_size": {"8": _formed(8, 120.0, answered=3, budget_s=120.0)}},
        }
    }


def test_the_table_has_a_row_per_world_and_system_failures_included():
    rows = world_report.rows(_doc())
    assert [(r[0], r[1]) for r in rows] == [
        ("8", "actorrt"),
        ("8", "torch"),
        ("8", "ray"),
        ("64", "actorrt"),
        ("128", "torch"),
    ]
    actorrt8, torch8, ray8, actorrt64, torch128 = rows
    assert actorrt8[2:5] == ["7/7", "2.0", "-"]
    assert torch8[4] == "0.25x"  # actorrt's start-up / torch's
    assert ray8[2] == "3/7" and ray8[4] == "-"  # stopped by the budget: no ratio
    assert ray8[-1] == "3 of 7 answered within 120 s"
    assert actorrt64[3] == "61.0"
    assert actorrt64[-1] == "failed: ClusterError: Followers [4 names] ECONNREFUSED"
    assert torch128[-1].startswith("not run: 128 processes")
    assert world_report.table(_doc()).splitlines()[0].startswith("world | system")


def test_long_failures_are_compacted_for_the_table_only():
    names = ", ".join(f"'worker{i}'" for i in range(127))
    line = f"ClusterError: Followers [{names}] timed out. The first exception is ECONNREFUSED"
    assert world_report.compact(line) == (
        "ClusterError: Followers [127 names] timed out. The first exception is ECONNREFUSED"
    )
    assert world_report.compact("ranks [1, 2] left") == "ranks [1, 2] left"
    cut = world_report.compact("x" * 500, limit=20)
    assert cut == "x" * 17 + "..."
