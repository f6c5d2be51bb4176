"""`python -m benchmarks` refuses names it does not know, before running or writing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import cli

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (
            ["--systems", "typo"],
            "--systems: unknown 'typo'; choose from baseline,torch,actorrt,ray",
        ),
        (["--systems", "actorrt,rey"], "--systems: unknown 'rey'"),
        (["--suites", "main,nope"], "--suites: unknown 'nope'; choose from main,tcp,nn,"),
        (["--systems", "baseline", "--suites", "nn"], "no measurement is both in --systems"),
        (["--systems", ""], "no measurement is both in --systems"),
    ],
)
def test_unknown_names_exit_2_and_write_nothing(tmp_path, capsys, monkeypatch, argv, match):
    out = tmp_path / "results"
    out.mkdir()
    latest = out / "latest.json"
    latest.write_text('{"kept": true}')
    ran = []
    monkeypatch.setattr(cli, "run_job", lambda *a, **k: ran.append(a) or {})
    with pytest.raises(SystemExit) as e:
        cli.main([*argv, "--out", str(out)])
    assert e.value.code == 2
    assert match in capsys.readouterr().err
    assert not ran
    assert latest.read_text() == '{"kept": true}' and sorted(out.iterdir()) == [latest]


def test_valid_names_are_every_system_and_suite_of_the_jobs():
    assert set(cli.SYSTEMS) == {s for s, _ in cli.JOBS}
    assert set(cli.SUITES) == {s for _, s in cli.JOBS}


def test_command_line_typo(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--systems", "typo", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "choose from baseline,torch,actorrt,ray" in proc.stderr
    assert not list(tmp_path.iterdir())
