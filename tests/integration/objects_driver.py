"""The driver of the objects network-namespace test, run as a script on host 0.

``python objects_driver.py '{"init": "tcp://HOST:PORT", "world": 3}'``: a producer on
the worker labelled ``producer`` (host 1) and a consumer on ``consumer`` (host 2); the
driver passes the producer's 64 MB result to the consumer and times it, then times a
1 MB tensor of its own to the consumer (its throttled link). Prints ``RESULT <json>``.
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


def main():
    cfg = json.loads(sys.argv[1])
    rt = actorrt.start(
        init_method=cfg["init"], world_size=cfg["world"], timeout=60, heartbeat_timeout=30
    )
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
