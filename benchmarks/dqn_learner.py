"""The DQN learner's own ceiling: gradient steps/s and samples/s by batch size, in-process.

``python -m benchmarks.dqn_learner`` builds the example's learner for the Pong preset
(the Nature CNN, the replay on the learner's device: the GPU when there is one), fills
its replay with pushes of random 84x84 frames shaped like a collector's (4 envs x 16
steps), and measures, for each batch size (at the preset's replay ratio,
``config.with_batch_size``):

* **steps/s** of :meth:`Learner.train_step` back to back, the device synchronised once
  at the end (the training thread's way: no read-back per step);
* the same with the loss read back after every step (``float(loss)``, what the learner
  did before: one device sync per step), to show what a sync per step costs;
* **samples/s** (steps/s x batch) and the **frames/s** they pay for at the preset's 8
  samples per transition (samples/s / 8 x frame skip 4): the rate of collection the
  learner alone could keep up with;
* the time of one push (ingest of 64 records) while the replay is idle;
* with ``--pushers N``, the steps/s of a learner training in its own thread (the
  example's way) while ``N`` threads push to it back to back, each push held while
  training trails (the backpressure of ``max_train_lag``): what sharing the process with
  the pushes costs the training thread (in the example, 12 collectors with 4 pushes in
  flight each: 48);
* with ``--profile PATH``, ``torch.profiler`` over a few steps of the largest batch: a
  Chrome trace of them (the host's ops and, on a GPU, its kernels on their streams) and
  how busy the GPU's kernels kept it, per step, with the kernels that took the most. A
  GPU busy most of a step is the learner's limit; one idle most of it waits for Python
  and kernel launches, which batching more per launch (CUDA graphs, ``torch.compile``)
  would cut.

Collectors, the runtime and the emulators are left out on purpose: this is the learner's
limit, to hold against ``benchmarks.dqn_throughput``'s collection rate. Figures are
reported, never asserted.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import threading
import time
from typing import Any

import numpy as np
import torch

ENV_ID = "ALE/Pong-v5"
FILL = 20_000  # records in replay before timing (well past any batch's needs)


def _push(
    rng: np.random.Generator,
    n_envs: int,
    steps: int,
    first: bool,
    frame_shape: tuple[int, ...] = (84, 84),
    n_actions: int = 6,
    stream0: int = 0,
) -> dict[str, Any]:
    """A collector-shaped push: n_envs streams (from ``stream0``), ``steps`` frames each,
    linked in order; uint8 frames for Atari's 84x84, float32 ones for any other shape."""
    from examples.atari_dqn.replay import PREV_EARLIER_PUSH, PREV_NONE

    n = n_envs * steps
    start = PREV_NONE if first else PREV_EARLIER_PUSH
    prev = [start if i < n_envs else i - n_envs for i in range(n)]
    if frame_shape == (84, 84):
        frame = torch.from_numpy(rng.integers(0, 256, (n, *frame_shape), dtype=np.uint8))
    else:
        frame = torch.from_numpy(rng.standard_normal((n, *frame_shape), dtype=np.float32))
    return {
        "frame": frame,
        "stream": torch.arange(n) % n_envs + stream0,
        "prev": torch.tensor(prev),
        "action": torch.from_numpy(rng.integers(0, n_actions, n)),
        "reward": torch.zeros(n),
        "terminated": torch.zeros(n, dtype=torch.bool),
    }


def with_pushers(
    cfg: Any, device: str | None, pushers: int, seconds: float, fill: int, n_actions: int
) -> dict[str, float]:
    """Steps/s of a learner training in its thread while ``pushers`` threads push to it.

    Each thread pushes 64 records (4 streams of its own x 16 steps) back to back; a push
    returns once training trails by at most ``max_train_lag`` transitions, as in the
    example. Timed over ``seconds`` after the replay holds ``fill`` transitions and the
    learner took 10 steps (with ``cuda_graph``: its warm-up and capture).

    Returns:
        ``steps_per_s`` and ``pushes_per_s`` over the timed window (pushes return in
        bursts where ``max_train_lag`` is small), and ``pushes``, all that returned.
    """
    from examples.atari_dqn.learner import Learner

    learner = Learner(
        dataclasses.replace(cfg, learning_starts=fill), device=device, background=True
    )
    frame_shape = learner.replay.frame_shape
    stop = threading.Event()
    pushed = [0] * pushers

    def push_forever(k: int) -> None:
        rng = np.random.default_rng(k)
        batches = [_push(rng, 4, 16, j == 0, frame_shape, n_actions, 4 * k) for j in range(4)]
        j = 0
        while not stop.is_set():
            learner.push(batches[j])
            pushed[k] += 1
            j = 1 + j % 3  # the first push starts the streams; the others continue them

    threads = [
        threading.Thread(target=push_forever, args=(k,), daemon=True, name=f"pusher-{k}")
        for k in range(pushers)
    ]
    try:
        for t in threads:
            t.start()
        deadline = time.monotonic() + 300.0
        while learner.updates < 10:
            learner._raise_if_failed()  # a failed training thread, at once
            if time.monotonic() > deadline:
                raise TimeoutError("the learner took no 10 steps within 300 s")
            time.sleep(0.05)
        u0, p0, t0 = learner.updates, sum(pushed), time.perf_counter()
        time.sleep(seconds)
        u1, p1, t1 = learner.updates, sum(pushed), time.perf_counter()
    finally:
        stop.set()
        learner.close()  # releases the pushes waiting for training
        for t in threads:
            t.join(10.0)
    return {
        "steps_per_s": (u1 - u0) / (t1 - t0),
        "pushes_per_s": (p1 - p0) / (t1 - t0),
        "pushes": float(sum(pushed)),
    }


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure(
    batch_sizes: list[int],
    seconds: float,
    device: str | None,
    fill: int = FILL,
    profile_path: str | None = None,
    profile_steps_n: int = 20,
    cuda_graph: bool = False,
    env_id: str = ENV_ID,
    pushers: int = 0,
    prioritized: bool = False,
    channels_last: bool = False,
) -> dict[str, Any]:
    """Every figure of the module docstring, per batch size (``fill`` records in replay);
    with ``profile_path``, also :func:`profile_steps` of the largest batch (``profile``);
    with ``cuda_graph``, the steps are a CUDA graph's replays on a GPU; with ``pushers``,
    also :func:`with_pushers` (``steps_per_s_with_pushers``). ``env_id``: the preset;
    ``prioritized``: the replay sampled by priority (the example's ``--prioritized``);
    ``channels_last``: the CNNs in the NHWC layout (the example's ``--channels-last``)."""
    from examples.atari_dqn.config import APEX_PRIORITY_EXPONENT, config_for_env, with_batch_size
    from examples.atari_dqn.envs import obs_spec
    from examples.atari_dqn.learner import Learner

    overrides: dict[str, Any] = {"replay_capacity": fill + 1024, "learning_starts": 1 << 62}
    if cuda_graph:  # a captured step keeps one learning rate
        overrides.update(cuda_graph=True, lr_final_fraction=1.0)
    if prioritized:
        overrides.update(priority_exponent=APEX_PRIORITY_EXPONENT)
    if channels_last:
        overrides.update(channels_last=True)
    preset = config_for_env(env_id, **overrides)
    n_actions = obs_spec(preset)[2]
    rng = np.random.default_rng(0)
    rows = []
    for batch in batch_sizes:
        cfg = with_batch_size(preset, batch)
        learner = Learner(cfg, device=device)
        shape = learner.replay.frame_shape
        learner.push(_push(rng, 4, 16, True, shape, n_actions))
        push_s = []
        while len(learner.replay) < fill:
            b = _push(rng, 4, 16, False, shape, n_actions)
            t0 = time.perf_counter()
            learner.push(b)
            push_s.append(time.perf_counter() - t0)
        dev = learner.device
        # Warm-up: cuDNN's algorithm search, the allocator; with cuda_graph, the graph's
        # eager warm-up (3 steps) and its capture.
        for _ in range(5):
            learner.train_step()
        _sync(dev)
        row: dict[str, Any] = {"batch_size": batch, "device": str(dev)}
        for mode in ("no_sync", "sync_per_step"):
            steps = 0
            t0 = time.perf_counter()
            while time.perf_counter() - t0 < seconds:
                loss = learner.train_step()
                if mode == "sync_per_step":
                    float(loss)
                steps += 1
            _sync(dev)
            rate = steps / (time.perf_counter() - t0)
            row[f"steps_per_s_{mode}"] = rate
        rate = row["steps_per_s_no_sync"]
        row["samples_per_s"] = rate * batch
        per_transition = cfg.batch_size / cfg.train_every  # samples (the replay ratio)
        row["frames_per_s_paid"] = rate * batch / per_transition * cfg.frame_skip
        row["push_ms"] = 1e3 * statistics.median(push_s)
        rows.append(row)
        if profile_path and batch == max(batch_sizes):
            prof = profile_steps(learner, profile_steps_n, profile_path)
            row["profile"] = prof
            print(
                f"profiled {prof['steps']} steps at batch {batch} ({profile_path}): "
                f"{prof['wall_ms_per_step']:.2f} ms a step, the GPU's kernels "
                f"{prof['gpu_ms_per_step']:.2f} ms of it ({prof['gpu_busy']:.0%} busy), the "
                f"host's own ops {prof['cpu_ms_per_step']:.2f} ms",
                flush=True,
            )
            for name, ms in prof["top"]:
                print(f"    {ms:8.3f} ms/step  {name[:90]}", flush=True)
        print(
            f"batch {batch:4d} on {dev}: {rate:8.1f} steps/s "
            f"({row['steps_per_s_sync_per_step']:.1f} with a sync per step), "
            f"{row['samples_per_s']:10,.0f} samples/s, pays for "
            f"{row['frames_per_s_paid']:9,.0f} frames/s at {per_transition:g} samples/transition; "
            f"push of 64 records {row['push_ms']:.2f} ms",
            flush=True,
        )
        if pushers:
            got = with_pushers(cfg, device, pushers, seconds, fill, n_actions)
            row["pushers"] = pushers
            row["steps_per_s_with_pushers"] = got["steps_per_s"]
            row["pushes_per_s"] = got["pushes_per_s"]
            row["pushes_returned"] = got["pushes"]
            print(
                f"batch {batch:4d} on {dev}, in its thread, {pushers} threads pushing: "
                f"{got['steps_per_s']:8.1f} steps/s ({got['pushes_per_s']:.0f} pushes/s)",
                flush=True,
            )
        del learner
    return {"rows": rows, "cores": os.cpu_count(), "torch_threads": torch.get_num_threads()}


def device_events(ops: list[Any]) -> list[Any]:
    """The device's own entries of ``prof.key_averages()``: kernels, copies, memsets.

    A host op that launched kernels carries their time too (its ``self_device_time``),
    so summing every entry counts each kernel twice; torch's own table sums these alone.
    """
    from torch.autograd import DeviceType

    return [
        e
        for e in ops
        if e.device_type != DeviceType.CPU and not getattr(e, "is_user_annotation", False)
    ]


def profile_steps(learner: Any, steps: int, path: str) -> dict[str, Any]:
    """``steps`` gradient steps under ``torch.profiler``; writes their Chrome trace to ``path``.

    Returns:
        ``steps``, ``wall_ms_per_step``, ``gpu_ms_per_step`` (the kernels' time, counted
        once from the device's own entries, :func:`device_events`; 0 on the CPU),
        ``gpu_busy`` (their share of the wall time), ``cpu_ms_per_step`` (the host ops'
        own time) and ``top``: the ten kernels with the most device time (on the CPU,
        the ten ops with the most host time), as ``[name, ms per step]``.
    """
    from torch.profiler import ProfilerActivity, profile

    dev = learner.device
    activities = [ProfilerActivity.CPU]
    if dev.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    _sync(dev)
    with profile(activities=activities) as prof:
        t0 = time.perf_counter()
        for _ in range(steps):
            learner.train_step()
        _sync(dev)
        wall = time.perf_counter() - t0
    prof.export_chrome_trace(path)
    ops = list(prof.key_averages())
    on_device = device_events(ops)
    gpu_us = sum(e.self_device_time_total for e in on_device)
    cpu_us = sum(e.self_cpu_time_total for e in ops)
    if gpu_us:
        key, ranked = "self_device_time_total", on_device
    else:
        key, ranked = "self_cpu_time_total", ops
    top = sorted(ranked, key=lambda e: getattr(e, key), reverse=True)[:10]
    return {
        "steps": steps,
        "wall_ms_per_step": 1e3 * wall / steps,
        "gpu_ms_per_step": gpu_us / 1e3 / steps,
        "gpu_busy": gpu_us / 1e6 / wall if wall > 0 else 0.0,
        "cpu_ms_per_step": cpu_us / 1e3 / steps,
        "top": [[e.key, getattr(e, key) / 1e3 / steps] for e in top],
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.dqn_learner", description=__doc__)
    p.add_argument("--batch-sizes", default="32,128,512", help="comma-separated")
    p.add_argument("--seconds", type=float, default=5.0, help="timing per batch and mode")
    p.add_argument("--device", default=None, help="default: the GPU if any, else the CPU")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    p.add_argument("--json", default=None, help="also write the figures here")
    p.add_argument(
        "--profile",
        default=None,
        metavar="PATH",
        help="profile 20 steps of the largest batch (torch.profiler) into this Chrome trace",
    )
    p.add_argument(
        "--cuda-graph",
        action="store_true",
        help="the learner's steps as CUDA graph replays (the example's --cuda-graph)",
    )
    p.add_argument("--env", default=ENV_ID, help=f"the preset's environment (default {ENV_ID})")
    p.add_argument(
        "--pushers",
        type=int,
        default=0,
        metavar="N",
        help="also time the learner training in its thread while N threads push to it "
        "(the example's 12 collectors x 4 pushes in flight: 48)",
    )
    p.add_argument(
        "--prioritized",
        action="store_true",
        help="the replay sampled by priority (the example's --prioritized)",
    )
    p.add_argument(
        "--channels-last",
        action="store_true",
        help="the learner's CNNs and batches in the NHWC layout (the example's --channels-last)",
    )
    opts = p.parse_args(argv)
    if opts.threads:
        torch.set_num_threads(opts.threads)
    sizes = [int(b) for b in opts.batch_sizes.split(",") if b.strip()]
    result = measure(
        sizes,
        opts.seconds,
        opts.device,
        profile_path=opts.profile,
        cuda_graph=opts.cuda_graph,
        env_id=opts.env,
        pushers=opts.pushers,
        prioritized=opts.prioritized,
        channels_last=opts.channels_last,
    )
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
