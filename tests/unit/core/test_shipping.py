"""actorrt.runtime.shipping: code pickled by value keeps its file name (nested code too).

The class is defined in a script's ``__main__`` (so cloudpickle takes it by value) and
loaded in another fresh interpreter; both bounded by ``subprocess.run``'s timeout.
"""

import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.timeout(60)

DUMP = """
import sys
from actorrt.runtime import shipping

class Learner:
    def step(self, values):
        def invert(v):
            return 1 / v  # the nested function's line
        return [invert(v) for v in values]

first, second = shipping.dumps(Learner), shipping.dumps(Learner)
assert first == second  # the same bytes each time: cache keys are built on them
sys.stdout.buffer.write(first)
"""

LOAD = """
import pickle, sys, traceback
Learner = pickle.loads(sys.stdin.buffer.read())
try:
    Learner().step([2, 0])
except ZeroDivisionError:
    traceback.print_exc(file=sys.stdout)
"""


def test_a_class_of_main_keeps_its_file_and_lines_in_another_process(tmp_path):
    script = tmp_path / "user_script.py"
    script.write_text(textwrap.dedent(DUMP))
    blob = subprocess.run(
        [sys.executable, str(script)], capture_output=True, timeout=30, check=True
    ).stdout
    out = subprocess.run(
        [sys.executable, "-c", LOAD], input=blob, capture_output=True, timeout=30, check=True
    ).stdout.decode()
    assert out.count(f'File "{script}"') == 3, out  # step, its comprehension, invert
    assert "in invert" in out and "return 1 / v  # the nested function's line" in out, out
    assert "<dynamic-code>" not in out
