"""The collector's communication share: the time its calls to the learner take, by kind."""

from __future__ import annotations

import time

from examples.atari_dqn.bench_support import run_in_process
from examples.atari_dqn.collector import TimedLink
from examples.atari_dqn.config import config_for_env


class _SlowLink:
    """Sending takes 20 ms, each wait for a reply 30 ms, the rest nothing."""

    def push(self, batch):
        time.sleep(0.02)
        return "ref"

    def request_weights(self, known_version):
        return "weights"

    def wait(self, pending, num_returns, timeout):
        time.sleep(0.03)
        return list(pending), []

    def ready(self, handle):
        return True

    def result(self, handle, timeout):
        return None


def test_sending_and_waiting_are_added_up_apart():
    link = TimedLink(_SlowLink())
    assert link.push({}) == "ref" and link.push({}) == "ref"
    assert link.wait(["ref"], 1, 1.0) == (["ref"], [])
    assert 0.04 <= link.send_seconds < 1.0
    assert 0.03 <= link.wait_seconds < 1.0


def test_the_collect_loop_reports_its_communication_share():
    cfg = config_for_env("CartPole-v1", num_envs_per_collector=2, learning_starts=10**9)
    got = run_in_process(cfg, 400, train=False)
    assert got["send_seconds"] >= 0 and got["wait_seconds"] >= 0
    share = (got["send_seconds"] + got["wait_seconds"]) / got["seconds"]
    assert got["comm_share"] == share
    assert 0 <= share < 1
