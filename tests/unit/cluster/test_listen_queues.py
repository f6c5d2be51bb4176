"""deepen_listen_queues: a burst of connects to a listener with a short queue succeeds."""

import os
import socket

from actorrt.runtime.group import deepen_listen_queues


def _burst(path: str, count: int) -> int:
    """Non-blocking connects to ``path`` nobody accepts; how many went through."""
    ok, socks = 0, []
    for _ in range(count):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.setblocking(False)
        socks.append(s)
        try:
            s.connect(path)
            ok += 1
        except BlockingIOError:  # EAGAIN: the listen queue is full
            pass
    for s in socks:
        s.close()
    return ok


def test_a_burst_overflows_a_short_queue_and_fits_a_deepened_one(tmp_path):
    path = str(tmp_path / "listener.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(2)  # as short as TensorPipe's, and then some
    try:
        assert _burst(path, 40) < 40  # what 64+ workers answering rank 0 at once met
        assert deepen_listen_queues(256) >= 1
        # The accept queue still holds the first burst's connections until accepted.
        while True:
            listener.setblocking(False)
            try:
                listener.accept()[0].close()
            except BlockingIOError:
                break
        assert _burst(path, 40) == 40
    finally:
        listener.close()
        os.unlink(path)


def test_sockets_that_do_not_listen_are_left_alone():
    a, b = socket.socketpair()
    try:
        deepen_listen_queues(256)
        assert a.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN) == 0
        a.sendall(b"x")  # still a connected pair, not turned into a listener
        assert b.recv(1) == b"x"
    finally:
        a.close()
        b.close()
