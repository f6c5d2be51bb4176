"""Every road a CUDA tensor can arrive by passes through ``actorrt.runtime.streams``.

On a GPU, ``tests/gpu/test_gpu_streams.py`` shows what a missed road costs (values read
before they land). This test needs no GPU: it replaces ``streams.arrived`` and
``streams.on_arrival`` with spies, in a worker (through an actor's method) and in the
driver, and checks each entry point called them: a call alone (``rpc_call``), a burst
of calls (``rpc_call_batch``), an actor's creation (``rpc_create``), a reply alone (its
future) and a burst of replies (``rpc_replies``).
"""

from __future__ import annotations

import pytest
from scripts import run_script

pytestmark = pytest.mark.timeout(180)

HEADER = """
import sys
import actorrt
from actorrt.runtime import streams

def spy_on(seen):
    for name in ("arrived", "on_arrival"):
        real = getattr(streams, name)
        def spy(x, real=real, name=name):
            seen.add(f"{name} in {sys._getframe(1).f_code.co_name}")
            return real(x)
        setattr(streams, name, spy)

@actorrt.actor
class Spy:
    def install(self):
        self.seen = set()
        spy_on(self.seen)
        return True

    def ping(self, x):
        return x

    def seen_here(self):
        return sorted(self.seen)

@actorrt.actor
class Other:
    def ping(self):
        return 1
"""


def test_every_entry_point_tells_streams_what_arrived(tmp_path):
    body = """
    with actorrt.start(num_workers=1, timeout=60) as rt:
        pids = list(rt.local_worker_pids)
        report(pids=pids)
        spy = Spy.remote()
        actorrt.get(spy.install.remote(), timeout=60)
        actorrt.get(Other.remote().ping.remote(), timeout=60)  # created after the spy went in
        seen = set()
        spy_on(seen)
        actorrt.get(spy.ping.remote(1), timeout=60)  # alone: rpc_call, its reply's future
        burst = [spy.ping.remote(i) for i in range(3000)]  # batched both ways
        assert actorrt.get(burst, timeout=120) == list(range(3000))
        report(worker=actorrt.get(spy.seen_here.remote(), timeout=60), driver=sorted(seen))
    """
    reports = run_script(tmp_path, HEADER, body, timeout=170)
    got = {k: v for r in reports for k, v in r.items()}
    assert {"arrived in rpc_call", "arrived in rpc_call_batch", "arrived in rpc_create"} <= set(
        got["worker"]
    ), got
    assert {"on_arrival in rpc_async", "arrived in rpc_replies"} <= set(got["driver"]), got
