"""``actorrt.start(trace=True)`` / ``ACTORRT_TRACE=1`` and ``actorrt.timeline(path)``.

Each test runs its driver as a script (``scripts.run_script``: a fresh interpreter per
cluster, its processes killed by pid at the end) and reads the trace file it wrote.
"""

import json

import pytest
from netns import driver_argv, free_port, worker_argv
from scripts import run_script

pytestmark = pytest.mark.timeout(180)

HEADER = """
import os, time
import torch
import actorrt

@actorrt.actor
class Echo:
    def ping(self, x):
        with actorrt.profile("nap", ms=20):  # a span of the user's, inside the run
            time.sleep(0.02)  # a run long enough to see, next to the waits behind it
        return x

@actorrt.actor
class Maker:
    def make(self, n):
        time.sleep(0.02)  # as long as a ping: every run below is checked for its length
        return torch.ones(n, dtype=torch.uint8)
    def put(self, n):
        time.sleep(0.02)
        return [actorrt.put(torch.ones(n, dtype=torch.uint8))]

@actorrt.actor
class Streamer:
    def chunks(self, n):
        time.sleep(0.02)  # as long as a ping: every run below is checked for its length
        for i in range(n):
            yield torch.full((1024,), i)

@actorrt.remote
def nap_fn(x):
    time.sleep(0.05)
    return x

@actorrt.actor
class Relay:
    def relay(self, echo, n):
        # a call made from inside an actor: its round trip is recorded on that worker
        return actorrt.get(echo.ping.remote(torch.ones(n)))
"""


def _events(path):
    with open(path) as f:
        trace = json.load(f)
    assert isinstance(trace, dict) and isinstance(trace["traceEvents"], list)
    for ev in trace["traceEvents"]:  # the fields every event of the format has
        assert {"ph", "pid", "name"} <= set(ev), ev
    return trace


def _spans(trace):
    """Per call key: its round trip, its wait (both b/e pairs) and its run (X), in us."""
    out: dict[str, dict[str, tuple[float, float, int]]] = {}
    begins = {}
    for ev in trace["traceEvents"]:
        if ev["ph"] == "b":
            begins[(ev["cat"], ev["id"], ev["pid"])] = ev
        elif ev["ph"] == "e":
            b = begins.pop((ev["cat"], ev["id"], ev["pid"]))
            out.setdefault(ev["id"], {})[ev["cat"]] = (b["ts"], ev["ts"], ev["pid"])
        elif ev["ph"] == "X" and ev["cat"] != "span":
            key = ev["args"]["call"]
            out.setdefault(key, {})[ev["cat"]] = (ev["ts"], ev["ts"] + ev["dur"], ev["pid"])
    assert not begins, f"async slices never ended: {list(begins)[:3]}"
    return out


def test_timeline_names_methods_and_nests_wait_and_run_in_the_round_trip(tmp_path):
    body = f"""
    path = {str(tmp_path / "timeline.json")!r}
    with actorrt.start(num_workers=2, trace=True) as rt:
        echo = Echo.remote()
        relay = Relay.remote()
        refs = [echo.ping.remote(torch.zeros(256)) for _ in range(4)]  # queued behind each other
        actorrt.get(refs, timeout=60)
        actorrt.get(relay.relay.remote(echo, 8), timeout=60)
        maker = Maker.remote()
        big = maker.make.remote(40 << 20)  # kept at its maker: the get fetches it
        actorrt.get(big, timeout=60)
        (sealed,) = actorrt.get(maker.put.remote(2 << 20), timeout=60)
        assert int(actorrt.get(sealed, timeout=60).sum()) == 2 << 20  # mapped on this host
        assert len(actorrt.get(list(Streamer.remote().chunks.remote(3)), timeout=60)) == 3
        trace = actorrt.timeline(path)
        report(pids=list(rt.local_worker_pids), driver=os.getpid(), n=len(trace["traceEvents"]))
    """
    (rep,) = run_script(tmp_path, HEADER, body, timeout=150, name="trace_on.py")
    trace = _events(tmp_path / "timeline.json")
    assert len(trace["traceEvents"]) == rep["n"]
    names = {ev["args"]["name"] for ev in trace["traceEvents"] if ev["name"] == "process_name"}
    assert len(names) == 3 and any(n.startswith("worker1 ") for n in names), names
    runs = [ev for ev in trace["traceEvents"] if ev.get("cat") == "run"]
    assert {ev["name"] for ev in runs} >= {"Echo.ping", "Relay.relay"}
    threads = {ev["args"]["name"] for ev in trace["traceEvents"] if ev["name"] == "thread_name"}
    assert any(t.startswith("Echo-") for t in threads), threads  # the actor's track

    spans = _spans(trace)
    pings = [s for s in spans.values() if "run" in s and "call" in s]
    # the driver's four pings and the relay's one, each seen from both ends
    assert len(pings) >= 5, spans
    for s in pings:
        call_b, call_e, caller_pid = s["call"]
        wait_b, wait_e, actor_pid = s["wait"]
        run_b, run_e, run_pid = s["run"]
        assert caller_pid != actor_pid == run_pid
        # the mailbox wait and the run lie inside the caller's round trip, in that order
        assert call_b <= wait_b <= wait_e <= run_b <= run_e <= call_e, s
        assert run_e - run_b >= 15_000  # the 20 ms sleep, in microseconds
    # four pings sent at once: the later ones waited in the mailbox behind the first
    driver_pings = [s for s in pings if s["call"][2] == rep["driver"]]
    waits = sorted(s["wait"][1] - s["wait"][0] for s in driver_pings)
    assert waits[-1] >= 15_000, waits
    # the relay's call from inside an actor is recorded on that actor's worker
    assert any(s["call"][2] != rep["driver"] for s in pings)
    sent = [ev for ev in trace["traceEvents"] if ev.get("cat") == "call" and ev["ph"] == "b"]
    assert any(ev["args"]["bytes_out"] >= 256 * 4 for ev in sent), sent[:2]
    # the method's own spans lie inside its runs, on the actor's thread
    naps = [ev for ev in trace["traceEvents"] if ev.get("cat") == "span"]
    ping_runs = [ev for ev in runs if ev["name"] == "Echo.ping"]
    assert len(naps) == len(ping_runs) == 5 and all(ev["name"] == "nap" for ev in naps), naps
    for nap in naps:
        assert nap["args"] == {"ms": 20} and nap["dur"] >= 15_000
        assert any(
            (r["pid"], r["tid"]) == (nap["pid"], nap["tid"])
            and r["ts"] <= nap["ts"] <= nap["ts"] + nap["dur"] <= r["ts"] + r["dur"]
            for r in ping_runs
        ), nap
    # a streaming call's values, each on the actor's thread under the call's key
    values = [ev for ev in trace["traceEvents"] if ev.get("cat") == "value"]
    assert sorted(ev["args"]["index"] for ev in values) == [0, 1, 2], values
    assert all(ev["name"] == "value Streamer.chunks" for ev in values)
    assert all(ev["args"]["bytes"] >= 4096 and ev["args"]["call"] in spans for ev in values)
    # the driver's fetch of the object kept at its maker: its bytes, owner and road; and
    # its read of the put, mapped from the maker's shared memory with no message
    fetches = [ev for ev in trace["traceEvents"] if ev.get("cat") == "fetch" and ev["ph"] == "b"]
    assert len(fetches) == 2 and {ev["pid"] for ev in fetches} == {rep["driver"]}, fetches
    fetched, mapped = sorted(fetches, key=lambda ev: ev["args"]["road"] == "mapped")
    assert fetched["args"]["bytes"] >= 40 << 20
    assert fetched["args"]["from"].startswith("worker") and fetched["args"]["road"] != "mapped"
    assert mapped["args"]["road"] == "mapped" and mapped["args"]["bytes"] == 2 << 20, mapped
    assert mapped["args"]["from"] == fetched["args"]["from"]


def test_remote_function_calls_each_have_a_key_of_their_own(tmp_path):
    # Executors have one id on every process (fn/1) and callers number per process:
    # before, calls to two processes shared keys and their slices were paired wrongly.
    body = f"""
    path = {str(tmp_path / "timeline.json")!r}
    with actorrt.start(num_workers=2, trace=True) as rt:
        assert actorrt.get([nap_fn.remote(i) for i in range(4)], timeout=60) == [0, 1, 2, 3]
        actorrt.timeline(path)  # at once: the replies just read are recorded too
        report(pids=list(rt.local_worker_pids), driver=os.getpid())
    """
    (rep,) = run_script(tmp_path, HEADER, body, timeout=150, name="trace_fn.py")
    trace = _events(tmp_path / "timeline.json")
    calls = [ev for ev in trace["traceEvents"] if ev.get("cat") == "call" and ev["ph"] == "b"]
    assert len(calls) == 4 and len({ev["id"] for ev in calls}) == 4, calls
    spans = _spans(trace)
    for ev in calls:
        s = spans[ev["id"]]
        call_b, call_e, caller_pid = s["call"]
        run_b, run_e, run_pid = s["run"]
        assert caller_pid == rep["driver"] != run_pid
        assert call_b <= s["wait"][0] <= run_b <= run_e <= call_e, s
        assert ev["args"]["to"] in ev["id"]  # the process that ran it is in its key
    names = {ev["name"] for ev in trace["traceEvents"] if ev.get("cat") in ("call", "run")}
    assert names == {"nap_fn"}, names  # the function's name on both sides


def test_trace_from_the_environment_and_timeline_refused_when_off(tmp_path):
    body = f"""
    path = {str(tmp_path / "env.json")!r}
    os.environ["ACTORRT_TRACE"] = "1"
    with actorrt.start(num_workers=1) as rt:
        echo = Echo.remote()
        actorrt.get(echo.ping.remote(1), timeout=60)
        actorrt.timeline(path)
        pids = list(rt.local_worker_pids)
    os.environ["ACTORRT_TRACE"] = "0"
    # the second cluster of this process: only its refusal is looked at
    with actorrt.start(num_workers=1) as rt:
        pids += list(rt.local_worker_pids)
        try:
            actorrt.timeline()
            refused = ""
        except RuntimeError as exc:
            refused = str(exc)
    report(pids=pids, refused=refused)
    """
    (rep,) = run_script(tmp_path, HEADER, body, timeout=150, name="trace_env.py")
    trace = _events(tmp_path / "env.json")
    assert any(ev.get("cat") == "run" and ev["name"] == "Echo.ping" for ev in trace["traceEvents"])
    assert "trace=True" in rep["refused"]


def test_multinode_workers_trace_when_the_driver_says_so(procs, tmp_path):
    """``actorrt worker`` processes (loopback) learn the flag from the driver's plan."""
    init = f"tcp://127.0.0.1:{free_port()}"
    env = {"ACTORRT_TOKEN": "trace-test-token"}
    path = str(tmp_path / "multinode.json")
    cfg = {"init": init, "world": 3, "scenario": "trace", "trace": True, "timeline": path}
    procs.start("driver", driver_argv(cfg), env)
    for rank in (1, 2):
        procs.start(f"worker{rank}", worker_argv(init, rank, 3), env)
    res = procs.result("driver", 90)
    assert procs.wait("driver", 30) == 0, procs.logs()
    rows = {int(pid): name for pid, name in res["rows"].items()}
    assert set(res["worker_pids"]) <= set(rows), (rows, res["worker_pids"])
    # each worker recorded its actor's runs: the flag reached them through the plan
    assert sorted(res["runs"]) == ["worker1", "worker2"], res["runs"]
    assert all({"Probe.where", "Probe.echo"} <= set(r) for r in res["runs"].values())
    _events(path)
