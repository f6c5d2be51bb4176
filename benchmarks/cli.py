"""``python -m benchmarks [--quick]``: every system, side by side, in one run.

Each measurement runs in a fresh child process with a time limit (so a hung cluster
cannot hang the run, and no system's leftovers skew the next); the world-size suite
runs each world size in a child of its own. Results: a table per suite on stdout,
``benchmarks/results/<stamp>.json`` (+ ``latest.json``) and PNG plots.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from benchmarks import latency_report, objects, report, tasks, world_report, world_size
from benchmarks.common import WORLD_SIZES, child_env, config

HERE = os.path.dirname(os.path.abspath(__file__))

# (system, suite): every child process a full run starts, in order.
JOBS = [
    ("baseline", "main"),
    ("torch", "main"),
    ("actorrt", "main"),
    ("ray", "main"),
    ("torch", "tcp"),
    ("actorrt", "tcp"),
    ("actorrt", "nn"),
    ("ray", "nn"),
    ("torch", "first_call"),
    ("actorrt", "first_call"),
    ("ray", "first_call"),
    ("baseline", "dqn"),
    ("actorrt", "dqn"),
    ("ray", "dqn"),
    ("actorrt", "dqn-throughput"),
    ("actorrt", "latency-by-size"),
    ("torch", "latency-by-size"),
    ("ray", "latency-by-size"),
    ("pynng", "latency-by-size"),
    ("actorrt", "world-size"),
    ("torch", "world-size"),
    ("ray", "world-size"),
    ("actorrt", "objects"),
    ("ray", "objects"),
    ("actorrt", "tasks"),
    ("ray", "tasks"),
]
SYSTEMS = tuple(dict.fromkeys(system for system, _ in JOBS))
SUITES = tuple(dict.fromkeys(suite for _, suite in JOBS))
# The suites of the main table, the target checks and the throughput plot.
MAIN_SUITES = ("main", "tcp", "nn", "first_call", "dqn")
# Beyond the world-size suite's time budget: its figures, then a bounded shutdown.
WORLD_GRACE_S = 90.0


def _versions() -> dict:
    import torch

    out = {"python": platform.python_version(), "torch": torch.__version__}
    try:
        import ray

        out["ray"] = ray.__version__
    except Exception as exc:  # noqa: BLE001
        out["ray"] = f"not importable ({type(exc).__name__}: {exc})"
    import actorrt

    out["actorrt"] = actorrt.__version__
    try:
        import pynng

        out["pynng"] = pynng.__version__
    except Exception as exc:  # noqa: BLE001
        out["pynng"] = f"not importable ({type(exc).__name__}: {exc})"
    return out


def _machine() -> dict:
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if "model name" in line)
    except (OSError, StopIteration):
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "kernel": platform.release(),
        "mem_gb": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
    }


def run_job(
    system: str, suite: str, cfg: dict, timeout: float, stderr_path: str | None = None
) -> dict:
    """Runs one measurement in a child; ``stderr_path``: where its stderr goes (else ours)."""
    fd, path = tempfile.mkstemp(suffix=".json", prefix=f"bench-{system}-{suite}-")
    os.close(fd)
    cmd = [sys.executable, "-m", "benchmarks.child", system, suite, json.dumps(cfg), path]
    t0 = time.perf_counter()
    with open(stderr_path or os.devnull, "wb") as err:
        proc = subprocess.Popen(
            cmd, env=child_env(), start_new_session=True, stderr=err if stderr_path else None
        )
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the child's own session: it and its workers
            proc.wait(10)
            os.unlink(path)
            return {"_error": f"timed out after {timeout:.0f} s"}
        finally:
            _reap_group(proc.pid)
    try:
        if code != 0:
            return {"_error": f"exit code {code}"}
        with open(path) as f:
            result = json.load(f)
        result["_wall"] = time.perf_counter() - t0
        return result
    finally:
        if os.path.exists(path):
            os.unlink(path)


def _reap_group(pgid: int) -> None:
    """Kills what a child left behind in its own session (e.g. a worker that hung)."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def merge(into: dict, new: dict) -> dict:
    """Merges ``new`` into ``into``, nested dicts key by key (world sizes add up)."""
    for key, value in new.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            merge(into[key], value)
        else:
            into[key] = value
    return into


def world_job(system: str, cfg: dict, world: int, timeout: float | None) -> dict:
    """One world size in its own child; a child that fails or is killed is a failed row."""
    limit = timeout or cfg["world_budget_s"] + WORLD_GRACE_S
    fd, log = tempfile.mkstemp(suffix=".log", prefix=f"bench-{system}-world{world}-")
    os.close(fd)
    try:
        t0 = time.perf_counter()
        res = run_job(system, "world-size", {**cfg, "world": world}, limit, stderr_path=log)
        if "_error" not in res:
            return res
        with open(log, errors="replace") as f:
            first = world_size.first_error_line(f.read())
        why = res["_error"]
        if "timed out" in why:
            why += f" (its budget: {cfg['world_budget_s']:.0f} s)"
        if first:
            why += f"; first error: {first}"
        row = world_size.failure(world, why, time.perf_counter() - t0)
        return {"world_size": {str(world): row}}
    finally:
        os.unlink(log)


def _sizes(p: argparse.ArgumentParser, value: str) -> list[int]:
    """``--world-sizes``: comma-separated ints >= 2; anything else is a usage error."""
    try:
        sizes = [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        sizes = []
    if not sizes or min(sizes) < 2:
        p.error(f"--world-sizes {value!r}: give world sizes >= 2, e.g. 2,8,32,64,128")
    return sizes


def _names(p: argparse.ArgumentParser, flag: str, value: str, valid: tuple[str, ...]) -> list[str]:
    """The comma-separated names of ``value``; an unknown one is a usage error (exit 2)."""
    names = [s.strip() for s in value.split(",") if s.strip()]
    unknown = [s for s in names if s not in valid]
    if unknown:
        p.error(f"{flag}: unknown {', '.join(map(repr, unknown))}; choose from {','.join(valid)}")
    return names


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    p.add_argument("--quick", action="store_true", help="short run (about 3 minutes)")
    p.add_argument(
        "--systems",
        default=",".join(SYSTEMS),
        help=f"comma-separated subset of {','.join(SYSTEMS)} (default all)",
    )
    p.add_argument(
        "--suites", default="", help=f"comma-separated subset of {','.join(SUITES)} (default all)"
    )
    p.add_argument("--out", default=os.path.join(HERE, "results"), help="results folder")
    p.add_argument(
        "--timeout",
        type=float,
        default=0,
        help="per-child limit in seconds (default 180 with --quick, else 420; the dqn "
        "and dqn-throughput suites get three times as long)",
    )
    p.add_argument(
        "--world-sizes",
        default="",
        help="world sizes of the world-size suite (default 2,8,32; the issue's ladder: "
        + ",".join(map(str, WORLD_SIZES))
        + ")",
    )
    args = p.parse_args(argv)
    # Checked before anything runs or is written: an unknown name would select nothing
    # and still replace latest.json with an empty report.
    systems = _names(p, "--systems", args.systems, SYSTEMS)
    suites = _names(p, "--suites", args.suites, SUITES)
    notes = []
    if "ray" in systems and importlib.util.find_spec("ray") is None:
        systems.remove("ray")
        notes.append("Ray is not installed (`import ray` fails): its columns are skipped.")
    if "pynng" in systems and importlib.util.find_spec("pynng") is None:
        systems.remove("pynng")
        notes.append("pynng is not installed (`import pynng` fails): its column is skipped.")
    jobs = [
        (system, suite)
        for system, suite in JOBS
        if system in systems and (not suites or suite in suites)
    ]
    if not jobs:
        p.exit(
            2,
            f"{p.prog}: error: no measurement is both in --systems {','.join(systems) or '(none)'}"
            f" and in --suites {','.join(suites) or '(all)'}; nothing written\n"
            + "".join(f"note: {n}\n" for n in notes),
        )
    cfg = config(args.quick)
    if args.world_sizes:
        cfg["world_sizes"] = _sizes(p, args.world_sizes)
    timeout = args.timeout or (180 if args.quick else 420)
    results: dict[str, dict] = {s: {} for s in systems}
    t_start = time.perf_counter()
    for system, suite in jobs:
        if suite == "world-size":
            for world in cfg["world_sizes"]:
                print(f"[{time.perf_counter() - t_start:6.1f}s] {system}/{suite} {world} ...")
                res = world_job(system, cfg, world, args.timeout or None)
                row = res["world_size"][str(world)]
                if "failed" in row or "skipped" in row:
                    print(f"    {row.get('skipped') or 'failed: ' + row['failed']}", flush=True)
                merge(results[system], {k: v for k, v in res.items() if not k.startswith("_")})
            continue
        reps = cfg["first_call_reps"] if suite == "first_call" else 1
        for _ in range(reps):
            print(f"[{time.perf_counter() - t_start:6.1f}s] {system}/{suite} ...", flush=True)
            # The real DQN starts a learner and collectors three times, and trains.
            res = run_job(
                system, suite, cfg, timeout * (3 if suite in ("dqn", "dqn-throughput") else 1)
            )
            if "_error" in res:
                print(f"    {system}/{suite}: {res['_error']}", flush=True)
                notes.append(f"{system}/{suite}: {res['_error']}")
                continue
            if suite == "first_call":
                results[system].setdefault("first_call_all", []).append(
                    res["first_call"]["seconds"]
                )
                continue
            merge(results[system], {k: v for k, v in res.items() if not k.startswith("_")})
    for r in results.values():
        if "first_call_all" in r:
            r["first_call"] = {"seconds": statistics.median(r.pop("first_call_all"))}
    ran = {suite for _, suite in jobs}
    argv = sys.argv[1:] if argv is None else argv
    doc = {
        "when": dt.datetime.now().isoformat(timespec="seconds"),
        "command": " ".join(["python -m benchmarks", *argv]),
        "machine": _machine(),
        "versions": _versions(),
        "config": cfg,
        "results": results,
        "notes": notes,
        "seconds": time.perf_counter() - t_start,
    }
    if ran & set(MAIN_SUITES):
        doc["table"] = report.table(doc)
        doc["targets"] = report.targets(doc)
        print()
        print(doc["table"])
        print()
        print(report.format_targets(doc["targets"]))
    if "latency-by-size" in ran:
        doc["latency_table"] = latency_report.table(doc)
        print("\nround trip by message size (median [p10-p90], ms):")
        print(doc["latency_table"])
    if "objects" in ran:
        doc["objects_table"] = objects.table(doc)
        print("\nobjects: refs passed, puts fanned out, a state dict broadcast (median s):")
        print(doc["objects_table"])
    if "tasks" in ran:
        doc["tasks_table"] = tasks.table(doc)
        print("\ntasks: remote functions against Ray's tasks (median s):")
        print(doc["tasks_table"])
    if "dqn-throughput" in ran and "dqn_throughput" in results.get("actorrt", {}):
        tp = results["actorrt"]["dqn_throughput"]
        raw = ", ".join(f"{r['frames_per_s']:,.0f}" for r in tp["raw"])
        print(
            f"\nDQN collection against the raw emulators ({tp['dqn']['collectors']} "
            f"processes): raw {raw} frames/s, DQN training {tp['dqn']['frames_per_s']:,.0f} "
            f"frames/s, ratio {tp['ratio']:.3f}"
        )
    if "world-size" in ran:
        doc["world_table"] = world_report.table(doc)
        print("\nstart-up and memory by world size:")
        print(doc["world_table"])
    for n in notes:
        print("note:", n)
    os.makedirs(args.out, exist_ok=True)
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    for name in (f"{stamp}.json", "latest.json"):
        with open(os.path.join(args.out, name), "w") as f:
            json.dump(doc, f, indent=1)
    plots = []
    if ran & set(MAIN_SUITES):
        plots.append((report.plot, f"{stamp}.png", "latest.png"))
    if "latency-by-size" in ran:
        plots.append((latency_report.plot, f"{stamp}-latency.png", "latest-latency.png"))
    written = [f"{args.out}/{stamp}.json"]
    for draw, name, latest in plots:
        png = draw(doc, os.path.join(args.out, name))
        if png:
            shutil.copyfile(png, os.path.join(args.out, latest))
            written.append(png)
    print(f"\nwrote {', '.join(written)}; total {doc['seconds']:.0f} s")
