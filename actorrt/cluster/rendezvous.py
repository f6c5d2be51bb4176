"""Rendezvous before ``init_rpc``: every process describes itself, rank 0 plans, all init.

Device maps are fixed at ``init_rpc`` and checked across the whole group, so placement
has to be decided first. The processes meet in a c10d ``TCPStore`` served by rank 0:

1. rank 0 serves the store (bound to the address given, loopback for a local cluster)
   and writes a random session id;
2. every other process claims its rank, and publishes its node description with a
   proof (HMAC of the session and rank under the cluster token) and its world size;
3. rank 0 accepts or rejects each claim (wrong token, wrong world size), and once all
   ranks are in, publishes the plan; or publishes ``abort`` with the reason;
4. every process calls ``init_rpc`` with its part of the plan, on the same store.

A process with a bad token is refused and the cluster goes on; ranks that never arrive
fail ``start`` after ``timeout`` seconds, named.
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import json
import secrets
import socket
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any
from urllib.parse import urlparse

import torch.distributed as dist

from actorrt.errors import ClusterError

__all__ = [
    "RankClaim",
    "StoreServer",
    "connect_store",
    "gather",
    "join",
    "parse_tcp_init_method",
    "publish_abort",
    "publish_plan",
    "store_init_method",
    "wait_plan",
]

_POLL_S = 0.02
_PREFIX = "actorrt/"


def parse_tcp_init_method(init_method: str) -> tuple[str, int]:
    """Splits ``tcp://HOST:PORT`` into host and port, with an error that shows the form."""
    url = urlparse(init_method)
    if url.scheme != "tcp" or not url.hostname or url.port is None:
        raise ValueError(
            f"init_method={init_method!r} must look like 'tcp://HOST:PORT' "
            "(e.g. tcp://10.0.0.1:29500), HOST being rank 0's address."
        )
    return url.hostname, url.port


class StoreServer:
    """The c10d store served by rank 0, listening on ``host`` only (not on every address)."""

    def __init__(self, host: str, port: int, timeout: float) -> None:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._sock = socket.socket(family, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self._sock.bind((host, port))
        except OSError as exc:
            self._sock.close()
            if exc.errno in (98, 48):  # EADDRINUSE on Linux, macOS
                raise ClusterError(
                    f"port {port} on {host} is already in use: pick another port in "
                    "init_method, or stop the process holding it (see `ss -ltnp`)."
                ) from exc
            raise ClusterError(
                f"cannot listen on {host}:{port} ({exc.strerror}); HOST in init_method must be "
                "an address of this machine (rank 0 serves the rendezvous)."
            ) from exc
        self._sock.listen(512)
        self.host = host
        self.port = self._sock.getsockname()[1]
        # TCPStore binds every interface when it opens its own socket; handing it ours
        # keeps a local cluster on loopback.
        self.store = dist.TCPStore(
            host,
            self.port,
            None,
            True,
            timeout=datetime.timedelta(seconds=timeout),
            wait_for_workers=False,
            master_listen_fd=self._sock.fileno(),
        )
        self.session = uuid.uuid4().hex
        self.store.set(_PREFIX + "session", self.session)

    def close(self) -> None:
        self.store = None  # type: ignore[assignment]
        self._sock.close()


def connect_store(host: str, port: int, timeout: float) -> dist.TCPStore:
    """Connects to rank 0's store, retrying until ``timeout`` (rank 0 may start later)."""
    try:
        return dist.TCPStore(host, port, None, False, timeout=datetime.timedelta(seconds=timeout))
    except Exception as exc:
        raise ClusterError(
            f"could not reach rank 0's rendezvous at {host}:{port} within {timeout:g} s "
            f"({str(exc).splitlines()[0]}). Check that the driver runs, that HOST:PORT in "
            "--init-method is its address, and that no firewall blocks the port."
        ) from exc


def _proof(token: str, session: str, rank: int) -> str:
    return hmac.new(token.encode(), f"{session}/{rank}".encode(), hashlib.sha256).hexdigest()


def new_token() -> str:
    """A random cluster token (local clusters make one per start)."""
    return secrets.token_hex(16)


class RankClaim:
    """A non-zero rank's claim to its place; says what rank 0 decided."""

    def __init__(
        self,
        store: dist.TCPStore,
        rank: int,
        world_size: int,
        token: str,
        description: dict[str, Any],
    ) -> None:
        self.store = store
        self.rank = rank
        session = store.get(_PREFIX + "session").decode()
        self.attempt = store.add(f"{_PREFIX}claims/{rank}", 1)
        payload = {
            "world_size": world_size,
            "proof": _proof(token, session, rank),
            "description": description,
        }
        store.set(f"{_PREFIX}node/{rank}/{self.attempt}", json.dumps(payload))

    def wait_verdict(self, timeout: float) -> None:
        """Returns once rank 0 accepted the claim; raises ``ClusterError`` otherwise."""
        verdict = _wait_key(self.store, f"{_PREFIX}verdict/{self.rank}/{self.attempt}", timeout)
        if verdict != "ok":
            raise ClusterError(f"rank {self.rank} was refused by the cluster: {verdict}")


def join(
    store: dist.TCPStore,
    rank: int,
    world_size: int,
    token: str,
    description: dict[str, Any],
    timeout: float,
) -> dict[str, Any]:
    """Claims ``rank``, waits to be accepted, then returns the published plan."""
    claim = RankClaim(store, rank, world_size, token, description)
    claim.wait_verdict(timeout)
    return wait_plan(store, timeout)


def gather(
    server: StoreServer,
    world_size: int,
    token: str,
    timeout: float,
    check_alive: Callable[[], None] | None = None,
) -> list[dict[str, Any]]:
    """On rank 0: collects the accepted descriptions of ranks 1..world_size-1.

    Args:
        server: The store rank 0 serves.
        world_size: Processes in all, rank 0 included.
        token: Claims whose proof does not match this token are refused.
        timeout: Seconds to wait for every rank.
        check_alive: Called while waiting; raises if a process we launched has died.

    Returns:
        The descriptions, index ``r - 1`` for rank ``r``.
    """
    store = server.store
    accepted: dict[int, dict[str, Any]] = {}
    seen = dict.fromkeys(range(1, world_size), 0)
    deadline = time.monotonic() + timeout
    while len(accepted) < world_size - 1:
        for rank in range(1, world_size):
            if rank in accepted:
                continue
            claims = store.add(f"{_PREFIX}claims/{rank}", 0)
            while seen[rank] < claims:
                key = f"{_PREFIX}node/{rank}/{seen[rank] + 1}"
                if not store.check([key]):
                    break  # claimed, not yet written: look again next round
                seen[rank] += 1
                verdict = _judge(json.loads(store.get(key)), rank, world_size, token, server)
                store.set(f"{_PREFIX}verdict/{rank}/{seen[rank]}", verdict)
                if verdict == "ok":
                    accepted[rank] = json.loads(store.get(key))["description"]
                    break
        if len(accepted) == world_size - 1:
            break
        if check_alive is not None:
            check_alive()
        if time.monotonic() > deadline:
            missing = [r for r in range(1, world_size) if r not in accepted]
            raise ClusterError(
                f"rank(s) {', '.join(map(str, missing))} of {world_size} never joined within "
                f"{timeout:g} s. Start them (actorrt worker --init-method tcp://{server.host}:"
                f"{server.port} --rank N --world-size {world_size}), or lower world_size; "
                "raise timeout= if they are slow to start."
            )
        time.sleep(_POLL_S)
    return [accepted[r] for r in range(1, world_size)]


def _judge(payload: dict, rank: int, world_size: int, token: str, server: StoreServer) -> str:
    if not hmac.compare_digest(payload.get("proof", ""), _proof(token, server.session, rank)):
        return (
            "wrong cluster token (or a process of another job): give this worker the token the "
            "driver uses (--token or ACTORRT_TOKEN)."
        )
    if payload.get("world_size") != world_size:
        return (
            f"world size {payload.get('world_size')} does not match the driver's {world_size}; "
            "start every process with the same --world-size."
        )
    return "ok"


def publish_plan(store: dist.TCPStore, plan: dict[str, Any]) -> None:
    store.set(_PREFIX + "plan", json.dumps(plan))


def publish_abort(store: dist.TCPStore, reason: str) -> None:
    store.set(_PREFIX + "abort", reason)


def wait_plan(store: dist.TCPStore, timeout: float) -> dict[str, Any]:
    return json.loads(_wait_key(store, _PREFIX + "plan", timeout))


def _wait_key(store: dist.TCPStore, key: str, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    abort = _PREFIX + "abort"
    while True:
        if store.check([abort]):
            raise ClusterError(f"the driver aborted the start: {store.get(abort).decode()}")
        if store.check([key]):
            return store.get(key).decode()
        if time.monotonic() > deadline:
            raise ClusterError(
                f"rank 0 did not answer within {timeout:g} s (waiting for {key!r}); is the "
                "driver still starting, or did it fail? See its output."
            )
        time.sleep(_POLL_S)


# -- init_rpc on our own store --------------------------------------------------------

_stores: dict[str, tuple[dist.Store, threading.Event]] = {}
_registered = False
_register_lock = threading.Lock()


def _handler(url: str, **kwargs: Any):
    parsed = urlparse(url)
    query = dict(p.split("=", 1) for p in parsed.query.split("&") if p)
    store, _ = _stores.pop(parsed.netloc)
    yield store, int(query["rank"]), int(query["world_size"])


def store_init_method(store: dist.Store) -> str:
    """An ``init_method`` URL that makes ``init_rpc`` use ``store`` (no second rendezvous)."""
    global _registered
    with _register_lock:
        if not _registered:
            dist.register_rendezvous_handler("actorrt", _handler)
            _registered = True
        key = uuid.uuid4().hex
        _stores[key] = (store, threading.Event())
    return f"actorrt://{key}"
