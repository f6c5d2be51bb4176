"""The driver of the multi-node tests, run as a script (often inside a namespace).

``python multinode_driver.py '{"init": "tcp://HOST:PORT", "world": W, "scenario": ...}'``
starts the cluster, runs the scenario, prints ``RESULT <json>`` and shuts down. The
actor classes live in this ``__main__``, so they reach workers by value (cloudpickle).
"""

import ctypes
import dataclasses
import faulthandler
import json
import os
import signal
import sys
import time

import torch

import actorrt

signal.alarm(300)  # a bounded life even if the test that started us is gone


@actorrt.actor
class Probe:
    def where(self):
        from actorrt.runtime.runtime import current

        return {
            "rank": current().rank,
            "pid": os.getpid(),
            "ppid": os.getppid(),
            "net": os.readlink("/proc/self/ns/net"),
            "pidns": os.readlink("/proc/self/ns/pid"),
            "ifname": os.environ.get("TP_SOCKET_IFNAME"),
            "env": {
                k: os.environ.get(k)
                for k in ("RANK", "LOCAL_RANK", "SLURM_PROCID", "GLOO_SOCKET_IFNAME")
            },
        }

    def echo(self, t):
        return t

    def context(self):
        return _context()

    def stuck_in_c_with_the_gil(self, s):
        # libc's sleep through a PyDLL: C code that keeps the GIL, so no Python thread of
        # the process runs (no ping answered, no store heartbeat, no exit of its own).
        ctypes.PyDLL(None).sleep(s)

    def sleep(self, s):
        time.sleep(s)
        return s

    def make(self, nbytes):
        return torch.ones(nbytes // 4)

    def checksum(self, t):
        return [t.numel(), float(t[::4096].sum())]

    def relay(self, peer, nbytes):
        """Sends a tensor of ``nbytes`` from this host to ``peer``'s; returns both sums."""
        t = torch.arange(nbytes // 4, dtype=torch.float32)
        got = actorrt.get(peer.echo.remote(t), timeout=120)
        return [bool(torch.equal(got, t)), actorrt.get(peer.where.remote(), timeout=60)]


@actorrt.actor
class Talker:
    """Prints from a method, to stdout and stderr in turn (the output scenario)."""

    def talk(self, tag, n):
        for i in range(n):
            print(f"{tag} out {i}")
            print(f"{tag} err {i}", file=sys.stderr)
        return {"pid": os.getpid(), "host": open("/proc/sys/kernel/hostname").read().strip()}


def _context():
    ctx = actorrt.get_runtime_context()
    return {"worker": ctx.get_worker_id(), "labels": ctx.get_node_labels(), "job": ctx.get_job_id()}


@actorrt.remote
def context_in_a_function():
    return _context()


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def scenario_hosts(rt, cfg):
    """Actors on three hosts by label; calls and 64 MB tensors between hosts."""
    mb64 = 64 << 20
    a = Probe.options(label="hostA").remote()
    coll = Probe.options(label="collector").remote()
    learn = Probe.options(label="learner").remote()
    where = actorrt.get([x.where.remote() for x in (a, coll, learn)], timeout=60)
    big = torch.randn(mb64 // 4)
    echoed, dt = timed(lambda: actorrt.get(coll.echo.remote(big), timeout=120))
    relay_cl = actorrt.get(coll.relay.remote(learn, mb64), timeout=180)
    relay_la = actorrt.get(learn.relay.remote(a, 8 << 20), timeout=120)
    try:
        Probe.options(label="nowhere").remote()
        missing_label = "no error"
    except actorrt.PlacementError as exc:
        missing_label = str(exc)
    return {
        "where": where,
        "driver_net": os.readlink("/proc/self/ns/net"),
        "driver_ifname": os.environ.get("TP_SOCKET_IFNAME"),
        "echo_ok": bool(torch.equal(echoed, big)),
        "echo_64mb_s": dt,
        "relay_collector_to_learner": relay_cl,
        "relay_learner_to_a": relay_la,
        "missing_label": missing_label,
    }


def scenario_container(rt, cfg):
    """A worker in another container of this host: identities, plan, calls."""
    p = Probe.remote()
    t = torch.randn((8 << 20) // 4)
    return {
        "where": actorrt.get(p.where.remote(), timeout=60),
        "driver_pidns": os.readlink("/proc/self/ns/pid"),
        "echo_ok": bool(torch.equal(actorrt.get(p.echo.remote(t), timeout=60), t)),
    }


def _store_keys_anyone_reads(cfg):
    """Which rendezvous keys a client without the token reads once the cluster runs."""
    from datetime import timedelta
    from urllib.parse import urlparse

    import torch.distributed as dist

    url = urlparse(cfg["init"])
    store = dist.TCPStore(url.hostname, url.port, is_master=False, timeout=timedelta(seconds=10))
    keys = ["actorrt/session", "actorrt/plan"] + [f"actorrt/claim/{i}" for i in range(1, 5)]
    return [k for k in keys if store.check([k])]


def scenario_simple(rt, cfg):
    """One actor per worker; a call and a 1 MB tensor to each."""
    probes = [Probe.options(label=cfg.get("label")).remote() for _ in range(cfg["world"] - 1)]
    t = torch.randn(1 << 18)
    return {
        "store_keys": _store_keys_anyone_reads(cfg),
        "where": actorrt.get([p.where.remote() for p in probes], timeout=60),
        "echo_ok": all(
            torch.equal(x, t) for x in actorrt.get([p.echo.remote(t) for p in probes], timeout=60)
        ),
        "labels": {n.process: list(n.labels) for n in actorrt.nodes()},
    }


def scenario_node_labels(rt, cfg):
    """get_runtime_context() on each worker, in an actor and a remote function, per label.

    ``cfg["probe_labels"]``: the labels to place one actor and one function call on.
    """
    labels = cfg["probe_labels"]
    probes = [Probe.options(label=label).remote() for label in labels]
    calls = [context_in_a_function.options(label=label).remote() for label in labels]
    return {
        "driver": _context(),
        "actors": actorrt.get([p.context.remote() for p in probes], timeout=60),
        "functions": actorrt.get(calls, timeout=60),
        "nodes": {n.process: list(n.labels) for n in actorrt.nodes()},
    }


def scenario_trace(rt, cfg):
    """A call to an actor on each worker, then the timeline: which processes ran what."""
    probes = [Probe.remote() for _ in range(cfg["world"] - 1)]
    where = actorrt.get([p.where.remote() for p in probes], timeout=60)
    actorrt.get([p.echo.remote(torch.ones(256)) for p in probes], timeout=60)
    trace = actorrt.timeline(cfg["timeline"])
    events = trace["traceEvents"]
    rows = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    runs = {}
    for e in events:
        if e.get("cat") == "run":
            runs.setdefault(rows[e["pid"]].split()[0], []).append(e["name"])
    return {"worker_pids": sorted(w["pid"] for w in where), "rows": rows, "runs": runs}


def scenario_layout(rt, cfg):
    """A layout given to the driver, workers without labels: where the slots landed.

    Returns each actor's ``where()`` with its id, the live ``actors()``, ``nodes()`` and
    ``plan()``, and writes ``dump_cluster()`` to ``cfg["dump"]`` for ``actorrt plan``.
    """
    learn = Probe.options(label="learner").remote()
    colls = [Probe.options(label="collector").remote() for _ in range(2)]
    handles = [learn, *colls]
    where = actorrt.get([h.where.remote() for h in handles], timeout=60)
    for h, w in zip(handles, where, strict=True):
        w["actor_id"] = h.actor_id
    try:
        Probe.options(label="nowhere").remote()
        missing_label = "no error"
    except actorrt.PlacementError as exc:
        missing_label = str(exc)
    actorrt.dump_cluster(cfg["dump"])
    return {
        "where": where,
        "driver_net": os.readlink("/proc/self/ns/net"),
        "actors": [dataclasses.asdict(a) for a in actorrt.actors()],
        "nodes": [dataclasses.asdict(n) for n in actorrt.nodes()],
        "plan": actorrt.plan(),
        "missing_label": missing_label,
    }


def scenario_output(rt, cfg):
    """An actor on a worker prints; its lines must reach this driver's output, tagged."""
    from torch.distributed import rpc

    from actorrt.runtime.output import rpc_flush_output

    talker = Talker.remote()
    where = actorrt.get(talker.talk.remote(cfg.get("tag", "remote"), 3), timeout=60)
    # Its lines are printed by an RPC thread of ours; let them all arrive before RESULT is
    # printed, so no line of theirs lands in the middle of it.
    rpc.rpc_sync(talker.worker, rpc_flush_output, args=(10.0,), timeout=30)
    return {"talker": where, "status": actorrt.status()}


def _memory_mb(pid="self"):
    """(RSS, PSS) of a process in MB, from /proc (PSS splits pages shared by forks)."""
    got = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("Rss", "Pss"):
                got[key] = int(rest.split()[0]) / 1024
    return got["Rss"], got["Pss"]


def _ppid(pid):
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def scenario_scale(rt, cfg):
    """A large world: one actor per worker, each answers where it runs; memory by process.

    Memory is read while everything runs: the driver's RSS, and the PSS summed over the
    workers, over their zygotes (the ``ppid`` the workers report) and over the commands
    that started those (``actorrt worker --nproc``: the zygotes' parents).
    """
    t0 = time.monotonic()
    probes = [Probe.remote() for _ in range(cfg["world"] - 1)]
    where = actorrt.get([p.where.remote() for p in probes], timeout=cfg.get("call_timeout", 60))
    answered_s = time.monotonic() - t0
    zygotes = sorted({w["ppid"] for w in where})
    commands = sorted({_ppid(z) for z in zygotes})
    pss = {
        name: sum(_memory_mb(p)[1] for p in pids)
        for name, pids in (
            ("workers", [w["pid"] for w in where]),
            ("zygotes", zygotes),
            ("commands", commands),
        )
    }
    return {
        "where": where,
        "workers": sorted({p.worker for p in probes}),
        "answered_s": answered_s,
        "driver_rss_mb": _memory_mb()[0],
        "pss_mb": pss,
        "worker_rss_mb": sorted(_memory_mb(w["pid"])[0] for w in where)[len(where) // 2],
        "nodes_alive": sum(n.alive for n in actorrt.nodes()),
    }


def scenario_dead_worker(rt, cfg):
    """A worker is killed (SIGKILL): how long until the driver marks it dead, and after."""
    probes = [Probe.remote() for _ in range(cfg["world"] - 1)]
    where = actorrt.get([p.where.remote() for p in probes], timeout=60)
    victim = probes[0]
    os.kill(where[0]["pid"], signal.SIGKILL)
    killed = time.monotonic()
    marked_after = _marked_dead_after(victim.worker, killed, 30)
    fresh = [Probe.remote() for _ in range(2)]  # none may land on the dead worker
    fresh_where = actorrt.get([p.where.remote() for p in fresh], timeout=60)
    started = time.monotonic()
    actorrt.shutdown()
    return {
        "victim": victim.worker,
        "marked_after": marked_after,
        "fresh": [p.worker for p in fresh],
        "fresh_ok": [w["pid"] > 0 for w in fresh_where],
        "shutdown_s": time.monotonic() - started,
    }


def scenario_dead_name(rt, cfg):
    """A named actor's worker is killed: once marked dead, the name is free again."""
    named = Probe.options(name="keeper").remote()
    victim = named.worker
    os.kill(actorrt.get(named.where.remote(), timeout=60)["pid"], signal.SIGKILL)
    deadline = time.monotonic() + 30
    while _alive(victim) and time.monotonic() < deadline:
        time.sleep(0.1)
    state = {a.name: a.state for a in actorrt.actors()}.get("keeper")
    try:
        actorrt.get_actor("keeper")
        lookup = "found"
    except ValueError as exc:
        lookup = str(exc)
    again = Probe.options(name="keeper").remote()
    where = actorrt.get(actorrt.get_actor("keeper").where.remote(), timeout=60)
    return {
        "victim": victim,
        "marked": _alive(victim) is False,
        "state": state,
        "lookup": lookup,
        "again": again.worker,
        "again_rank": where["rank"],
        "shutdown_s": _timed_shutdown(),
    }


def _try_where(handle, timeout=30):
    """``handle.where()``'s rank, or the error it raised (type and message)."""
    try:
        return actorrt.get(handle.where.remote(), timeout=timeout)["rank"]
    except (actorrt.ActorDiedError, actorrt.GetTimeoutError) as exc:
        return f"{type(exc).__name__}: {exc}"


def _marked_within(process, seconds):
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        if _alive(process) is False:
            return time.monotonic() - started
        time.sleep(0.05)
    return None


def scenario_suspect(rt, cfg):
    """A worker is killed with a call pending; actors are created right after the error.

    One actor alone on the victim, two on the other worker: the victim is where the
    directory would put the next actor if it did not know better.
    """
    a, other, third = Probe.remote(), Probe.remote(), Probe.remote()
    if a.worker == third.worker:
        a, other = other, a
    victim = actorrt.get(a.where.remote(), timeout=60)["pid"]
    actorrt.get([other.where.remote(), third.where.remote()], timeout=60)
    pending = a.sleep.remote(60)
    time.sleep(0.2)
    os.kill(victim, signal.SIGKILL)
    killed = time.monotonic()
    error = _outcome(pending, timeout=30)
    b = Probe.remote()  # at once: no sleep, no polling
    b_rank = _try_where(b)
    marked_after = _marked_within(a.worker, 30)
    if marked_after is not None:
        marked_after += time.monotonic() - killed - marked_after  # since the kill
    time.sleep(2)
    c = Probe.remote()
    return {
        "victim": a.worker,
        "error": error,
        "b": b.worker,
        "b_rank": b_rank,
        "c": c.worker,
        "c_rank": _try_where(c),
        "marked_after": marked_after,
        "shutdown_s": _timed_shutdown(),
    }


def scenario_restart_moves_on(rt, cfg):
    """An actor with max_restarts=-1 loses its process, and the process its restart
    would go to dies with it (not yet marked dead): it must come back on the third.

    Layout: three slots of label "r", one per worker; the actor takes the first, one
    filler each the other two; a restart takes the live slot with the fewest actors, the
    lowest index first: the second (the filler's, killed too).
    """
    r = Probe.options(label="r", max_restarts=-1).remote()
    f1 = Probe.options(label="r").remote()
    f2 = Probe.options(label="r").remote()
    where = actorrt.get([x.where.remote() for x in (r, f1, f2)], timeout=60)
    os.kill(where[0]["pid"], signal.SIGKILL)
    os.kill(where[1]["pid"], signal.SIGKILL)
    first = _try_where(r)  # may fail once: it met the dead process
    started = time.monotonic()
    second = _try_where(r)
    return {
        "ranks": [w["rank"] for w in where],
        "first": first,
        "second": second,
        "second_s": time.monotonic() - started,
        "f1_marked": _marked_within(f1.worker, 10) is not None,
        "actors": [dataclasses.asdict(a) for a in actorrt.actors()],
        "shutdown_s": _timed_shutdown(),
    }


def scenario_slow_link(rt, cfg):
    """A 64 MB result over a link the test throttles after READY (the gate file tells).

    Liveness must not ride on the link's queue: the worker is not marked dead while its
    reply crosses (longer than heartbeat_timeout), and answers again after it.
    """
    probe = Probe.remote()
    where = actorrt.get(probe.where.remote(), timeout=60)
    print("READY " + json.dumps(where["pid"]), flush=True)
    deadline = time.monotonic() + 60
    while not os.path.exists(cfg["gate"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    started = time.monotonic()
    try:
        big = actorrt.get(probe.make.remote(64 << 20), timeout=240)
        result = [big.numel(), float(big[::4096].sum())]
    except actorrt.ActorDiedError as exc:
        result = f"ActorDiedError: {exc}"
    took = time.monotonic() - started
    alive = _alive(probe.worker)
    try:
        after = actorrt.get(probe.where.remote(), timeout=60)["pid"] == where["pid"]
    except actorrt.ActorDiedError:
        after = False
    return {
        "result": result,
        "took": took,
        "alive": alive,
        "after": after,
        "shutdown_s": _timed_shutdown(),
    }


def _alive(process):
    return next((n.alive for n in actorrt.nodes() if n.process == process), None)


def _outcome(ref, timeout=10):
    try:
        actorrt.get(ref, timeout=timeout)
        return "answered"
    except actorrt.ActorDiedError:
        return "ActorDiedError"
    except actorrt.GetTimeoutError:
        return "timed out"


def _marked_dead_after(worker, since, limit):
    """Seconds from ``since`` until the driver marked ``worker`` dead; None: not in ``limit``."""
    while time.monotonic() - since < limit:
        if not next(n.alive for n in actorrt.nodes() if n.process == worker):
            return time.monotonic() - since
        time.sleep(0.1)
    return None


def _timed_shutdown():
    started = time.monotonic()
    actorrt.shutdown()
    return time.monotonic() - started


def scenario_rejoin(rt, cfg):
    """Rank 2 dies and a worker started the same way takes its place; then one grows it.

    The test kills rank 2 after READY and starts its replacement at once (the claim waits
    for the heartbeat to mark it dead), starts a ``--grow`` worker after GROW, and creates
    the file ``gate`` once it has seen what it waits for after GROWN.
    """
    a = Probe.options(label="a").remote()
    b = Probe.options(label="b").remote()
    first = actorrt.get(b.where.remote(), timeout=60)
    print("READY " + json.dumps(first["pid"]), flush=True)
    deadline = time.monotonic() + 60

    def b_state():
        return next((x.state for x in actorrt.actors() if x.actor_id == b.actor_id), None)

    # Watched through b's row, which stays DEAD: worker2's own "not alive" can last less
    # than a poll, its replacement being admitted at once (was: this loop then waited out
    # its 60 s and the test saw no GROW line).
    while b_state() == "ALIVE" and time.monotonic() < deadline:
        time.sleep(0.05)
    marked_dead = b_state() == "DEAD"
    while not _alive(b.worker) and time.monotonic() < deadline:
        time.sleep(0.05)
    back = bool(_alive(b.worker))
    old_handle = _outcome(b.where.remote())
    b2 = Probe.options(label="b").remote()
    second = actorrt.get(b2.where.remote(), timeout=60)
    relay_to_b2 = actorrt.get(a.relay.remote(b2, 1 << 16), timeout=60)
    print("GROW", flush=True)
    while len(actorrt.nodes()) < cfg["world"] + 1 and time.monotonic() < deadline + 60:
        time.sleep(0.05)
    grown = [n.process for n in actorrt.nodes()][cfg["world"] :]
    c = Probe.options(label="c").remote()
    third = actorrt.get(c.where.remote(), timeout=60)
    relay_to_c = actorrt.get(a.relay.remote(c, 1 << 16), timeout=60)
    relay_from_c = actorrt.get(c.relay.remote(b2, 1 << 16), timeout=60)
    plan_names = [p["name"] for p in actorrt.plan()["processes"]]
    print("GROWN", flush=True)
    while not os.path.exists(cfg["gate"]) and time.monotonic() < deadline + 120:
        time.sleep(0.05)  # the test checks a refused claim meanwhile
    shutdown_s = _timed_shutdown()
    return {
        "first": first,
        "marked_dead": marked_dead,
        "back": back,
        "old_handle": old_handle,
        "second": second,
        "b2_worker": b2.worker,
        "relay_to_b2": [relay_to_b2[0], relay_to_b2[1]["pid"]],
        "grown": grown,
        "third": third,
        "c_worker": c.worker,
        "relay_to_c": [relay_to_c[0], relay_to_c[1]["pid"]],
        "relay_from_c": [relay_from_c[0], relay_from_c[1]["pid"]],
        "plan_names": plan_names,
        "shutdown_s": shutdown_s,
    }


def scenario_gil_stuck(rt, cfg):
    """A worker's method holds the GIL in C for minutes: marked dead, then ended by its
    watchdog (the driver of another node cannot kill it)."""
    probe = Probe.remote()
    where = actorrt.get(probe.where.remote(), timeout=60)
    stuck = probe.stuck_in_c_with_the_gil.remote(300)
    began = time.monotonic()
    marked_after = _marked_dead_after(probe.worker, began, 60)
    return {
        "pid": where["pid"],
        "marked_after": marked_after,
        "stuck_call": _outcome(stuck, timeout=30),
        "shutdown_s": _timed_shutdown(),
    }


def scenario_partition(rt, cfg):
    """The test cuts the worker's link after READY: when is it marked dead, and after."""
    probe = Probe.remote()
    where = actorrt.get(probe.where.remote(), timeout=60)
    pending = probe.sleep.remote(120)  # held by the worker when its link goes down
    print("READY " + json.dumps(where["pid"]), flush=True)
    ready = time.monotonic()
    marked_after = _marked_dead_after(probe.worker, ready, 60)
    # No timeout: the worker being marked dead must end the wait.
    pending_call = _outcome(pending, timeout=None)
    pending_failed_after = time.monotonic() - ready
    late_call = _outcome(probe.where.remote())
    return {
        "marked_after": marked_after,
        "pending_call": pending_call,
        "pending_failed_after": pending_failed_after,
        "late_call": late_call,
        "shutdown_s": _timed_shutdown(),
    }


def main():
    cfg = json.loads(sys.argv[1])
    faulthandler.enable()  # a crash (at exit, too) shows where each thread stood
    signal.alarm(cfg.get("alarm", 300))
    started = time.monotonic()
    try:
        rt = actorrt.start(
            init_method=cfg["init"],
            world_size=cfg["world"],
            labels=cfg.get("labels"),
            talks=cfg.get("talks"),
            token=cfg.get("token"),
            transport=cfg.get("transport", "auto"),
            timeout=cfg.get("timeout", 60),
            log_level=cfg.get("log_level"),
            heartbeat_timeout=cfg.get("heartbeat_timeout", 10.0),
            shutdown_timeout=cfg.get("shutdown_timeout", 10.0),
            num_worker_threads=cfg.get("num_worker_threads", 16),
            trace=cfg.get("trace"),
        )
        start_s = time.monotonic() - started
    except Exception as exc:
        print(f"START-FAILED {type(exc).__name__}: {exc}", flush=True)
        sys.exit(2)
    if cfg["scenario"] == "idle":  # for the driver-kill test: actors up, then wait
        probes = [Probe.remote() for _ in range(cfg["world"] - 1)]
        where = actorrt.get([p.where.remote() for p in probes], timeout=60)
        print("READY " + json.dumps(sorted(w["pid"] for w in where)), flush=True)
        time.sleep(600)
        return
    out = globals()["scenario_" + cfg["scenario"]](rt, cfg)
    out["start_s"] = start_s
    me = rt.plan.for_rank(0).name  # "driver_<session>": shown as "driver" below

    def name(n):
        return "driver" if n == me else n

    out["plan_pairs"] = [[name(p.src), name(p.dst), p.transport] for p in rt.plan.pairs]
    out["plan_channels"] = {name(p.name): p.channels for p in rt.plan.processes}
    out["plan_env"] = {name(p.name): p.env for p in rt.plan.processes}
    out["descriptions"] = rt.descriptions
    print("RESULT " + json.dumps(out), flush=True)
    actorrt.shutdown()  # a second call (after a scenario's own) does nothing
    print("SHUTDOWN-DONE", flush=True)


if __name__ == "__main__":
    main()
