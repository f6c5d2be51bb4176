"""The backoff of local worker replacements (issue 25): no process is started."""

import threading
import time

from actorrt.cluster.driver import BACKOFF_MAX_S, Driver, replacement_delay


def test_a_worker_that_lived_is_replaced_at_once_and_a_crash_loop_backs_off():
    assert replacement_delay(0) == 0.0  # it lived a minute or more
    delays = [replacement_delay(n) for n in range(1, 8)]
    assert delays[:5] == [0.5, 1.0, 2.0, 4.0, 8.0]
    assert delays[5:] == [BACKOFF_MAX_S, BACKOFF_MAX_S] == [10.0, 10.0]


class _GoneCluster:
    """A local cluster whose ranks in ``gone`` have ended (the zygote not heard yet)."""

    def __init__(self, gone: set[int]) -> None:
        self.gone = gone

    def is_gone(self, rank: int) -> bool:
        return rank in self.gone


def _local_driver(gone: set[int], max_worker_restarts: int = 2) -> Driver:
    driver = Driver(
        None,  # type: ignore[arg-type]  # the store is not read here
        _GoneCluster(gone),  # type: ignore[arg-type]
        shutdown_timeout=5.0,
        log_to_driver=False,
        max_worker_restarts=max_worker_restarts,
    )
    driver._born = dict.fromkeys((1, 2, 3), 0.0)
    return driver


def test_a_restart_waits_for_a_replacement_whose_exit_the_zygote_has_not_reported_yet():
    """Was: a call found worker1 gone and its actor's restart asked for capacity before
    the zygote's exit report put the rank among those being replaced, so the restart gave
    up ("no live process can host it again") though a replacement was about to start
    (CI, test_worker_replacement.py, every worker killed at once)."""
    driver = _local_driver(gone={1, 2, 3})
    got: list[bool] = []
    waiter = threading.Thread(target=lambda: got.append(driver._await_replacement()))
    waiter.start()
    time.sleep(0.2)
    assert waiter.is_alive(), "it gave up before the exit was even reported"
    with driver._admitted:  # the exit report (exited), then the replacement's admission
        driver._exit_seen.add(1)
        driver._replacing.add(1)
    with driver._admitted:
        driver._replacing.discard(1)
        driver._admissions += 1
        driver._admitted.notify_all()
    waiter.join(10)
    assert got == [True]


def test_only_a_rank_with_a_replacement_to_come_counts():
    driver = _local_driver(gone={1})
    with driver._admitted:
        assert driver._replacement_coming()  # gone, exit not handled, restarts left
        driver._exit_seen.add(1)  # handled, and not replaced (exited decided so)
        assert not driver._replacement_coming()
        driver._replacing.add(2)
        assert driver._replacement_coming()
    spent = _local_driver(gone={1}, max_worker_restarts=0)
    with spent._admitted:
        assert not spent._replacement_coming()  # no replacements allowed
    assert spent._await_replacement() is False
