"""The zygote on its own: it forks a worker per config, reports pids and exits, then ends."""

from __future__ import annotations

import json
import os
import subprocess

from actorrt.cluster import zygote


def _run_zygote(configs, timeout=120):
    report_r, report_w = os.pipe()
    config_r, config_w = os.pipe()
    proc = subprocess.Popen(
        zygote.command(report_w, config_r),
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
        pass_fds=(report_w, config_r),
        env={**os.environ, "ACTORRT_TOKEN": "t"},
    )
    os.close(report_w)
    os.close(config_r)
    with os.fdopen(config_w, "wb") as config:
        config.write(json.dumps(configs).encode() + b"\n")
    try:
        _, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    with os.fdopen(report_r) as f:
        reports = [line.split() for line in f]
    return proc.returncode, reports, err.decode(errors="replace")


def test_workers_that_fail_are_reported_with_their_errors_and_the_zygote_ends():
    base = {"host": "127.0.0.1", "port": 1, "world_size": 2, "timeout": 5}
    code, reports, err = _run_zygote(
        [
            {**base, "rank": 5},  # out of range: a clear message, exit status 1
            {**base, "rank": 1, "no_such_option": True},  # a bug: its traceback, status 1
        ]
    )
    assert code == 0, err
    pids = {int(r[1]): int(r[2]) for r in reports if r[0] == "pid"}
    exits = {int(r[1]): int(r[2]) for r in reports if r[0] == "exit"}
    assert set(pids) == {5, 1} and len(set(pids.values())) == 2
    assert exits == {5: 1, 1: 1}
    assert "rank 5 is out of range for world size 2" in err
    assert "Traceback" in err and "no_such_option" in err
