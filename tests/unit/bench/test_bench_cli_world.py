"""`python -m benchmarks` and the world-size suite: one child per size, failures as rows."""

from __future__ import annotations

import pytest

from benchmarks import cli


def test_merge_adds_world_sizes_instead_of_replacing_them():
    results = {"world_size": {"2": {"seconds": 1.0}}, "sync": {"median_us": 1}}
    cli.merge(results, {"world_size": {"8": {"seconds": 2.0}}})
    cli.merge(results, {"sync": {"p90_us": 2}, "async": 3})
    assert results == {
        "world_size": {"2": {"seconds": 1.0}, "8": {"seconds": 2.0}},
        "sync": {"median_us": 1, "p90_us": 2},
        "async": 3,
    }


def test_a_killed_world_is_a_failed_row_with_the_first_error_of_its_stderr(monkeypatch):
    seen = {}

    def fake_run_job(system, suite, cfg, timeout, stderr_path=None):
        seen.update(system=system, suite=suite, world=cfg["world"], timeout=timeout)
        with open(stderr_path, "w") as f:
            f.write("warming up\nRuntimeError: connect: Resource temporarily unavailable\n")
        return {"_error": "timed out after 210 s"}

    monkeypatch.setattr(cli, "run_job", fake_run_job)
    cfg = {"world_budget_s": 120.0}
    row = cli.world_job("torch", cfg, 64, None)["world_size"]["64"]
    assert seen == {"system": "torch", "suite": "world-size", "world": 64, "timeout": 210.0}
    assert row["world"] == 64
    assert row["failed"] == (
        "timed out after 210 s (its budget: 120 s); first error: RuntimeError: connect: "
        "Resource temporarily unavailable"
    )


def test_a_formed_world_comes_back_as_the_child_wrote_it(monkeypatch):
    res = {"world_size": {"8": {"world": 8, "seconds": 3.0}}, "_seconds": 4.0}
    monkeypatch.setattr(cli, "run_job", lambda *a, **k: res)
    assert cli.world_job("actorrt", {"world_budget_s": 120.0}, 8, None) is res


@pytest.mark.parametrize("value", ["1,8", "2,x", ","])
def test_bad_world_sizes_are_a_usage_error(tmp_path, capsys, monkeypatch, value):
    ran = []
    monkeypatch.setattr(cli, "run_job", lambda *a, **k: ran.append(a) or {})
    with pytest.raises(SystemExit) as e:
        cli.main(["--suites", "world-size", "--world-sizes", value, "--out", str(tmp_path)])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert f"--world-sizes {value!r}: give world sizes >= 2, e.g. 2,8,32,64,128" in err
    assert not ran and not list(tmp_path.iterdir())


def test_every_world_size_runs_in_a_child_of_its_own(tmp_path, monkeypatch, capsys):
    calls = []

    def fake_world_job(system, cfg, world, timeout):
        calls.append((system, world))
        return {"world_size": {str(world): {"world": world, "skipped": "not run: test"}}}

    monkeypatch.setattr(cli, "world_job", fake_world_job)
    # Ray counts as installed (the `bench` extra; CI has only `test`): no Ray runs here.
    find_spec = cli.importlib.util.find_spec
    monkeypatch.setattr(
        cli.importlib.util,
        "find_spec",
        lambda name, *a: object() if name == "ray" else find_spec(name, *a),
    )
    cli.main(
        ["--suites", "world-size", "--systems", "actorrt,ray", "--world-sizes", "2,8"]
        + ["--out", str(tmp_path)]
    )
    assert calls == [("actorrt", 2), ("actorrt", 8), ("ray", 2), ("ray", 8)]
    out = capsys.readouterr().out
    assert "start-up and memory by world size:" in out and "targets:" not in out
