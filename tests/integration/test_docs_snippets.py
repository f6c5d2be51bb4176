"""The Python of the README, the home page, docs/getting-started.md and the remote
functions page runs as written, each page's blocks in one fresh driver with clusters of
their own, and prints what its comments say. Blocks that need GPUs or several machines
are left out by their index."""

import re
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from procutil import kill_pids

pytestmark = pytest.mark.timeout(240)

ROOT = Path(__file__).resolve().parents[2]


def _blocks(page):
    return re.findall(r"```python\n(.*?)```", (ROOT / page).read_text(), re.S)


def _printed(tmp_path, source, timeout=150):
    """What running ``source`` as a script printed, its blank lines left out."""
    script = tmp_path / "snippet.py"
    script.write_text(source)
    proc = subprocess.Popen(
        [sys.executable, str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        descendants = [p.pid for p in psutil.Process(proc.pid).children(recursive=True)]
        kill_pids([proc.pid, *descendants])
        out, err = proc.communicate()
        pytest.fail(f"the snippet did not end within {timeout} s:\n{out}\n{err[-3000:]}")
    assert proc.returncode == 0, f"the snippet failed:\n{err[-3000:]}"
    return [line for line in out.splitlines() if line.strip()]


@pytest.mark.parametrize(
    ("page", "blocks", "expected"),
    [
        ("README.md", [0], ["32"]),  # block 1 places a learner on a GPU
        ("docs/index.md", [0], ["32"]),
        # a first actor; many calls, many results; options (block 3 asks for a GPU,
        # block 4 for a multi-node cluster)
        ("docs/getting-started.md", [0, 1, 2], ["11", "[0, 1, 2, 3]", "1"]),
        ("docs/concepts/functions.md", [0], ["torch.Size([16, 4, 84, 84])"]),
    ],
)
def test_a_pages_examples_run_as_written(tmp_path, page, blocks, expected):
    found = _blocks(page)
    source = "\n".join(found[i] for i in blocks)
    assert _printed(tmp_path, source) == expected, source
