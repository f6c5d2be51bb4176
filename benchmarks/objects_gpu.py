"""A CUDA tensor's ref passed actor to actor on one GPU, against a direct call (issue 23).

``python -m benchmarks.objects_gpu [--mb 640] [--reps 5]``: two actors in two processes
share GPU 0 (layout labels ``producer`` and ``consumer``, half a GPU each, ``transport=
"cuda"``, so the plan gives their pair a device map). ``ref``: the driver passes the ref
of the producer's CUDA result to the consumer (``C.look(P.tensor())``: the object stays on
the producer's GPU and goes GPU to GPU); ``direct``: the producer calls the consumer with
the tensor itself. Prints the medians and their ratio, and the driver's received payload
bytes (the driver never holds the tensor). Without CUDA it says so and exits 0.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import torch

import actorrt
from benchmarks.common import median_time


@actorrt.actor(label="producer", num_gpus=0.5)
class Producer:
    def make(self, nbytes: int) -> int:
        self.t = torch.ones(nbytes // 4, dtype=torch.float32, device="cuda")
        return nbytes

    def tensor(self) -> torch.Tensor:
        return self.t

    def direct(self, consumer: Any) -> str:
        return actorrt.get(consumer.look.remote(self.t), timeout=300)


@actorrt.actor(label="consumer", num_gpus=0.5)
class Consumer:
    def look(self, t: torch.Tensor) -> str:
        torch.cuda.synchronize()
        return str(t.device)


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.objects_gpu", description=__doc__)
    p.add_argument("--mb", type=int, default=640)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--json", default=None, help="also write the figures here")
    args = p.parse_args()
    if not torch.cuda.is_available():
        print(f"skipped: torch {torch.__version__} sees no CUDA device")
        return
    slot = {"count": 1, "num_gpus": 0.5}
    layout = {"producer": slot, "consumer": slot}
    with actorrt.start(labels=layout, talks=[("producer", "consumer")], transport="cuda") as rt:
        prod, cons = Producer.remote(), Consumer.remote()
        actorrt.get(prod.make.remote(args.mb << 20), timeout=300)
        before = rt.payload_bytes_in
        ref = median_time(lambda: actorrt.get(cons.look.remote(prod.tensor.remote())), args.reps)
        received = rt.payload_bytes_in - before
        direct = median_time(lambda: actorrt.get(prod.direct.remote(cons)), args.reps)
        device = actorrt.get(cons.look.remote(prod.tensor.remote()), timeout=300)
    out = {"mb": args.mb, "ref_s": ref, "direct_s": direct, "ratio": ref / direct,
           "device": device, "driver_bytes": received}  # fmt: skip
    print(
        f"{args.mb} MB CUDA tensor on one GPU: ref {ref * 1e3:.1f} ms, direct "
        f"{direct * 1e3:.1f} ms, ref/direct {ref / direct:.2f}x; arrived on {device}; "
        f"the driver received {received} payload bytes"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f)


if __name__ == "__main__":
    main()
