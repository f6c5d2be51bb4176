"""The printed table, the target check and the plot of one run's results."""

from __future__ import annotations

from typing import Any

SYSTEMS = ("actorrt", "torch", "ray")


#: Collector counts of the real-DQN rows (``benchmarks.dqn.COLLECTORS``), and the one the
#: DQN target reads: the example's default.
DQN_COLLECTORS = (1, 2, 4)
DQN_TARGET_COLLECTORS = "2"


def _get(doc: dict, system: str, *path: str) -> float | None:
    node: Any = doc["results"].get(system, {})
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return node if isinstance(node, (int, float)) else None


def _fmt(v: float | None, digits: int = 0) -> str:
    if v is None:
        return "-"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    return f"{v:.{digits}f}"


def _ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or b in (None, 0) else f"{a / b:.2f}x"


def _size(n: int) -> str:
    for unit, k in (("MB", 2**20), ("KB", 2**10)):
        if n >= k:
            return f"{n // k} {unit}"
    return f"{n} B"


def rows(doc: dict) -> list[list[str]]:
    out = []
    scalar = [
        ("sync call latency, median (us)", ("sync", "median_us"), 0),
        ("sync call latency, p90 (us)", ("sync", "p90_us"), 0),
        ("async calls/s (1 caller, 1 actor)", ("async", "calls_per_s"), 0),
        ("n:n calls/s (4 callers x 4 actors)", ("nn", "calls_per_s"), 0),
        ("actor creation, actors/s", ("create", "actors_per_s"), 1),
        ("4-worker cluster: first call (s)", ("first_call", "seconds"), 2),
    ]
    for n in DQN_COLLECTORS:
        scalar += [
            (f"real DQN, {n} collector(s): frames/s", ("dqn", str(n), "frames_per_s"), 0),
            (f"real DQN, {n} collector(s): updates/s", ("dqn", str(n), "updates_per_s"), 1),
            (f"real DQN, {n} collector(s): comm share %", ("dqn", str(n), "comm_percent"), 1),
            (
                f"real DQN, {n} collector(s), learning off: frames/s",
                ("dqn", str(n), "collect_frames_per_s"),
                0,
            ),
            (
                f"real DQN, {n} collector(s), learning off: comm share %",
                ("dqn", str(n), "collect_comm_percent"),
                1,
            ),
        ]
    for label, path, digits in scalar:
        a, t, r = (_get(doc, s, *path) for s in SYSTEMS)
        out.append(
            [
                label,
                _fmt(a, digits),
                _fmt(t, digits),
                _fmt(r, digits),
                _ratio(a, t),
                _ratio(a, r),
                "",
            ]
        )
    inter = doc["results"].get("actorrt", {}).get("sync_interleaved")
    if inter:
        rref = inter.get("rref")  # runs before this field existed have none
        out.append(
            [
                "sync latency, interleaved (us)",
                _fmt(inter["full"]),
                _fmt(inter["raw"]),
                "-",
                _ratio(inter["full"], inter["raw"]),
                "-",
                f"same worker; raw + one thread handoff {_fmt(inter['handoff'])} "
                f"({_ratio(inter['handoff'], inter['raw'])}); raw torch RRef method "
                f"{_fmt(rref)} (actorrt/it {_ratio(inter['full'], rref)})",
            ]
        )
    pools = doc["results"].get("baseline", {}).get("dqn_envs")
    if pools:
        gym = pools["gymnasium"]["frames_per_s"]
        vec = pools["ale_vector"]["frames_per_s"]
        out.append(
            [
                "DQN collector env pool, in-process frames/s",
                "-",
                "-",
                "-",
                "-",
                "-",
                f"gymnasium envs {_fmt(gym)}, ale-py vector env {_fmt(vec)} "
                f"(vector/gymnasium {_ratio(vec, gym)})",
            ]
        )
    sizes = doc["config"]["sizes"]
    base = doc["results"].get("baseline", {})
    for size in sizes:
        k = str(size)
        a = _get(doc, "actorrt", "xfer_local", k, "gbps")
        t = _get(doc, "torch", "xfer_local", k, "gbps")
        r = _get(doc, "ray", "xfer_local", k, "gbps")
        z = _get(doc, "ray", "xfer_local_zerocopy", k, "gbps")
        m = base.get("memcpy", {}).get(k, {}).get("gbps")
        extra = f"ray zero-copy {_fmt(z, 2)}, memcpy {_fmt(m, 2)}"
        out.append(
            [
                f"same host {_size(size)} GB/s",
                _fmt(a, 2),
                _fmt(t, 2),
                _fmt(r, 2),
                _ratio(a, t),
                _ratio(a, r),
                extra + f"; /zc {_ratio(a, z)}, /memcpy {_ratio(a, m)}",
            ]
        )
    for size in sizes:
        k = str(size)
        a = _get(doc, "actorrt", "xfer_tcp", k, "gbps")
        t = _get(doc, "torch", "xfer_tcp", k, "gbps")
        s = base.get("socket", {}).get(k, {}).get("gbps")
        out.append(
            [
                f"TCP only {_size(size)} GB/s",
                _fmt(a, 2),
                _fmt(t, 2),
                "-",
                _ratio(a, t),
                "-",
                f"socket {_fmt(s, 2)}; /socket {_ratio(a, s)}",
            ]
        )
    return out


def format_table(header: list[str], body: list[list[str]]) -> str:
    """Columns padded to their widest cell, `` | `` between them, a rule under the header."""
    widths = [max(len(r[i]) for r in [header, *body]) for i in range(len(header))]
    lines = [" | ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))]
    lines.append("-+-".join("-" * w for w in widths))
    for r in body:
        lines.append(" | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)))
    return "\n".join(line.rstrip() for line in lines)


def table(doc: dict) -> str:
    header = ["measure", "actorrt", "torch rpc", "ray", "actorrt/torch", "actorrt/ray", "notes"]
    return format_table(header, rows(doc))


def targets(doc: dict) -> list[dict]:
    """The issue's targets, each with the measured ratio and whether it is met."""
    big = str(max(doc["config"]["sizes"]))
    g = lambda s, *p: _get(doc, s, *p)  # noqa: E731
    base = doc["results"].get("baseline", {})
    memcpy = base.get("memcpy", {}).get(big, {}).get("gbps")
    sock = base.get("socket", {}).get(big, {}).get("gbps")
    checks = [
        (
            "sync latency <= 0.5x Ray",
            g("actorrt", "sync", "median_us"),
            g("ray", "sync", "median_us"),
            "<=",
            0.5,
        ),
        (
            "sync latency <= 1.1x raw torch, separate runs (issue 2: <= 1.15x)",
            g("actorrt", "sync", "median_us"),
            g("torch", "sync", "median_us"),
            "<=",
            1.1,
        ),
        (
            "sync latency <= 1.1x raw torch, interleaved on one worker",
            g("actorrt", "sync_interleaved", "full"),
            g("actorrt", "sync_interleaved", "raw"),
            "<=",
            1.1,
        ),
        (
            "async throughput >= 2x Ray",
            g("actorrt", "async", "calls_per_s"),
            g("ray", "async", "calls_per_s"),
            ">=",
            2.0,
        ),
        (
            "256 MB same host >= Ray zero-copy",
            g("actorrt", "xfer_local", big, "gbps"),
            g("ray", "xfer_local_zerocopy", big, "gbps"),
            ">=",
            1.0,
        ),
        (
            "256 MB same host >= 0.7x memcpy",
            g("actorrt", "xfer_local", big, "gbps"),
            memcpy,
            ">=",
            0.7,
        ),
        ("256 MB TCP only >= 0.8x socket", g("actorrt", "xfer_tcp", big, "gbps"), sock, ">=", 0.8),
        (
            "4-worker first call <= 0.5x Ray",
            g("actorrt", "first_call", "seconds"),
            g("ray", "first_call", "seconds"),
            "<=",
            0.5,
        ),
        (
            f"real DQN frames/s >= Ray ({DQN_TARGET_COLLECTORS} collectors)",
            g("actorrt", "dqn", DQN_TARGET_COLLECTORS, "frames_per_s"),
            g("ray", "dqn", DQN_TARGET_COLLECTORS, "frames_per_s"),
            ">=",
            1.0,
        ),
    ]
    out = []
    for name, a, b, op, bound in checks:
        ratio = None if a is None or not b else a / b
        met = None if ratio is None else (ratio <= bound if op == "<=" else ratio >= bound)
        out.append({"target": name, "actorrt": a, "reference": b, "ratio": ratio, "met": met})
    return out


def format_targets(checks: list[dict]) -> str:
    lines = ["targets:"]
    for c in checks:
        state = {True: "MET   ", False: "MISSED", None: "n/a   "}[c["met"]]
        ratio = "-" if c["ratio"] is None else f"{c['ratio']:.2f}x"
        lines.append(f"  {state} {c['target']}: ratio {ratio}")
    return "\n".join(lines)


def plot(doc: dict, path: str) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    sizes = doc["config"]["sizes"]
    res = doc["results"]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    series_local = [
        ("actorrt", ("actorrt", "xfer_local")),
        ("torch rpc", ("torch", "xfer_local")),
        ("ray (tensor arg)", ("ray", "xfer_local")),
        ("ray (ray.put numpy)", ("ray", "xfer_local_zerocopy")),
        ("memcpy (1 thread)", ("baseline", "memcpy")),
    ]
    series_tcp = [
        ("actorrt", ("actorrt", "xfer_tcp")),
        ("torch rpc", ("torch", "xfer_tcp")),
        ("plain socket", ("baseline", "socket")),
    ]
    for ax, series, title in (
        (axes[0], series_local, "same host"),
        (axes[1], series_tcp, "TCP only (loopback)"),
    ):
        for label, (system, key) in series:
            data = res.get(system, {}).get(key)
            if not data:
                continue
            xs = [s for s in sizes if str(s) in data]
            ax.plot(xs, [data[str(s)]["gbps"] for s in xs], marker="o", label=label)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("tensor size (bytes)")
        ax.set_ylabel("GB/s")
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"throughput vs size ({doc['machine']['cores']} cores, {doc['when']})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
