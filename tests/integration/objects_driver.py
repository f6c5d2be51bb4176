"""The driver of the objects network-namespace test, run as a script on host 0.

``python objects_driver.py '{"init": "tcp://HOST:PORT", "world": W, "scenario": S}'``:

- ``pass`` (W = 3): a producer on the worker labelled ``producer`` (host 1) and a
  consumer on ``consumer`` (host 2); the driver passes the producer's 64 MB result to
  the consumer and times it, then times a 1 MB tensor of its own to the consumer (its
  throttled link);
- ``fanout`` (W = 5): a consumer on each of the four workers, two labelled ``h1`` (host
  1), two ``h2`` (host 2); the driver puts 8 MB and all four get it at once, timed, with
  the fetches the driver answered itself.

Prints ``RESULT <json>``.
"""

import json
import signal
import sys
import time

import torch

import actorrt
from actorrt.runtime.runtime import current

signal.alarm(240)  # a bounded life even if the test that started us is gone


@actorrt.actor
class Producer:
    def make(self, nbytes):
        return torch.ones(nbytes, dtype=torch.uint8)


@actorrt.actor
class Consumer:
    def total(self, t):
        return int(t.sum())

    def nbytes(self, t):
        return t.nbytes


def fanout(rt):
    consumers = []
    for label in ("h1", "h2"):  # two on each host, on its two processes
        while len({c.worker for c in consumers if c.worker}) < 2 * (label == "h2") + 2:
            consumers.append(Consumer.options(label=label).remote())
            actorrt.get(consumers[-1].nbytes.remote(torch.zeros(1)), timeout=60)
            if [c.worker for c in consumers].count(consumers[-1].worker) > 1:
                consumers.pop()  # one per process
    assert len(consumers) == 4, [c.worker for c in consumers]
    ref = actorrt.put(torch.ones(8 << 20, dtype=torch.uint8))
    t0 = time.monotonic()
    totals = actorrt.get([c.total.remote(ref) for c in consumers], timeout=120)
    return {
        "totals": totals,
        "seconds": time.monotonic() - t0,
        "served": rt.objects.fetches_served,
        "nodes": {p.name: p.node for p in rt.plan.processes},
    }


def main():
    cfg = json.loads(sys.argv[1])
    rt = actorrt.start(
        init_method=cfg["init"], world_size=cfg["world"], timeout=60, heartbeat_timeout=30
    )
    if cfg.get("scenario") == "fanout":
        print("RESULT " + json.dumps(fanout(rt)), flush=True)
        rt.close()
        return
    p = Producer.options(label="producer").remote()
    c = Consumer.options(label="consumer").remote()
    actorrt.get(c.nbytes.remote(torch.zeros(1)), timeout=60)
    ref = p.make.remote(64 << 20)
    actorrt.wait([ref], timeout=60)
    before = current().payload_bytes_in
    t0 = time.monotonic()
    total = actorrt.get(c.total.remote(ref), timeout=120)
    ref_s = time.monotonic() - t0
    received = current().payload_bytes_in - before
    t0 = time.monotonic()
    actorrt.get(c.nbytes.remote(torch.ones(1 << 20, dtype=torch.uint8)), timeout=60)
    driver_1mb_s = time.monotonic() - t0
    out = {"total": total, "ref_s": ref_s, "received": received, "driver_1mb_s": driver_1mb_s}
    print("RESULT " + json.dumps(out), flush=True)
    rt.close()


if __name__ == "__main__":
    main()
