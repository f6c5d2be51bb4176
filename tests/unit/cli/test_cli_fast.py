"""The `actorrt` command starts fast (no torch unless needed) and its help is honest."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "clusters" / "gpu_learner_cpu_collectors.toml"

# Runs the CLI in a fresh interpreter (this pytest process imported torch long ago) and
# reports the exit status, what was printed and which heavy modules got imported.
_PROBE = r"""
import contextlib, io, json, sys
argv = json.loads(sys.argv[1])
out, err = io.StringIO(), io.StringIO()
with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
    try:
        import actorrt.cli
        code = actorrt.cli.main(argv)
    except SystemExit as e:
        code = e.code
print(json.dumps({
    "code": code, "out": out.getvalue(), "err": err.getvalue(),
    "torch": "torch" in sys.modules, "matplotlib": "matplotlib" in sys.modules,
}))
"""


def probe(*argv: str) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(list(argv))],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_import_actorrt_does_not_import_torch():
    code = "import sys, actorrt, actorrt.cli; print('torch' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["plan", "--help"],
        ["describe", "--help"],
        ["doctor", "--help"],
        ["worker", "--help"],
    ],
    ids=lambda a: " ".join(a),
)
def test_help_does_not_import_torch(argv):
    r = probe(*argv)
    assert r["code"] == 0, r["err"]
    assert "usage: actorrt" in r["out"]
    assert not r["torch"], f"`actorrt {' '.join(argv)}` imported torch"


def test_plan_and_describe_run_without_torch():
    r = probe("plan", str(EXAMPLE))
    assert r["code"] == 0, r["err"]
    assert "processes" in r["out"] and not r["torch"]
    r = probe("describe")
    assert r["code"] == 0, r["err"]
    assert "[[nodes]]" in r["out"] and not r["torch"]


def test_version_is_the_one_version_string():
    from actorrt import __version__
    from actorrt._version import __version__ as defined

    r = probe("--version")
    assert r["code"] == 0
    assert r["out"].strip() == f"actorrt {defined}" and __version__ == defined
    assert not r["torch"]
    pyproject = (ROOT / "pyproject.toml").read_text()
    # pyproject reads the version from _version.py rather than repeating it
    assert 'dynamic = ["version"]' in pyproject
    assert 'attr = "actorrt._version.__version__"' in pyproject


def test_help_names_only_commands_that_exist():
    from actorrt.cli import SUBCOMMANDS

    r = probe("--help")
    listed = [
        line.split()[0]
        for line in r["out"].split("COMMAND", 2)[-1].splitlines()
        if line.startswith("    ") and line.split()
    ]
    assert listed == list(SUBCOMMANDS)
    assert "bench" not in r["out"]
    for name in listed:
        sub = probe(name, "--help")
        assert sub["code"] == 0, sub["err"]


def test_python_dash_m_actorrt():
    out = subprocess.run(
        [sys.executable, "-m", "actorrt", "--version"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert out.returncode == 0 and out.stdout.startswith("actorrt ")


def test_lazy_names_resolve_and_actor_stays_the_decorator():
    # Run fresh: the order of first imports is what could go wrong.
    code = (
        "import actorrt\n"
        "from actorrt.actor_class import ActorClass\n"  # loads the module defining actor
        "assert callable(actorrt.actor) and actorrt.actor.__module__ == 'actorrt.actor_class'\n"
        "from actorrt import actor\n"
        "assert actor is actorrt.actor\n"
        "for name in actorrt.__all__:\n"
        "    assert getattr(actorrt, name) is not None, name\n"
        "assert set(actorrt.__all__) <= set(dir(actorrt))\n"
        "assert actorrt.placement.__name__ == 'actorrt.placement'\n"
        "try:\n"
        "    actorrt.no_such_name\n"
        "except AttributeError:\n"
        "    pass\n"
        "else:\n"
        "    raise SystemExit('no AttributeError')\n"
        "print('ok')\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_worker_rejects_a_bad_map_before_importing_torch():
    r = probe(
        "worker", "--init-method", "tcp://127.0.0.1:29500", "--rank", "1", "--world-size", "2",
        "--cuda-device-map", "1_0",
    )  # fmt: skip
    assert r["code"] == 2 and "<peer rank>_<local gpu>_<peer gpu>" in r["err"]
    assert not r["torch"]
