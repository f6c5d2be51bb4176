"""The backoff of local worker replacements (issue 25): no process is started."""

from actorrt.cluster.driver import BACKOFF_MAX_S, replacement_delay


def test_a_worker_that_lived_is_replaced_at_once_and_a_crash_loop_backs_off():
    assert replacement_delay(0) == 0.0  # it lived a minute or more
    delays = [replacement_delay(n) for n in range(1, 8)]
    assert delays[:5] == [0.5, 1.0, 2.0, 4.0, 8.0]
    assert delays[5:] == [BACKOFF_MAX_S, BACKOFF_MAX_S] == [10.0, 10.0]
