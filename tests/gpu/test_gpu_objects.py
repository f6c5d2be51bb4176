"""GPU objects: a CUDA result stays on its producer's GPU and reaches a consumer GPU to GPU.

Each test runs its cluster in a driver script (gpu_testlib.run_driver). The producer and
the consumer are two processes (two layout labels) that talk, so the plan gives their
pair a device map; the driver only passes the ref and never holds the tensor.
"""

from __future__ import annotations

import pytest
from gpu_testlib import requires_cuda, requires_gpus, run_driver

pytestmark = [requires_cuda, pytest.mark.timeout(330)]

BODY = """
MB = 1 << 20

@actorrt.actor(label="producer", num_gpus=@GPUS@)
class Producer:
    def make(self, n):
        return torch.arange(n, dtype=torch.float32, device="cuda")

    def kept_on(self):
        from actorrt.runtime.runtime import current
        store = current().objects
        return sorted({str(v.device) for v in store._values.values()})

@actorrt.actor(label="consumer", num_gpus=@GPUS@)
class Consumer:
    def look(self, t):
        return {"device": str(t.device), "current": torch.cuda.current_device(),
                "ok": bool(torch.equal(t, torch.arange(t.numel(), dtype=t.dtype, device=t.device)))}

slot = {"count": 1, "num_gpus": @GPUS@}
layout = {"producer": slot, "consumer": slot}
with actorrt.start(labels=layout, talks=[("producer", "consumer")], transport="cuda",
                   timeout=120) as rt:
    started(rt)
    p, c = Producer.remote(), Consumer.remote()
    ref = p.make.remote(16 * MB)  # 64 MB of float32
    actorrt.wait([ref], timeout=120)
    before = rt.payload_bytes_in
    looked = actorrt.get(c.look.remote(ref), timeout=120)
    maps = {q.name: q.device_maps for q in rt.plan.processes}
    report(looked=looked, kept_on=actorrt.get(p.kept_on.remote(), timeout=60),
           driver_bytes=rt.payload_bytes_in - before, owner=ref._loc.owner,
           maps=maps, consumer=c.worker)
"""


def _run(tmp_path, gpus: str) -> dict:
    return run_driver(tmp_path, BODY.replace("@GPUS@", gpus))


def test_a_cuda_result_reaches_a_consumer_on_the_same_gpu_without_the_host(tmp_path):
    rep = _run(tmp_path, "0.5")
    assert rep["kept_on"] == ["cuda:0"]  # the object stayed on the producer's GPU
    assert rep["looked"]["ok"] and rep["looked"]["device"].startswith("cuda")
    # the pair has a device map, so the road leaves CUDA tensors on the GPU
    assert rep["maps"][rep["owner"]].get(rep["consumer"]), rep["maps"]
    assert rep["driver_bytes"] < 1 << 20


@requires_gpus(2)
def test_a_cuda_result_crosses_to_another_gpu(tmp_path):
    rep = _run(tmp_path, "1")
    assert rep["looked"]["ok"]
    assert rep["looked"]["device"] == f"cuda:{rep['looked']['current']}"
    assert rep["maps"][rep["owner"]].get(rep["consumer"]), rep["maps"]
    assert rep["driver_bytes"] < 1 << 20
