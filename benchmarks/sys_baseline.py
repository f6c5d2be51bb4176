"""Hardware baselines: single-thread memcpy and a plain loopback TCP socket."""

from __future__ import annotations

import ctypes
import socket
import statistics
import subprocess
import sys
import time

import torch

from benchmarks.common import child_env, time_for


def memcpy(cfg: dict) -> dict:
    """One thread copying into a warm (already faulted) buffer: torch copy_ and glibc memcpy."""
    torch.set_num_threads(1)
    out = {}
    for size in cfg["sizes"]:
        src = torch.ones(size, dtype=torch.uint8)
        dst = torch.zeros(size, dtype=torch.uint8)
        med = statistics.median(time_for(lambda d=dst, s=src: d.copy_(s), cfg["xfer_time"], 5))
        glibc = statistics.median(
            time_for(
                lambda d=dst, s=src, n=size: ctypes.memmove(d.data_ptr(), s.data_ptr(), n),
                cfg["xfer_time"],
                5,
            )
        )
        # The faster of torch's copy_ and glibc memcpy (what the shm road uses).
        best = min(med, glibc)
        out[str(size)] = {
            "gbps": size / best / 1e9,
            "torch_copy_gbps": size / med / 1e9,
            "glibc_memcpy_gbps": size / glibc / 1e9,
        }
    return out


def _recv_exact(conn: socket.socket, view: memoryview, n: int) -> None:
    got = 0
    while got < n:
        k = conn.recv_into(view[got:n])
        if not k:
            raise ConnectionError("peer closed")
        got += k


def sock(cfg: dict) -> dict:
    """One message of each size to a process on 127.0.0.1, which acks with one byte.

    The receiver reads into one warm buffer (the best case for a socket).
    """
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]
    biggest = max(cfg["sizes"])
    peer = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.sys_baseline", str(port), str(biggest)], env=child_env()
    )
    try:
        srv.settimeout(60)
        conn, _ = srv.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        out = {}
        for size in cfg["sizes"]:
            payload = memoryview(bytearray(b"\1" * size))
            header = size.to_bytes(8, "little")

            def once(p=payload, h=header) -> None:
                conn.sendall(h)
                conn.sendall(p)
                if conn.recv(1) != b"k":
                    raise ConnectionError("no ack")

            med = statistics.median(time_for(once, cfg["xfer_time"], 5))
            out[str(size)] = {"gbps": size / med / 1e9, "median_us": med * 1e6}
        conn.sendall((0).to_bytes(8, "little"))
        conn.close()
        return out
    finally:
        srv.close()
        try:
            peer.wait(10)
        except subprocess.TimeoutExpired:
            peer.kill()


def run(suite: str, cfg: dict) -> dict:
    t0 = time.perf_counter()
    out = {"memcpy": memcpy(cfg), "socket": sock(cfg)}
    out["seconds"] = time.perf_counter() - t0
    return out


def _peer(port: int, biggest: int) -> None:
    conn = socket.create_connection(("127.0.0.1", port), timeout=60)
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buf = memoryview(bytearray(biggest))
    head = memoryview(bytearray(8))
    while True:
        _recv_exact(conn, head, 8)
        n = int.from_bytes(head, "little")
        if n == 0:
            break
        _recv_exact(conn, buf, n)
        conn.sendall(b"k")
    conn.close()


if __name__ == "__main__":
    _peer(int(sys.argv[1]), int(sys.argv[2]))
