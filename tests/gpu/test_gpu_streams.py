"""CUDA tensors read on the other side of a call are the values sent, whatever the streams.

Each round queues about 10 ms of GPU work (``torch.cuda._sleep``) before the value it
sends is written, so a reader that is not ordered after the transfer reads the block's
previous contents (zeros, or an earlier round's value), not the value. Both directions: a call's
argument read by the method at once, and a method's reply read by its caller at once.
Without actorrt.runtime.streams both went wrong on an H200 (collectors' pushes read by
the learner before their copy landed).
"""

from __future__ import annotations

import pytest
from gpu_testlib import requires_cuda, run_driver

pytestmark = [requires_cuda, pytest.mark.timeout(330)]

BODY = """
ROUNDS = 24
ELEMS = 1 << 18  # 1 MiB of float32 each argument; each reply is a quarter (sent inline)
SPIN = 20_000_000  # GPU cycles queued before each value is written (about 10 ms)

@actorrt.actor(label="receiver", num_gpus=0.5)
class Receiver:
    def look(self, i, t):
        return [float(t.min()), float(t.max())]

    def make(self, i):
        torch.cuda._sleep(SPIN)
        return torch.full((ELEMS // 4,), float(i), device="cuda")

@actorrt.actor(label="sender", num_gpus=0.5)
class Sender:
    def __init__(self, receiver):
        self.receiver = receiver

    def arguments(self):
        wrong = []
        for i in range(ROUNDS):
            torch.cuda._sleep(SPIN)
            t = torch.full((ELEMS,), float(i), device="cuda")
            seen = actorrt.get(self.receiver.look.remote(i, t), timeout=60)
            if seen != [float(i), float(i)]:
                wrong.append([i, seen])
        return wrong

    def replies(self):
        wrong = []
        for i in range(ROUNDS):
            t = actorrt.get(self.receiver.make.remote(i), timeout=60)
            seen = [float(t.min()), float(t.max())]
            if seen != [float(i), float(i)] or not t.is_cuda:
                wrong.append([i, seen, str(t.device)])
        return wrong

slot = {"count": 1, "num_gpus": 0.5}
with actorrt.start(labels={"sender": slot, "receiver": slot},
                   talks=[("sender", "receiver")], transport="cuda", timeout=120) as rt:
    started(rt)
    r = Receiver.remote()
    s = Sender.remote(r)
    maps = {q.name: q.device_maps for q in rt.plan.processes}
    report(arguments=actorrt.get(s.arguments.remote(), timeout=120),
           replies=actorrt.get(s.replies.remote(), timeout=120),
           maps=maps, sender=s.worker, receiver=r.worker)
"""


def test_cuda_arguments_and_replies_are_read_after_they_land(tmp_path):
    rep = run_driver(tmp_path, BODY)
    # the pair has a device map, so the tensors travel GPU to GPU (replies by its reverse)
    assert rep["maps"][rep["sender"]].get(rep["receiver"]), rep["maps"]
    assert rep["arguments"] == [], f"rounds whose argument was read before it landed: {rep}"
    assert rep["replies"] == [], f"rounds whose reply was read before it landed: {rep}"
