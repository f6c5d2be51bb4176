"""``actorrt.profile(name, cuda=True)`` on a real GPU: the span's twin on the ``cuda:N``
track lies where the GPU ran the work, after the host queued it.

The actor queues about 50 ms of GPU work (``torch.cuda._sleep``) inside a span that
takes the host well under that, so the GPU's span must end tens of milliseconds after
the host's (``lag_ms``) and last about as long as the work.
"""

from __future__ import annotations

import json

import pytest
from gpu_testlib import requires_cuda, run_driver

pytestmark = [requires_cuda, pytest.mark.timeout(330)]

BODY = """
import json

SPIN = 100_000_000  # GPU cycles: about 50 ms on an H100/H200

@actorrt.actor(label="worker", num_gpus=0.5)
class Busy:
    def work(self, rounds):
        for i in range(rounds):
            with actorrt.profile("queue", cuda=True, round=i):
                torch.cuda._sleep(SPIN)
            torch.cuda.synchronize()
        return rounds

path = "timeline.json"
with actorrt.start(labels={"worker": {"count": 1, "num_gpus": 0.5}}, trace=True,
                   timeout=120) as rt:
    started(rt)
    b = Busy.remote()
    actorrt.get(b.work.remote(3), timeout=120)
    trace = actorrt.timeline(path)
    report(worker=b.worker, path=str(path))
"""


def test_a_cuda_span_shows_when_the_gpu_ran_its_work(tmp_path):
    rep = run_driver(tmp_path, BODY)
    with open(tmp_path / rep["path"]) as f:
        events = json.load(f)["traceEvents"]
    spans = [e for e in events if e.get("cat") == "span" and e["name"] == "queue"]
    tracks = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"}
    gpu = [e for e in spans if tracks.get((e["pid"], e["tid"]), "").startswith("cuda:")]
    host = [e for e in spans if e not in gpu]
    assert len(host) == len(gpu) == 3, spans
    by_time = sorted(host, key=lambda e: e["ts"]), sorted(gpu, key=lambda e: e["ts"])
    for h, g in zip(*by_time, strict=True):
        assert h["args"]["round"] == g["args"]["round"]
        # the GPU starts no earlier than the host began queuing (1 ms for clock error)
        assert g["ts"] >= h["ts"] - 1_000, (h, g)
        assert g["dur"] >= 20_000, g  # the ~50 ms of GPU work, in microseconds
        assert g["args"]["lag_ms"] >= 15, g  # it finished well after the host closed it
        end_gpu, end_host = g["ts"] + g["dur"], h["ts"] + h["dur"]
        assert abs((end_gpu - end_host) / 1000 - g["args"]["lag_ms"]) < 1.0
