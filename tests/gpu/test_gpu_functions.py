"""Remote functions on GPU slots: a function asking for GPUs runs with its GPU current.

The driver runs as a script (gpu_testlib.run_driver). Each of a host's GPUs goes to one
worker process for functions (actorrt/placement/functions.py): a call of ``num_gpus=1``
runs on the process that holds its GPU, with that GPU as the current device, and calls
of ``num_gpus=0.5`` run two at a time on it.
"""

from __future__ import annotations

import pytest
from gpu_testlib import cuda_count, requires_cuda, run_driver

pytestmark = [requires_cuda, pytest.mark.timeout(330)]

BODY = """
from actorrt.placement.resources import Resources
from actorrt.runtime.functions import Shape

@actorrt.remote(num_gpus=1)
def where(_):
    t = torch.ones(4, device="cuda")
    return {"current": torch.cuda.current_device(), "device": str(t.device),
            "pid": os.getpid(), "ids": actorrt.get_gpu_ids()}

@actorrt.remote(num_gpus=0.5)
def span(s):
    start = time.monotonic()
    time.sleep(s)
    return os.getpid(), torch.cuda.current_device(), start, time.monotonic()

@actorrt.remote(num_gpus=1)
def make(n):
    return torch.arange(n, dtype=torch.float32, device="cuda")

@actorrt.actor
class Reader:
    def check(self, t):
        return bool(torch.equal(t.cpu(), torch.arange(t.numel(), dtype=torch.float32)))

with actorrt.start(num_workers=2, timeout=120) as rt:
    started(rt)
    spots = rt.function_spots(Shape(None, Resources(1, 1)))
    got = actorrt.get([where.remote(i) for i in range(8)], timeout=120)
    spans = actorrt.get([span.remote(1.0) for _ in range(4)], timeout=120)
    made = make.remote(1 << 20)
    checked = actorrt.get(Reader.remote().check.remote(made), timeout=120)
    report(spots=[list(s) for s in spots], got=got, spans=spans, checked=checked,
           pids_by_rank={str(k): v for k, v in rt.pids.items()})
"""


def test_a_gpu_function_runs_with_its_gpu_current(tmp_path):
    rep = run_driver(tmp_path, BODY)
    gpus = cuda_count()
    spots = rep["spots"]
    # the host's GPUs are split between the two workers: every GPU goes to one of them
    assert sum(len(executor.split("/")[2].split(".")) for _, executor, _ in spots) == gpus
    for g in rep["got"]:
        assert g["device"] == f"cuda:{g['current']}", g
        assert g["ids"] == [g["current"]], g  # as ray.get_gpu_ids()
    currents = {g["current"] for g in rep["got"]}
    assert currents <= set(range(gpus)) and currents, rep["got"]
    assert rep["checked"] is True  # a CUDA result read by an actor from its ref
    # num_gpus=0.5: two calls at once per GPU, never more
    for pid in {s[0] for s in rep["spans"]}:
        for gpu in {s[1] for s in rep["spans"] if s[0] == pid}:
            spans = [(s[2], s[3]) for s in rep["spans"] if s[0] == pid and s[1] == gpu]
            at_once = max(sum(1 for a, b in spans if a <= t < b) for t, _ in spans)
            assert at_once <= 2, rep["spans"]
