"""Typed remote calls (TypedActor, @actorrt.method, ObjectRef[T], get -> T).

mypy (strict, the project's config) checks typed_sample.py clean and reports exactly
the errors marked in typed_errors.py; typed_sample's calls also run on the shared
cluster.
"""

import asyncio
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(240)

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
SAMPLE = HERE / "typed_sample.py"
ERRORS = HERE / "typed_errors.py"

# path:line: error: message  [code]
_ERROR = re.compile(r"^(?P<path>[^:]+):(?P<line>\d+): error: .*\[(?P<code>[\w-]+)\]$")
_EXPECTED = re.compile(r"#\s*E:\s*(?P<code>[\w-]+)\s*$")


def _expected(path):
    """(line, code) for each line of ``path`` marked ``# E: code``."""
    return {
        (n, m["code"])
        for n, text in enumerate(path.read_text().splitlines(), 1)
        if (m := _EXPECTED.search(text))
    }


@pytest.fixture(scope="module")
def mypy_errors(tmp_path_factory):
    """mypy's errors on both samples, by file name: one run (it takes seconds)."""
    api = pytest.importorskip("mypy.api")
    cache = tmp_path_factory.mktemp("mypy_cache")
    stdout, stderr, status = api.run(
        [
            "--config-file",
            str(ROOT / "pyproject.toml"),
            "--cache-dir",
            str(cache),
            "--no-color-output",
            "--no-error-summary",
            "--show-error-codes",
            str(SAMPLE),
            str(ERRORS),
        ]
    )
    assert status in (0, 1), f"mypy crashed ({status}):\n{stdout}\n{stderr}"
    errors: dict[str, set[tuple[int, str]]] = {}
    for line in stdout.splitlines():
        m = _ERROR.match(line)
        if m:
            errors.setdefault(Path(m["path"]).name, set()).add((int(m["line"]), m["code"]))
        else:
            assert ": note: " in line, f"unexpected mypy output: {line}\n{stdout}"
    return errors, stdout


def test_the_samples_use_the_strict_project_config():
    text = (ROOT / "pyproject.toml").read_text()
    assert re.search(r"^\[tool\.mypy\][^\[]*^strict = true$", text, re.M | re.S)
    assert len(_expected(ERRORS)) >= 10


def test_typed_calls_check_clean(mypy_errors):
    errors, stdout = mypy_errors
    others = {name for name in errors if name != ERRORS.name}
    assert not others, f"mypy errors outside typed_errors.py:\n{stdout}"


def test_wrong_calls_are_mypy_errors(mypy_errors):
    errors, stdout = mypy_errors
    got = errors.get(ERRORS.name, set())
    expected = _expected(ERRORS)
    assert got == expected, (
        f"missing: {sorted(expected - got)}, unexpected: {sorted(got - expected)}\n{stdout}"
    )


def test_typed_calls_run(cluster):
    import typed_sample

    out = typed_sample.run()
    assert out == {
        "added": 15,
        "many": [16, 18],
        "text": "half=18.0",
        "awaited": 18,
        "mixed": [18, "n=18.0"],
        "echoed": b"abab",
        "plain": 7,
        "twice": 36,
        "streamed": [18, 19],
        "labels": ["#0", "#1"],
        "scaled": [4.5, 4.0],
    }
    assert asyncio.run(typed_sample.run_async()) == 3


def test_typed_actor_and_method_are_static_only():
    import actorrt
    from actorrt.actor_class import _method_specs

    def f(self, x: int) -> int:
        return x

    assert actorrt.method(f) is f
    assert actorrt.TypedActor.__slots__ == ()
    assert not [n for n in vars(actorrt.TypedActor) if not n.startswith("__")]

    class A(actorrt.TypedActor):
        g = actorrt.method(f)

    class B:
        g = f

    assert _method_specs(A) == _method_specs(B)
    with pytest.raises(TypeError, match="decorates methods"):
        actorrt.method(42)  # type: ignore[call-overload]
