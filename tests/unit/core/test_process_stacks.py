"""actorrt.runtime.stacks: a process's thread stacks on SIGUSR1, and it runs on.

Each case runs in a process of its own (a signal handler is process-wide), bounded by
``subprocess.run``'s timeout.
"""

import subprocess
import sys
import textwrap
import threading
import time

import pytest

from actorrt.runtime import stacks

pytestmark = pytest.mark.timeout(60)


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_installed_the_signal_writes_every_threads_stack_and_the_process_runs_on():
    out = _run(
        """
        import os, threading
        from actorrt.runtime import stacks

        assert stacks.install()
        gate = threading.Event()

        def a_thread_that_waits():
            gate.wait(30)

        t = threading.Thread(target=a_thread_that_waits)
        t.start()
        stacks.request(os.getpid(), wait=0.2)
        gate.set()
        t.join()
        print("still running")
        """
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "still running"
    assert "in a_thread_that_waits" in out.stderr  # the other thread's stack too
    assert "Current thread" in out.stderr


def test_without_a_stderr_descriptor_nothing_is_installed():
    out = _run(
        """
        import io, sys
        from actorrt.runtime import stacks

        sys.__stderr__ = io.StringIO()  # no file descriptor (a capture)
        print(stacks.install())
        sys.__stderr__ = None  # pythonw: no stderr at all
        print(stacks.install())
        """
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "False"]


def test_a_request_to_a_process_that_is_gone_says_so_without_waiting():
    # Above the kernel's largest pid: no process has it (a reaped child's pid could be
    # reused by another test's process at once, which the signal would end).
    with open("/proc/sys/kernel/pid_max", encoding="ascii") as f:
        no_such_pid = int(f.read()) + 1
    started = time.monotonic()
    assert stacks.request(no_such_pid, wait=5.0) is False
    assert time.monotonic() - started < 2.0


def test_thread_stacks_names_threads_and_counts_actorrts_own_unless_asked():
    stop = threading.Event()

    def a_users_loop():
        stop.wait(30)  # the line that must show

    user = threading.Thread(target=a_users_loop, name="Learner-0123abcd_0")
    own = threading.Thread(target=stop.wait, args=(30,), name="actorrt-test-helper")
    user.start()
    own.start()
    try:
        text = stacks.thread_stacks()
        everything = stacks.thread_stacks(all_threads=True)
    finally:
        stop.set()
        user.join(10)
        own.join(10)
    assert 'Thread "Learner-0123abcd_0"' in text
    section = text.split('Thread "Learner-0123abcd_0"', 1)[1].split("Thread ", 1)[0]
    assert "in a_users_loop" in section and "stop.wait(30)  # the line that must show" in section
    assert 'Thread "actorrt-test-helper"' not in text
    assert "actorrt-* threads not shown: all_threads=True shows them" in text
    assert 'Thread "actorrt-test-helper"' in everything
    # The thread asking is left out (its stack is this call).
    assert "in test_thread_stacks_names_threads" not in everything
