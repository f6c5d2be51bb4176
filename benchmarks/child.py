"""One measurement in a fresh process: ``python -m benchmarks.child SYSTEM SUITE CFG OUT``."""

from __future__ import annotations

import json
import sys
import time


def main() -> None:
    system, suite, cfg_json, out_path = sys.argv[1:5]
    cfg = json.loads(cfg_json)
    t0 = time.perf_counter()
    if suite == "dqn":
        from benchmarks import dqn

        result = dqn.run(system, cfg)
    elif suite == "dqn-throughput":
        from benchmarks import dqn_throughput

        result = dqn_throughput.run(system, cfg)
    elif suite == "latency-by-size":
        from benchmarks import latency_by_size

        result = latency_by_size.run(system, cfg)
    elif suite == "objects":
        from benchmarks import objects

        result = objects.run(system, cfg)
    elif suite == "tasks":
        from benchmarks import tasks

        result = tasks.run(system, cfg)
    elif suite == "world-size":
        from benchmarks import world_size

        result = world_size.run(system, cfg)
    elif system == "actorrt":
        from benchmarks import sys_actorrt

        result = sys_actorrt.run(suite, cfg)
    elif system == "torch":
        from benchmarks import sys_torch

        result = sys_torch.run(suite, cfg)
    elif system == "ray":
        from benchmarks import sys_ray

        result = sys_ray.run(suite, cfg)
    elif system == "baseline":
        from benchmarks import sys_baseline

        result = sys_baseline.run(suite, cfg)
    else:
        raise SystemExit(f"unknown system {system!r}")
    result["_seconds"] = time.perf_counter() - t0
    with open(out_path, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
