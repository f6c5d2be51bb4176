"""Worker output on the driver's terminal, like Ray's ``log_to_driver``.

In each worker, :func:`install` replaces ``sys.stdout`` and ``sys.stderr`` with streams
that cut what is written into lines, tag each line with where it came from and queue it;
one thread per worker sends the queued lines, in order, in batches, with a plain RPC to
:func:`rpc_print` on the driver, which prints each line on its own ``sys.stdout`` /
``sys.stderr`` as ``(Learner pid=1234 host=node1) text``.

- The tag is the actor's class when the line was printed inside an actor method (or
  its constructor), else the process's name (``worker2``). Lines of one process travel
  through one queue, so they keep their order, stdout and stderr lines among each other
  too.
- Partial lines wait per thread for their newline (or a ``flush()``), so two threads
  printing at once never mix within a line.
- The queue is bounded: a driver that cannot keep up loses lines, counted, and is told
  how many. When the driver cannot be reached any more, lines are printed on the
  worker's own terminal instead.
- Only Python-level writes are caught. What C++ code writes to file descriptors 1 and 2
  (torch's own warnings) stays on the worker's terminal, which for a local cluster is the
  driver's.
"""

from __future__ import annotations

import io
import os
import sys
import threading
from collections import deque
from collections.abc import Callable
from typing import Any, TextIO

from actorrt.runtime.exits import in_method

__all__ = [
    "Line",
    "OutputForwarder",
    "format_tag",
    "install",
    "installed",
    "rpc_flush_output",
    "rpc_print",
    "source_class",
    "uninstall",
]

Line = tuple[int, str | None, str]
"""One line of output: (0 for stdout / 1 for stderr, the actor's class or None, the text)."""

Header = tuple[str, int, str]
"""Where a batch comes from: (process name, pid, host)."""

MAX_QUEUED_LINES = 10_000
MAX_BATCH_LINES = 1_000
SEND_TIMEOUT_S = 30.0

# The mailbox runs an actor's methods on threads named "<Class>-<first 8 hex of its id>_<n>"
# (an async actor: "<Class>-<id8>-loop"); a class name is an identifier, so it has no "-".


def source_class() -> str | None:
    """The class of the actor whose method runs in this thread or task; None outside one."""
    running = in_method.get()
    return None if running is None else running.split(".", 1)[0]


def format_tag(header: Header, actor_class: str | None) -> str:
    """``(Learner pid=1234 host=node1)``: where a line came from."""
    process, pid, host = header
    return f"({actor_class or process} pid={pid} host={host})"


class OutputForwarder:
    """A bounded queue of lines and the one thread that sends them, in order, in batches.

    Args:
        send: Delivers one batch (called on the forwarding thread; raises on failure).
        header: Where the lines come from: (process name, pid, host).
        real: The streams to print on when sending fails: (stdout, stderr).
        max_queued: Lines kept waiting at most; more are dropped, and counted.
        max_batch: Lines per batch at most.
    """

    def __init__(
        self,
        send: Callable[[Header, list[Line]], None],
        header: Header,
        real: tuple[TextIO, TextIO],
        *,
        max_queued: int = MAX_QUEUED_LINES,
        max_batch: int = MAX_BATCH_LINES,
    ) -> None:
        self._send = send
        self.header = header
        self.real = real
        self._max_queued = max_queued
        self._max_batch = max_batch
        # An RLock: a signal handler or a __del__ that prints may run while this thread
        # holds it.
        self._cond = threading.Condition(threading.RLock())
        self._lines: deque[Line] = deque()
        self._busy = False  # a batch is being sent
        self._closing = False
        self._local = False  # the driver could not be reached: print here from now on
        self.dropped = 0  # lines lost because the queue was full
        self._unreported = 0  # of those, not yet told to the driver
        self.pid = os.getpid()
        self._thread = threading.Thread(target=self._loop, name="actorrt-output", daemon=True)
        self._started = False

    def start(self) -> None:
        """Starts sending (once the RPC agent is up); lines queue until then."""
        with self._cond:
            if self._started or self._closing:
                return
            self._started = True
        self._thread.start()

    def accepting(self) -> bool:
        """Whether a write from this thread goes to the queue (else straight to ``real``).

        The forwarding thread's own writes (a warning raised while sending) would loop
        back into the queue, and a forked child has no forwarding thread.
        """
        return (
            not self._closing
            and os.getpid() == self.pid
            and threading.current_thread() is not self._thread
        )

    def put(self, line: Line) -> None:
        """Queues a line; drops it (counted) when the queue is full."""
        with self._cond:
            if len(self._lines) >= self._max_queued:
                self.dropped += 1
                self._unreported += 1
                return
            self._lines.append(line)
            self._cond.notify_all()

    def flush(self, timeout: float) -> bool:
        """Waits up to ``timeout`` s until every queued line was sent; True if so."""
        with self._cond:
            if not self._started:
                return not self._lines
            return self._cond.wait_for(lambda: not self._lines and not self._busy, timeout)

    def close(self, timeout: float) -> None:
        """Sends what is queued (within ``timeout`` s), then stops the forwarding thread.

        Lines still queued then (never started: RPC did not come up) are printed here.
        """
        self.flush(timeout)
        with self._cond:
            self._closing = True
            self._cond.notify_all()
            started = self._started
        if started:
            self._thread.join(max(0.1, min(timeout, 1.0)))
        with self._cond:
            left = list(self._lines)  # not the batch in flight: it left the queue
            self._lines.clear()
        if left:
            self._write_local(left)

    def _loop(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._lines or self._closing)
                if not self._lines:
                    return  # closing, and nothing left
                n = min(len(self._lines), self._max_batch)
                batch = [self._lines.popleft() for _ in range(n)]
                if self._unreported:
                    batch.append(
                        (
                            1,
                            None,
                            f"actorrt: {self._unreported} line(s) of output were dropped: more "
                            f"than {self._max_queued} waited for the driver.",
                        )
                    )
                    self._unreported = 0
                self._busy = True
            try:
                self._deliver(batch)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def _deliver(self, batch: list[Line]) -> None:
        if not self._local:
            try:
                self._send(self.header, batch)
                return
            except Exception as exc:
                # The driver is gone or stopping; the lines are not lost: print them here.
                self._local = True
                self._write_local(
                    [
                        (
                            1,
                            None,
                            f"actorrt: cannot send output to the driver ({exc}); printing it here.",
                        )
                    ]  # fmt: skip
                )
        self._write_local(batch)

    def _write_local(self, batch: list[Line]) -> None:
        try:
            write_lines(self.real, self.header, batch)
        except Exception:  # nowhere left to print: give up on these lines
            pass


def write_lines(streams: tuple[TextIO, TextIO], header: Header, batch: list[Line]) -> None:
    """Prints ``batch`` on ``streams`` (stdout, stderr), each line with its tag, in order.

    Consecutive lines of one stream go out in one write; a stream is flushed before the
    other is written to, so their order survives on a terminal that shows both.
    """
    i = 0
    while i < len(batch):
        index = batch[i][0]
        j = i
        while j < len(batch) and batch[j][0] == index:
            j += 1
        stream = streams[1 if index else 0]
        stream.write("".join(f"{format_tag(header, cls)} {text}\n" for _, cls, text in batch[i:j]))
        stream.flush()
        i = j


class _LineStream(io.TextIOBase):
    """A ``sys.stdout`` / ``sys.stderr`` that queues whole, tagged lines on a forwarder."""

    def __init__(self, index: int, real: TextIO, forwarder: OutputForwarder) -> None:
        super().__init__()
        self._index = index
        self.real = real
        self._forwarder = forwarder
        self._pending: dict[int, str] = {}  # thread id -> its unfinished line

    def write(self, s: str) -> int:
        if not isinstance(s, str):
            raise TypeError(f"write() argument must be str, not {type(s).__name__}")
        if not self._forwarder.accepting():
            return self.real.write(s)
        me = threading.get_ident()
        text = self._pending.pop(me, "") + s
        if "\n" not in text:
            if text:
                self._pending[me] = text
            return len(s)
        *lines, rest = text.split("\n")
        if rest:
            self._pending[me] = rest
        actor_class = source_class()
        for line in lines:
            self._forwarder.put((self._index, actor_class, line))
        return len(s)

    def flush(self) -> None:
        """Sends this thread's unfinished line as a line: it was flushed to be seen."""
        if not self._forwarder.accepting():
            self.real.flush()
            return
        text = self._pending.pop(threading.get_ident(), "")
        if text:
            self._forwarder.put((self._index, source_class(), text))

    def flush_all(self) -> None:
        """Sends every thread's unfinished line (when the worker stops)."""
        for key in list(self._pending):
            text = self._pending.pop(key, "")
            if text:
                self._forwarder.put((self._index, None, text))

    # What code expecting a real stream asks of it goes to the real one.
    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self.real.fileno()

    def isatty(self) -> bool:
        return self.real.isatty()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self.real, "encoding", "utf-8")

    @property
    def errors(self) -> str | None:  # type: ignore[override]
        return getattr(self.real, "errors", None)

    @property
    def buffer(self) -> Any:
        return self.real.buffer  # bytes written there bypass the forwarding


_lock = threading.Lock()
_installed: OutputForwarder | None = None


def installed() -> OutputForwarder | None:
    """The forwarder of this process, if its output goes to the driver."""
    return _installed


def install(send: Callable[[Header, list[Line]], None], header: Header) -> OutputForwarder:
    """Sends this process's ``sys.stdout`` / ``sys.stderr`` lines through ``send``.

    Lines queue from now on and are sent once :meth:`OutputForwarder.start` is called. A
    worker installs this before ``init_rpc`` and starts it after: the driver may call its
    actors as soon as its own ``init_rpc`` returns, before the worker's does.

    Args:
        send: Delivers one batch to the driver (see :func:`rpc_print`).
        header: (process name, pid, host) of this process.

    Returns:
        The forwarder; :func:`uninstall` undoes this.
    """
    global _installed
    with _lock:
        if _installed is not None:
            return _installed
        forwarder = OutputForwarder(send, header, (sys.stdout, sys.stderr))
        sys.stdout = _LineStream(0, sys.stdout, forwarder)
        sys.stderr = _LineStream(1, sys.stderr, forwarder)
        _installed = forwarder
        return forwarder


def uninstall(timeout: float = 2.0) -> None:
    """Sends what is left (within ``timeout`` s) and gives back the real streams."""
    global _installed
    with _lock:
        forwarder, _installed = _installed, None
        if forwarder is None:
            return
        for stream in (sys.stdout, sys.stderr):
            if isinstance(stream, _LineStream):
                stream.flush_all()
        if isinstance(sys.stdout, _LineStream):
            sys.stdout = sys.stdout.real
        if isinstance(sys.stderr, _LineStream):
            sys.stderr = sys.stderr.real
    forwarder.close(timeout)


def flush_pending(timeout: float) -> bool:
    """Sends every unfinished line and every queued one; True if all went within ``timeout``."""
    forwarder = _installed
    if forwarder is None:
        return True
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, _LineStream):
            stream.flush_all()
    return forwarder.flush(timeout)


# -- RPC entry points ------------------------------------------------------------------

_print_lock = threading.Lock()


def rpc_print(header: Header, batch: list[Line]) -> None:
    """Runs on the driver: prints a worker's lines, tagged, on its stdout and stderr."""
    with _print_lock:  # batches from several workers arrive on several RPC threads
        try:
            write_lines((sys.stdout, sys.stderr), header, batch)
        except Exception:  # a closed terminal must not fail the worker's send
            pass


def rpc_flush_output(timeout: float = 2.0) -> bool:
    """Runs on a worker, sent by the driver before shutdown: sends what is still queued."""
    return flush_pending(timeout)
