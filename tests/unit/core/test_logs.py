"""Logging set-up, the worker-output forwarding pieces, and the status table (no cluster)."""

from __future__ import annotations

import io
import logging
import os
import sys
import threading
import time

import pytest

from actorrt import logs
from actorrt.runtime import output
from actorrt.runtime.directory import ActorInfo, NodeInfo
from actorrt.runtime.exits import in_method
from actorrt.runtime.status import format_status

# -- logging ---------------------------------------------------------------------------


@pytest.fixture
def actorrt_logger(monkeypatch):
    """The ``actorrt`` logger with no level or handler, restored after the test."""
    logger = logging.getLogger("actorrt")
    monkeypatch.delenv(logs.ENV_VAR, raising=False)
    monkeypatch.setattr(logger, "level", logging.NOTSET)
    monkeypatch.setattr(logger, "handlers", [])
    return logger


def no_user_handlers(monkeypatch) -> None:
    """Hides the root logger's handlers (pytest adds its own before each test body)."""
    monkeypatch.setattr(logging.getLogger(), "handlers", [])


def test_quiet_by_default_with_one_handler_on_stderr(actorrt_logger, monkeypatch):
    no_user_handlers(monkeypatch)
    assert logs.configure() == logging.WARNING
    assert logs.configure() == logging.WARNING  # twice: still one handler
    assert len(actorrt_logger.handlers) == 1
    assert logging.getLogger().handlers == []  # the root logger is left alone
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)  # the handler writes to sys.stderr of the moment
    logs.get_logger("driver").info("not shown")
    logs.get_logger("driver").warning("rank %d died", 3)
    assert "not shown" not in err.getvalue()
    assert "actorrt WARNING: rank 3 died" in err.getvalue()


@pytest.mark.parametrize("given", ["info", "INFO", " Info ", logging.INFO, "20"])
def test_level_from_the_argument(actorrt_logger, given):
    assert logs.configure(given) == logging.INFO


def test_level_from_the_environment_and_the_argument_wins(actorrt_logger, monkeypatch):
    monkeypatch.setenv(logs.ENV_VAR, "debug")
    assert logs.configure() == logging.DEBUG
    assert logs.configure("error") == logging.ERROR


def test_a_level_the_user_set_is_kept(actorrt_logger):
    actorrt_logger.setLevel(logging.DEBUG)
    assert logs.configure() == logging.DEBUG


def test_no_handler_when_the_user_configured_logging(actorrt_logger, monkeypatch):
    no_user_handlers(monkeypatch)
    user = logging.StreamHandler(io.StringIO())
    logging.getLogger().addHandler(user)
    logs.configure("info")
    assert actorrt_logger.handlers == []  # records reach the user's handler instead
    logs.get_logger("rendezvous").info("rank 1 joined")
    assert "rank 1 joined" in user.stream.getvalue()


@pytest.mark.parametrize("bad", ["loud", "", -1, True, 2.5])
def test_bad_levels_are_refused_with_the_choices(actorrt_logger, bad):
    with pytest.raises(ValueError, match="use debug, info, warning, error or critical"):
        logs.parse_level(bad)


def test_a_bad_environment_level_names_the_variable(actorrt_logger, monkeypatch):
    monkeypatch.setenv(logs.ENV_VAR, "chatty")
    with pytest.raises(ValueError, match="ACTORRT_LOG_LEVEL='chatty'"):
        logs.configure()


def test_level_names_travel_to_workers():
    assert logs.level_name(logging.INFO) == "INFO"
    assert logs.level_name(15) == "15"
    assert logs.parse_level(logs.level_name(15)) == 15


# -- worker output ---------------------------------------------------------------------


class Sink:
    """Collects the batches a forwarder sends; can fail or be slow on demand."""

    def __init__(self) -> None:
        self.batches: list[list[output.Line]] = []
        self.fail = False
        self.gate = threading.Event()
        self.gate.set()

    def __call__(self, header, batch) -> None:
        self.gate.wait(10)
        if self.fail:
            raise RuntimeError("RPC is not running")
        self.batches.append(list(batch))

    def lines(self) -> list[output.Line]:
        return [line for batch in self.batches for line in batch]


HEADER = ("worker3", 4242, "node7")


@pytest.fixture
def streams():
    """A forwarder with two line streams over StringIO 'real' streams (not sys.*)."""
    real = (io.StringIO(), io.StringIO())
    sink = Sink()
    fwd = output.OutputForwarder(sink, HEADER, real, max_batch=7)
    out = output._LineStream(0, real[0], fwd)
    err = output._LineStream(1, real[1], fwd)
    fwd.start()
    try:
        yield sink, fwd, out, err, real
    finally:
        fwd.close(2.0)


def test_lines_keep_their_order_across_stdout_and_stderr(streams):
    sink, fwd, out, err, _ = streams
    for i in range(30):
        print(f"out {i}", file=out)
        print(f"err {i}", file=err)
    assert fwd.flush(5)
    got = sink.lines()
    assert [(index, text) for index, _, text in got] == [
        (index, f"{kind} {i}") for i in range(30) for index, kind in ((0, "out"), (1, "err"))
    ]
    assert max(len(b) for b in sink.batches) <= 7


def test_partial_lines_wait_per_thread_and_flush_sends_them(streams):
    sink, fwd, out, _, _ = streams
    out.write("a-")
    t = threading.Thread(target=lambda: out.write("other thread\n"))
    t.start()
    t.join()
    out.write("b\nc")
    assert fwd.flush(5)
    assert [text for _, _, text in sink.lines()] == ["other thread", "a-b"]
    out.flush()  # a flushed partial line is sent: it was flushed to be seen
    assert fwd.flush(5)
    assert [text for _, _, text in sink.lines()][-1] == "c"


def test_lines_from_an_actor_method_carry_its_class(streams):
    sink, fwd, out, _, _ = streams

    def method() -> None:
        token = in_method.set("Learner.step")
        try:
            print("inside", file=out)
        finally:
            in_method.reset(token)
        print("outside", file=out)

    t = threading.Thread(target=method, name="Thread-9")  # any thread: the method says
    t.start()
    t.join()
    assert fwd.flush(5)
    tags = [(cls, text) for _, cls, text in sink.lines()]
    assert tags == [("Learner", "inside"), (None, "outside")]


def test_a_full_queue_drops_lines_and_says_how_many():
    real = (io.StringIO(), io.StringIO())
    sink = Sink()
    fwd = output.OutputForwarder(sink, HEADER, real, max_queued=50, max_batch=7)
    out = output._LineStream(0, real[0], fwd)
    fwd.start()
    sink.gate.clear()  # the driver is slow: nothing leaves
    print("first", file=out)
    deadline = time.monotonic() + 5
    while not fwd._busy and time.monotonic() < deadline:  # "first" is in flight
        time.sleep(0.01)
    for i in range(60):
        print(f"line {i}", file=out)
    assert fwd.dropped == 10  # 50 queued at most
    sink.gate.set()
    assert fwd.flush(5)
    fwd.close(2.0)
    texts = [text for _, _, text in sink.lines()]
    notes = [t for t in texts if t.startswith("actorrt:")]
    assert [t for t in texts if t not in notes] == ["first"] + [f"line {i}" for i in range(50)]
    assert len(notes) == 1 and "10 line(s) of output were dropped" in notes[0]


def test_when_the_driver_is_gone_lines_are_printed_here(streams):
    sink, fwd, out, err, real = streams
    sink.fail = True
    print("last words", file=err)
    assert fwd.flush(5)
    print("more", file=out)
    assert fwd.flush(5)
    assert "cannot send output to the driver" in real[1].getvalue()
    assert "(worker3 pid=4242 host=node7) last words\n" in real[1].getvalue()
    assert real[0].getvalue() == "(worker3 pid=4242 host=node7) more\n"


def test_writes_of_the_forwarding_thread_and_of_a_forked_child_go_to_the_real_stream(streams):
    sink, fwd, out, _, real = streams
    fwd.pid = os.getpid() + 1  # as a forked child sees it
    print("in the child", file=out)
    assert real[0].getvalue() == "in the child\n"
    assert sink.lines() == []


def test_lines_queued_before_start_are_printed_here_if_it_never_starts():
    real = (io.StringIO(), io.StringIO())
    fwd = output.OutputForwarder(Sink(), HEADER, real)
    out = output._LineStream(0, real[0], fwd)
    print("early", file=out)
    fwd.close(1.0)
    assert real[0].getvalue() == "(worker3 pid=4242 host=node7) early\n"


def test_the_stream_answers_like_the_real_one(streams):
    _, _, out, _, real = streams
    assert out.writable() and not out.isatty()
    assert out.encoding == real[0].encoding
    with pytest.raises(TypeError, match="must be str"):
        out.write(b"bytes")  # type: ignore[arg-type]


def test_install_replaces_and_restores_sys_streams(monkeypatch):
    monkeypatch.setattr(sys, "stdout", io.StringIO())
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    real_out, real_err = sys.stdout, sys.stderr
    sink = Sink()
    fwd = output.install(sink, HEADER)
    try:
        assert output.installed() is fwd and sys.stdout is not real_out
        fwd.start()
        print("hello")
        print("unfinished", end="", file=sys.stderr)
    finally:
        output.uninstall(2.0)
    assert sys.stdout is real_out and sys.stderr is real_err
    assert output.installed() is None
    assert [(i, text) for i, _, text in sink.lines()] == [(0, "hello"), (1, "unfinished")]


def test_the_driver_prints_each_line_with_its_tag(monkeypatch):
    out, err = io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    output.rpc_print(HEADER, [(0, "Learner", "loss 0.5"), (1, None, "warning!"), (0, None, "x")])
    assert out.getvalue() == (
        "(Learner pid=4242 host=node7) loss 0.5\n(worker3 pid=4242 host=node7) x\n"
    )
    assert err.getvalue() == "(worker3 pid=4242 host=node7) warning!\n"


# -- status ------------------------------------------------------------------------------


def _node(rank, host="n0", alive=True, labels=(), gpus=()):
    return NodeInfo(
        process="driver-ab" if rank == 0 else f"worker{rank}",
        rank=rank,
        host=host,
        labels=labels,
        gpus=gpus,
        alive=alive,
        actors=0,
        hosts_actors=rank != 0,
    )


def _actor(actor_id, cls, rank, host="n0", name=None, slot=None, state="ALIVE", gpus=()):
    return ActorInfo(
        actor_id=actor_id,
        class_name=cls,
        name=name,
        label=slot.split("/")[0] if slot else None,
        process=f"worker{rank}",
        rank=rank,
        host=host,
        gpus=gpus,
        slot=slot,
        state=state,
    )


def test_status_table():
    nodes = [
        _node(0),
        _node(1, labels=("learner",), gpus=(0,)),
        _node(2, host="n1", labels=("collector",)),
        _node(3, host="n1", alive=False),
    ]
    actors = [
        _actor("a" * 32, "Learner", 1, name="learner", slot="learner/0", gpus=(0,)),
        _actor("b" * 32, "Collector", 2, host="n1", slot="collector/0"),
        _actor("c" * 32, "Collector", 2, host="n1", slot="collector/1"),
        _actor("d" * 32, "Probe", 3, host="n1", state="DEAD"),
    ]
    stats = {
        "driver-ab": {"pid": 100, "calls": {}, "objects": [0, 0]},
        "worker1": {
            "pid": 101,
            "calls": {"a" * 32: 2},
            "running": {"a" * 32: ["train", 12.34, 2]},  # the oldest of two
            "objects": [3, 67_200_000],
        },
        # worker2 did not answer
    }
    text = format_status(nodes, actors, stats, pids={2: 102})
    lines = text.splitlines()
    assert lines[0] == (
        "actorrt cluster: 4 process(es) on 2 host(s), 4 actor(s) (3 alive), 2 call(s) in "
        "flight; 1 process(es) dead; 1 process(es) did not answer within 2 s"
    )
    rows = {line.split()[0]: line.split() for line in lines if line.startswith(("driver", "wor"))}
    assert rows["driver-ab"] == [
        "driver-ab",
        "0",
        "100",
        "n0",
        "-",
        "-",
        "-",
        "-",
        "-",
        "alive",
        "(driver)",
    ]
    assert rows["worker1"] == [
        "worker1",
        "1",
        "101",
        "n0",
        "learner",
        "0",
        "1:",
        "Learner",
        "2",
        "3",
        "(67.2",
        "MB)",
        "alive",
    ]
    assert rows["worker2"] == [
        "worker2", "2", "102", "n1", "collector", "-", "2:", "Collector", "x2", "?", "-",
        "unresponsive",
    ]  # fmt: skip
    # Its actor died with it: counted in no process's column, listed (last) as dead.
    assert rows["worker3"] == ["worker3", "3", "?", "n1", "-", "-", "0", "-", "-", "dead"]
    actor_rows = [line.split() for line in lines if line[:8] in ("a" * 8, "b" * 8, "d" * 8)]
    learner = ["a" * 32, "Learner", "learner", "learner/0", "worker1", "n0", "0", "2"]
    # the full id, as handles and errors show it; the call running longest, and one more
    assert [*learner, "train", "12.3s", "+1", "alive"] in actor_rows, text
    assert ["d" * 32, "Probe", "-", "-", "worker3", "n1", "-", "-", "-", "dead"] in actor_rows
    header = next(line for line in lines if line.startswith("ACTOR"))
    assert header.split()[-2:] == ["RUNNING", "STATE"], header


def test_status_caps_the_actor_rows():
    actors = [_actor(f"{i:032x}", "Probe", 1) for i in range(7)]
    text = format_status([_node(0), _node(1)], actors, {}, max_actors=5)
    assert "... and 2 more actor(s)" in text
    assert sum(1 for line in text.splitlines() if line.startswith("00000000")) == 5
