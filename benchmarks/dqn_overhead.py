"""Issue 5's benchmark: the real DQN collect loop with and without actorrt.

For 1, 2 and 4 collectors it measures collection frames/s (Pong, the example's own
``CollectorCore`` and ``run_collect_loop``, learning switched off so the learner's CPU
does not set the pace) two ways:

- in-process: one collector loop with the learner called directly (no actorrt), the
  baseline of what one core collects;
- actorrt: N collector actors pushing to a learner actor on a local cluster of N+1
  workers.

The communication overhead is ``1 - fps_actorrt / (min(N, cores) * fps_in_process)``:
the share of the collecting capacity the machine has that actorrt does not deliver.
Collectors, learner and driver share the machine's cores, so this is an upper bound on
what the calls themselves cost.

Usage: ``python -m benchmarks.dqn_overhead [--frames 20000] [--collectors 1,2,4]``
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).parent / "results"


def _collect_only(cfg):
    from examples.atari_dqn.config import DQNConfig

    return DQNConfig.from_dict({**cfg.to_dict(), "learning_starts": 1 << 62})


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.dqn_overhead")
    p.add_argument("--env", default="ALE/Pong-v5")
    p.add_argument("--frames", type=int, default=20_000, help="frames per measurement")
    p.add_argument("--collectors", default="1,2,4")
    p.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)

    import actorrt
    from examples.atari_dqn.bench_support import run_in_process, run_with_actors
    from examples.atari_dqn.config import config_for_env

    cfg = _collect_only(config_for_env(args.env))
    if args.one is not None:  # child: one cluster per process (see docs/architecture.md)
        with actorrt.start(num_workers=args.one + 1, timeout=120):
            t0 = time.perf_counter()
            got = run_with_actors(cfg, args.frames, num_collectors=args.one, timeout=600)
            got["wall"] = time.perf_counter() - t0
        print("RESULT " + json.dumps({k: got[k] for k in ("fps", "frames", "wall")}), flush=True)
        return 0
    cores = os.cpu_count() or 1
    base = run_in_process(cfg, args.frames, train=False)
    rows = []
    for n in (int(x) for x in args.collectors.split(",")):
        child = subprocess.run(
            [
                sys.executable,
                "-m",
                "benchmarks.dqn_overhead",
                "--env",
                args.env,
                "--frames",
                str(args.frames),
                "--one",
                str(n),
            ],
            capture_output=True,
            text=True,
            timeout=900,
        )
        lines = [x for x in child.stdout.splitlines() if x.startswith("RESULT ")]
        if child.returncode != 0 or not lines:
            raise SystemExit(f"{n} collectors failed:\n{child.stderr[-3000:]}")
        got = json.loads(lines[-1][7:])
        wall = got["wall"]
        capacity = min(n, cores) * base["fps"]
        rows.append(
            {
                "collectors": n,
                "fps_actorrt": got["fps"],
                "fps_in_process_one_core": base["fps"],
                "capacity_fps": capacity,
                "overhead_fraction": 1.0 - got["fps"] / capacity,
                "wall_seconds": wall,
            }
        )
    print(f"{args.env}, {args.frames} frames per run, {cores} cores, learning off")
    print(f"in-process (1 collector, no actorrt): {base['fps']:,.0f} frames/s")
    print("collectors  actorrt fps  capacity fps  overhead")
    for r in rows:
        print(
            f"{r['collectors']:>10}  {r['fps_actorrt']:>11,.0f}  {r['capacity_fps']:>12,.0f}"
            f"  {r['overhead_fraction']:>8.1%}"
        )
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / "dqn_overhead.json"
    out.write_text(json.dumps({"env": args.env, "frames": args.frames, "rows": rows}, indent=2))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
