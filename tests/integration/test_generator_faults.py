"""Streaming generators when the actor's process dies: values before the death stay good;
with ``max_task_retries`` the call runs again and each value is given once (Ray's rule:
values already given are not given again).

The driver runs as a script of its own (see scripts.run_script): it kills a worker
process by pid, and every worker pid it reports must be gone after it ends.
"""

import pytest
from scripts import run_script

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]

HEADER = """
import os, signal, time
import actorrt

@actorrt.actor(max_restarts=1)
class Ticker:
    def ticks(self, n, gate):
        # each value says which process made it; slow until `gate` exists
        for i in range(n):
            yield (i, os.getpid())
            if not os.path.exists(gate):
                time.sleep(0.05)
"""


def test_a_death_mid_stream_ends_it_or_with_retries_runs_it_again(tmp_path):
    paced, rep = run_script(
        tmp_path,
        HEADER,
        """
        rt = actorrt.start(num_workers=3, timeout=90, shutdown_timeout=5)
        pids = list(rt.local_worker_pids)
        gate = os.path.abspath("gate")

        plain = Ticker.remote()  # no retries: the stream ends with the death
        gen = plain.ticks.remote(10_000, gate + ".never")
        before = [actorrt.get(next(gen), timeout=30) for _ in range(3)]
        os.kill(before[0][1], signal.SIGKILL)
        refs = list(gen)  # ends, no hang
        plain_values, plain_last = [], "no error"
        for r in refs:
            try:
                plain_values.append(actorrt.get(r, timeout=60))
            except actorrt.ActorDiedError as exc:
                plain_last = "ActorDiedError"
                break

        retried = Ticker.options(max_task_retries=1).remote()
        gen = retried.ticks.remote(40, gate)
        first = [actorrt.get(next(gen), timeout=30) for _ in range(5)]
        victim = first[0][1]
        os.kill(victim, signal.SIGKILL)
        open(gate, "w").close()  # the call's second run goes at once
        rest = [actorrt.get(r, timeout=90) for r in gen]
        values = first + rest

        # with backpressure: the second run is told how many values were taken, or it
        # would wait for ever for takes of values given already
        paced = Ticker.options(max_task_retries=1).remote()
        pgen = paced.ticks.options(_generator_backpressure_num_objects=2).remote(30, gate + "2")
        taken = [actorrt.get(next(pgen), timeout=30) for _ in range(5)]
        os.kill(taken[0][1], signal.SIGKILL)
        open(gate + "2", "w").close()
        paced_values = taken + [actorrt.get(r, timeout=90) for r in pgen]
        report(paced=[v[0] for v in paced_values], paced_makers=len({v[1] for v in paced_values}))
        report(pids=pids, plain=[v[0] for v in before + plain_values], plain_last=plain_last,
               plain_refs_after_error=len(refs) - len(plain_values) - 1,
               indexes=[v[0] for v in values], makers=len({v[1] for v in values}),
               victim_made=sum(v[1] == victim for v in values),
               count=actorrt.get(gen.completed(), timeout=30))
        actorrt.shutdown()
        """,
    )
    assert rep["plain"] == list(range(len(rep["plain"]))), rep["plain"]  # in order, no gap
    assert rep["plain_last"] == "ActorDiedError" and rep["plain_refs_after_error"] == 0, rep
    assert rep["indexes"] == list(range(40)), rep["indexes"]  # each value once, in order
    assert rep["makers"] == 2 and rep["victim_made"] >= 5, rep  # both runs gave values
    assert rep["count"] == 40
    assert paced["paced"] == list(range(30)) and paced["paced_makers"] == 2, paced
