"""The timeline recorder in one process: mailbox hooks, the bound, the Chrome trace form."""

from __future__ import annotations

import json
import time

import pytest
import torch

from actorrt.runtime import trace
from actorrt.runtime.mailbox import Call, Mailbox


class Sleeper:
    def nap(self, seconds):
        time.sleep(seconds)
        return torch.zeros(16)


@pytest.fixture
def tracing():
    trace.enable(True)
    yield
    trace.enable(False)


def _box():
    box = Mailbox("b" * 32, lambda actor_id, why: None, lambda caller, reply: (None, [reply]))
    box.open(Sleeper, (None, [((), {})]), class_name="Sleeper", max_concurrency=1, gpu_ids=())
    return box


def _call(seq, seconds):
    return Call("me", seq, "nap", (None, [((seconds,), {})]), torch.futures.Future())


def test_mailbox_records_wait_run_and_reply_in_order(tracing):
    box = _box()
    first, second = _call(0, 0.05), _call(1, 0.0)
    box.deliver(first)
    box.deliver(second)  # waits in the mailbox behind the first call's 50 ms
    second.future.wait()
    key = f"me/{'b' * 32}/1"
    # the actor's thread records the reply once it has handed it over: just after
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not any(e[5] == key for e in trace.events()):
        time.sleep(0.01)
    box.kill("done")
    recs = {(kind, key): (begin, end) for kind, _, begin, end, _, key, _ in trace.events()}
    wait, run, reply = recs[("wait", key)], recs[("run", key)], recs[("reply", key)]
    assert wait[0] <= wait[1] <= run[0] <= run[1] <= reply[0] <= reply[1]
    assert wait[1] - wait[0] >= 40_000_000  # nanoseconds behind the first call
    run_first = recs[("run", f"me/{'b' * 32}/0")]
    assert run_first[1] - run_first[0] >= 40_000_000
    (detail,) = [d for kind, _, _, _, _, k, d in trace.events() if (kind, k) == ("reply", key)]
    assert detail["bytes"] == 16 * 4  # the returned tensor


def test_nothing_is_recorded_when_off():
    trace.enable(False)
    box = _box()
    call = _call(0, 0.0)
    box.deliver(call)
    call.future.wait()
    box.kill("done")
    assert trace.events() == []


def test_the_buffer_is_bounded(tracing, monkeypatch):
    monkeypatch.setattr(trace, "MAX_EVENTS", 3)
    box = _box()
    calls = [_call(i, 0.0) for i in range(3)]
    for call in calls:
        box.deliver(call)
    calls[-1].future.wait()
    # the last call's "answered" record is made just after its reply is set: wait for it
    deadline = time.monotonic() + 10
    while trace.rpc_collect()["dropped"] < 6 and time.monotonic() < deadline:
        time.sleep(0.01)
    box.kill("done")
    assert len(trace.events()) == 3
    assert trace.rpc_collect()["dropped"] == 6  # three records per call, nine in all


def test_chrome_form_rows_threads_and_clock_offsets():
    ms = 1_000_000
    part = {"name": "worker1", "rank": 1, "pid": 11, "host": "h", "threads": {7: "Sleeper-x"}}
    events = [
        ("wait", "S.nap", 10 * ms, 12 * ms, 7, "k", {}),
        ("run", "S.nap", 12 * ms, 20 * ms, 7, "k", {}),
    ]
    caller = {"name": "driver", "rank": 0, "pid": 10, "host": "g", "threads": {3: "MainThread"}}
    parts = [
        {**caller, "events": [("call", "S.nap", 0, 30 * ms, 3, "k", {"to": "worker1"})]},
        {**part, "events": events, "offset": 5 * ms},  # its clock runs 5 ms ahead
    ]
    out = json.loads(json.dumps(trace.to_chrome(parts, ["worker2: gone"])))
    evs = out["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in evs if e["name"] == "process_name"}
    assert names == {10: "driver (rank 0, g, pid 10)", 11: "worker1 (rank 1, h, pid 11)"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in evs if e["name"] == "thread_name"}
    assert threads == {(10, 3): "MainThread", (11, 7): "Sleeper-x"}
    (run,) = [e for e in evs if e.get("cat") == "run"]
    assert (run["ts"], run["dur"], run["ph"]) == (7000.0, 8000.0, "X")  # offset taken off
    wait = [e for e in evs if e.get("cat") == "wait"]
    assert [(e["ph"], e["ts"]) for e in wait] == [("b", 5000.0), ("e", 7000.0)]
    assert wait[0]["name"] == "wait S.nap" and wait[0]["id"] == "k"
    assert out["otherData"]["missing_processes"] == ["worker2: gone"]


def test_wire_bytes_counts_blob_and_tensors():
    t = torch.zeros(10, dtype=torch.float64)
    assert trace.wire_bytes((b"abc", [t])) == 3 + 80
    assert trace.wire_bytes((None, [((t, 1), {"x": t})])) == 160  # a plain (args, kwargs)
    assert trace.wire_bytes(object()) == 0  # unknown: no figure, no failure


def test_times_since_1970_keep_sub_microsecond_order():
    # Microseconds since 1970 as floats keep a quarter of a microsecond: a wait ending at
    # the very nanosecond its run starts must not end after it in the file.
    now = 1_795_687_331_823_979_812  # ns
    part = {"name": "w", "rank": 1, "pid": 1, "host": "h", "threads": {}}
    events = [
        ("wait", "S.nap", now - 21_908_000, now, 7, "k", {}),
        ("run", "S.nap", now, now + 20_125_000, 7, "k", {}),
    ]
    out = trace.to_chrome([{**part, "events": events}])
    (wait_end,) = [e["ts"] for e in out["traceEvents"] if e.get("ph") == "e"]
    (run,) = [e for e in out["traceEvents"] if e.get("cat") == "run"]
    assert wait_end == run["ts"] == 21_908.0
    assert out["otherData"]["start_unix_ns"] == now - 21_908_000


def test_wire_bytes_finds_tensors_in_a_plain_batch_and_a_reply():
    batch = {"obs": torch.zeros(16, 84, 84, dtype=torch.uint8), "act": torch.zeros(16)}
    # a push's plain (args, kwargs) and a weights reply (status, (version, state dict))
    assert trace.wire_bytes((None, [((batch,), {})])) == 16 * 84 * 84 + 16 * 4
    state = {"w": torch.zeros(4, 4), "b": torch.zeros(4)}
    assert trace.wire_bytes((None, [(0, (3, state))])) == (16 + 4) * 4


def test_profile_spans_nest_on_their_thread_and_reach_the_chrome_form(tracing):
    import threading

    import actorrt

    with actorrt.profile("outer", step=1):
        time.sleep(0.01)
        with actorrt.profile("inner"):
            time.sleep(0.01)

    @actorrt.profile("decorated")
    def work():
        time.sleep(0.005)

    worker = threading.Thread(target=work, name="side-thread")
    worker.start()
    worker.join(10)
    spans = {name: (begin, end, tid, d) for kind, name, begin, end, tid, _, d in trace.events()}
    assert [k for k, *_ in trace.events()] == ["span"] * 3
    outer, inner, decorated = spans["outer"], spans["inner"], spans["decorated"]
    assert outer[0] <= inner[0] <= inner[1] <= outer[1]  # nested: inner lies inside
    assert inner[1] - inner[0] >= 9_000_000 and outer[1] - outer[0] >= 19_000_000
    assert outer[2] == inner[2] == threading.get_ident() != decorated[2]
    assert outer[3] == {"step": 1} and inner[3] == {}
    part = trace.rpc_collect()
    assert part["threads"][decorated[2]] == "side-thread"
    part.update(rank=0, offset=0)
    evs = json.loads(json.dumps(trace.to_chrome([part])))["traceEvents"]
    (out,) = [e for e in evs if e["name"] == "outer"]
    assert (out["ph"], out["cat"], out["args"]) == ("X", "span", {"step": 1})
    assert out["dur"] >= 19_000  # microseconds


def test_a_span_on_a_named_track_gets_a_row_of_its_own(tracing):
    trace.span("gpu step", 1_000, 5_000, track="learner GPU", lag_ms=2.0)
    trace.span("gpu step", 6_000, 9_000, track="learner GPU")
    trace.span("other", 1_000, 2_000, track="second track")
    recs = trace.events()
    tids = [r[4] for r in recs]
    assert tids[0] == tids[1] != tids[2]
    assert all(tid >= 1 << 48 for tid in tids)  # never a real thread's id
    threads = trace.rpc_collect()["threads"]
    assert threads[tids[0]] == "learner GPU" and threads[tids[2]] == "second track"
    assert recs[0][6] == {"lag_ms": 2.0}


def test_profile_records_nothing_when_off():
    import actorrt

    trace.enable(False)
    with actorrt.profile("x"):
        pass
    trace.span("y", 0, 1, track="t")
    assert trace.events() == [] and trace.rpc_collect()["threads"] == {}


def test_a_cuda_span_without_cuda_is_a_host_span(tracing, monkeypatch):
    import actorrt

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with actorrt.profile("step", cuda=True, n=2):
        pass
    (rec,) = trace.events()
    assert rec[0] == "span" and rec[1] == "step" and rec[6] == {"n": 2}
    assert trace.rpc_collect()["threads"] == {rec[4]: "MainThread"}


def test_a_decorated_function_on_two_threads_at_once_records_two_whole_spans(tracing):
    import threading

    import actorrt

    @actorrt.profile("nap")
    def nap():
        time.sleep(0.05)

    threads = [threading.Thread(target=nap) for _ in range(2)]
    threads[0].start()
    time.sleep(0.03)  # the second enters while the first is inside
    threads[1].start()
    for t in threads:
        t.join(10)
    naps = [(end - begin, tid) for _, _, begin, end, tid, _, _ in trace.events()]
    assert len(naps) == 2 and naps[0][1] != naps[1][1]
    assert all(took >= 45_000_000 for took, _ in naps), naps  # neither entry was overwritten


def test_wire_bytes_counts_bytes_inside_a_plain_value():
    # a remote function's call: (key, its cloudpickle bytes, the arguments), sent plain
    assert trace.wire_bytes((None, [(("k", b"x" * 1000, 1.0), {})])) == 1000


def test_a_call_named_with_options_is_shown_by_its_name(tracing):
    from actorrt.runtime.protocol import call_name

    box = _box()
    named = Call(
        "me", 0, call_name("nap", task="nap-42"), (None, [((0.0,), {})]), torch.futures.Future()
    )
    box.deliver(named)
    named.future.wait()
    deadline = time.monotonic() + 10
    key = f"me/{'b' * 32}/0"
    while time.monotonic() < deadline and not any(e[5] == key for e in trace.events()):
        time.sleep(0.01)
    box.kill("done")
    names = {(kind, what) for kind, what, _, _, _, k, _ in trace.events() if k == key}
    assert ("run", "nap-42") in names and ("reply", "nap-42") in names, names
