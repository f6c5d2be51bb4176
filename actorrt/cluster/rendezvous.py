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
fail ``start`` after ``timeout`` seconds, named. A claimant beats a counter while it
waits (``waiting/<k>``) and withdraws its claim when it gives up: rank 0 frees the rank of
one that left (withdrew, or went silent: killed) before the plan, so the same command
can take it again. Rank 0 logs each rank as it joins and
each refused claim with its reason (logger ``actorrt.rendezvous``).

Once the cluster runs, claims still come through the same queue (:func:`serve_late_claims`):
a worker that replaces a dead rank, or one that grows the cluster by a rank, is
answered by rank 0's ``decide`` with its own plan (``assigned/<k>``) and joins the running
RPC group; every other late claim hears why not.
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import json
import os
import secrets
import socket
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import torch.distributed as dist

from actorrt.errors import ClusterError
from actorrt.logs import get_logger
from actorrt.runtime import torch_threads

__all__ = [
    "GROW_RANK",
    "LateDecision",
    "RankClaim",
    "StoreServer",
    "connect_store",
    "gather",
    "join",
    "publish_abort",
    "publish_plan",
    "serve_late_claims",
    "wait_plan",
    "withdraw_plan",
]

#: The rank a claim names to grow a running cluster by one process (rank 0 picks its rank).
GROW_RANK = 0

#: Rank 0's answer to a claim made while the cluster runs, given the claim (its token
#: checked) and how long it has waited: a plan for the claimant (accepted), a reason
#: (refused), or None (not yet: asked again at the next round).
LateDecision = Callable[[dict[str, Any], float], "dict[str, Any] | str | None"]

_POLL_S = 0.02
_PREFIX = "actorrt/"
_WAITING_NOTE_S = 10.0  # how often rank 0 logs which ranks it still waits for
_BEAT_S = 0.5  # how often a claimant beats its counter while it waits
# An accepted claimant silent this long is taken to have left: another claim of its rank
# takes its place (at once), or rank 0 frees the rank (_GONE_S, checked every _LOOK_S;
# long, as a claimant starved of CPU by many processes may be silent a while). The plan
# waits for every claimant to have beaten within _HERE_S.
_TAKEOVER_S = 3.0
_GONE_S = 20.0
_HERE_S = 1.5
_LOOK_S = 1.0
_WITHDRAWN = -(1 << 40)  # added to a claimant's counter as it gives up
log = get_logger("rendezvous")


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
        try:
            self.store = dist.TCPStore(
                host,
                self.port,
                None,
                True,
                timeout=datetime.timedelta(seconds=timeout),
                wait_for_workers=False,
                master_listen_fd=self._sock.fileno(),
            )
        except BaseException:
            self._sock.close()
            raise
        # The store owns the listening socket now and closes it when it is destroyed
        # (closing it here too would close whatever fd later reused the number).
        self._sock.detach()
        self.session = uuid.uuid4().hex
        self.store.set(_PREFIX + "session", self.session)
        self.judge: Any = None  # the _Judge of gather(), kept to answer late claims

    def close(self) -> None:
        """Drops the store; its socket closes once RPC (if started) lets go of it too."""
        self.store = None  # type: ignore[assignment]
        self.judge = None


def connect_store(host: str, port: int, timeout: float) -> dist.TCPStore:
    """Connects to rank 0's store, retrying until ``timeout`` (rank 0 may start later).

    The retrying is ours, with a plain socket, until the port accepts a connection: torch's
    TCPStore client retries by itself too, but prints a C++ stack trace at every attempt,
    which reads like a crash while the driver is merely not up yet.
    """
    deadline = time.monotonic() + timeout
    _wait_listening(host, port, timeout, deadline)
    try:
        return dist.TCPStore(host, port, None, False, timeout=datetime.timedelta(seconds=timeout))
    except Exception as exc:
        raise _unreachable(host, port, timeout, str(exc).splitlines()[0]) from exc


def _unreachable(host: str, port: int, timeout: float, why: str) -> ClusterError:
    return ClusterError(
        f"could not reach rank 0's rendezvous at {host}:{port} within {timeout:g} s "
        f"({why}). Check that the driver runs, that HOST:PORT in --init-method is its "
        "address, and that no firewall blocks the port."
    )


def _wait_listening(host: str, port: int, timeout: float, deadline: float) -> None:
    """Returns once ``host:port`` accepts a connection; raises ``ClusterError`` at ``deadline``."""
    delay = 0.05
    told = False
    while True:
        left = deadline - time.monotonic()
        try:
            with socket.create_connection((host, port), timeout=max(0.05, min(2.0, left))):
                return
        except OSError as exc:
            why = exc.strerror or str(exc) or type(exc).__name__
        left = deadline - time.monotonic()
        if left <= 0:
            raise _unreachable(host, port, timeout, why)
        if not told:
            told = True
            log.info(
                "rank 0's rendezvous at %s:%d does not answer yet (%s); retrying for %.0f s",
                host, port, why, left,
            )  # fmt: skip
        time.sleep(min(delay, left))
        delay = min(delay * 2, 0.5)


def _proof(token: str, session: str, rank: int, index: int) -> str:
    # The claim's queue index is in it, so a proof read from the store proves no other claim.
    message = f"{session}/{rank}/{index}".encode()
    return hmac.new(token.encode(), message, hashlib.sha256).hexdigest()


def new_token() -> str:
    """A random cluster token (local clusters make one per start)."""
    return secrets.token_hex(16)


class RankClaim:
    """A non-zero rank's claim to its place; says what rank 0 decided.

    Claims go through one queue (``claims`` counter, ``claim/<k>``), whatever rank they
    name, so rank 0 answers every claimant, even one whose rank or world size is wrong.
    ``rank=GROW_RANK`` asks a running cluster for a new rank.
    """

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
        self.index = store.add(_PREFIX + "claims", 1)
        payload = {
            "rank": rank,
            "world_size": world_size,
            "proof": _proof(token, session, rank, self.index),
            "pid": os.getpid(),
            "description": description,
        }
        self.beat_key = _beat_key(self.index)
        self.refused = False  # rank 0 said no (nothing to withdraw)
        store.set(f"{_PREFIX}claim/{self.index}", json.dumps(payload))

    def withdraw(self) -> None:
        """Tells rank 0 this claimant gave up (its rank is free again); best effort."""
        try:
            self.store.add(self.beat_key, _WITHDRAWN)
        except Exception:  # the store is gone: nobody to tell
            pass

    def wait_verdict(self, timeout: float) -> dict[str, Any] | None:
        """Waits for rank 0's verdict; raises ``ClusterError`` if the claim was refused.

        Returns:
            The plan rank 0 assigned to a claim accepted by a running cluster; None for a
            claim of a starting one (its plan is published for all: :func:`wait_plan`).
        """
        who = _claimed(self.rank)
        verdict = _wait_key(
            self.store, f"{_PREFIX}verdict/{self.index}", timeout, beat=self.beat_key
        )
        if verdict != "ok":
            self.refused = True
            raise ClusterError(f"{who} was refused by the cluster: {verdict}")
        key = f"{_PREFIX}assigned/{self.index}"
        if not self.store.check([key]):
            return None
        assigned: dict[str, Any] = json.loads(self.store.get(key))
        self.store.delete_key(key)  # read once, and gone (the store is readable by anyone)
        return assigned


def join(
    store: dist.TCPStore,
    rank: int,
    world_size: int,
    token: str,
    description: dict[str, Any],
    timeout: float,
) -> dict[str, Any]:
    """Claims ``rank``, waits to be accepted, then returns the plan.

    A claim accepted by a running cluster gets a plan of its own, with ``"join"``:
    ``{"rank": r, "rpc_id": i}`` (the rank it takes, and its RPC id in the running group).
    """
    claim = RankClaim(store, rank, world_size, token, description)
    try:
        assigned = claim.wait_verdict(timeout)
        plan = assigned if assigned is not None else wait_plan(store, timeout, claim.beat_key)
    except BaseException:  # timed out, Ctrl-C: the rank is free for a new try
        if not claim.refused:
            claim.withdraw()
        raise
    store.delete_key(claim.beat_key)  # the store keeps no key of a cluster that formed
    return plan


def _claimed(rank: object) -> str:
    """What a claim of ``rank`` asks for, in words (``GROW_RANK``: no rank of its own)."""
    return "a new rank" if rank == GROW_RANK else f"rank {rank}"


def _beat_key(index: int) -> str:
    return f"{_PREFIX}waiting/{index}"


class _Judge:
    """Rank 0's side of the claim queue: reads new claims and answers each one."""

    def __init__(
        self, server: StoreServer, world_size: int, token: str, transport: str | None
    ) -> None:
        self.server = server
        self.world_size = world_size
        self.token = token
        self.transport = transport
        self.accepted: dict[int, dict[str, Any]] = {}
        self.pids: dict[int, int] = {}  # rank -> pid the accepted claimant reported
        self._who: dict[int, str] = {}
        # rank -> its accepted claim's index, and (its beat count, when that last changed)
        self._claim_of: dict[int, int] = {}
        self._heard: dict[int, tuple[int, float]] = {}
        self._read = 0  # claims read so far: claim/1 .. claim/_read
        self._pending: set[int] = set()  # counted but not yet written by the claimant
        self._undecided: dict[int, tuple[dict[str, Any], float]] = {}  # (claim, since)

    def poll(self, closed: str | None = None, late: LateDecision | None = None) -> None:
        """Judges every claim that arrived.

        Args:
            closed: Refuses every claim with this reason.
            late: The running cluster's decision on claims (see :data:`LateDecision`).
        """
        store = self.server.store
        count = store.add(_PREFIX + "claims", 0)
        self._pending.update(range(self._read + 1, count + 1))
        self._read = max(self._read, count)
        for index in sorted(self._pending):
            key = f"{_PREFIX}claim/{index}"
            if not store.check([key]):
                continue  # counted, not yet written: look again next round
            self._pending.discard(index)
            # Read once, and gone: the store is readable without the token, and a claim
            # holds a description and a proof (docs/fault-tolerance.md, security).
            self._undecided[index] = (json.loads(store.get(key)), time.monotonic())
            store.delete_key(key)
        for index, (payload, since) in sorted(self._undecided.items()):
            verdict = self._bad_token(payload, index) or closed
            if verdict is None and late is None:
                verdict = self._verdict(payload, since)
            elif verdict is None and late is not None:
                verdict = self._wrong_transport(payload) or self._ask(late, payload, since, index)
            if verdict is None:
                continue  # not decided yet: asked again next round
            del self._undecided[index]
            store.set(f"{_PREFIX}verdict/{index}", verdict)
            if verdict == "ok" and late is not None:
                log.info("accepted a claim from %s to join the running cluster", _whom(payload))
            elif verdict == "ok":
                rank = int(payload["rank"])
                self.accepted[rank] = payload["description"]
                self._who[rank] = _whom(payload)
                if isinstance(payload.get("pid"), int):
                    self.pids[rank] = payload["pid"]
                self._claim_of[rank] = index
                self._heard[rank] = (0, time.monotonic())
                log.info(
                    "rank %d joined from host %s (pid %s): %d of %d processes in",
                    rank, _host_of(payload), payload.get("pid", "?"),
                    len(self.accepted) + 1, self.world_size,
                )  # fmt: skip
            else:
                log.warning(
                    "refused a claim for %s from %s: %s",
                    _claimed(payload.get("rank", "?")), _whom(payload), verdict,
                )  # fmt: skip

    def _ask(
        self, late: LateDecision, payload: dict[str, Any], since: float, index: int
    ) -> str | None:
        """The running cluster's verdict on claim ``index`` (None: not yet)."""
        try:
            answer = late(payload, time.monotonic() - since)
        except Exception as exc:  # a bug or a bad description: say it, go on
            answer = f"rank 0 could not take it in ({type(exc).__name__}: {exc})"
        if isinstance(answer, dict):
            self.server.store.set(f"{_PREFIX}assigned/{index}", json.dumps(answer))
            return "ok"
        return answer

    def _bad_token(self, payload: dict[str, Any], index: int) -> str | None:
        rank = payload.get("rank")
        if isinstance(rank, int) and hmac.compare_digest(
            str(payload.get("proof", "")), _proof(self.token, self.server.session, rank, index)
        ):
            return None
        return (
            "wrong cluster token (or a process of another job): give this worker the "
            "token the driver uses (--token or ACTORRT_TOKEN)."
        )

    def silent_for(self, rank: int) -> float:
        """Seconds since rank ``rank``'s accepted claimant last beat (inf: it withdrew)."""
        count = int(self.server.store.add(_beat_key(self._claim_of[rank]), 0))
        if count < 0:
            return float("inf")
        now = time.monotonic()
        last, since = self._heard[rank]
        if count != last:
            self._heard[rank] = (count, now)
            return 0.0
        return now - since

    def let_go_of(self, rank: int, silent: float) -> None:
        """Frees rank ``rank``: its accepted claimant left before the cluster formed."""
        why = "gave up" if silent == float("inf") else f"was silent for {silent:.0f} s"
        log.warning(
            "rank %d (%s) %s before the cluster formed: its rank is free again; start it "
            "again with the same command", rank, self._who[rank], why,
        )  # fmt: skip
        self.server.store.delete_key(_beat_key(self._claim_of[rank]))
        for table in (self.accepted, self.pids, self._who, self._claim_of, self._heard):
            table.pop(rank, None)

    def settled(self, silence_counts: bool) -> bool:
        """Whether the accepted claimants can be planned.

        No claim waits to take an accepted rank's place, and (``silence_counts``) every one
        of them beat within ``_HERE_S``.
        """
        if any(payload.get("rank") in self.accepted for payload, _ in self._undecided.values()):
            return False
        return not silence_counts or all(self.silent_for(r) < _HERE_S for r in self.accepted)

    def let_go_of_the_gone(self) -> None:
        """Frees every rank whose accepted claimant withdrew, or was silent ``_GONE_S``."""
        for rank in list(self.accepted):
            silent = self.silent_for(rank)
            if silent > _GONE_S:
                self.let_go_of(rank, silent)

    def _verdict(self, payload: dict[str, Any], since: float) -> str | None:
        """Rank 0's answer to a claim made (at ``since``) while the cluster starts.

        None: not yet (its rank's claimant has neither beaten since, nor been silent
        ``_TAKEOVER_S``: the new one may be its restart).
        """
        rank = int(payload["rank"])
        if rank == GROW_RANK:
            return (
                "the cluster is still starting; --grow adds a process to a running cluster: "
                "start this worker with --rank and --world-size, or once the driver is up."
            )
        if payload.get("world_size") != self.world_size:
            return (
                f"world size {payload.get('world_size')} does not match the driver's "
                f"{self.world_size}; start every process with the same --world-size."
            )
        if not 0 < rank < self.world_size:
            return (
                f"rank {rank} is out of range: workers take ranks 1..{self.world_size - 1} "
                "(rank 0 is the driver)."
            )
        if rank in self.accepted:
            silent = self.silent_for(rank)
            if silent >= _TAKEOVER_S:
                self.let_go_of(rank, silent)  # it left (killed): this claim takes its place
            elif self._heard[rank][1] > since:
                return (
                    f"rank {rank} is already taken by {self._who[rank]}, which is waiting "
                    "for the cluster; give every worker its own --rank."
                )
            else:
                return None
        return self._wrong_transport(payload) or "ok"

    def _wrong_transport(self, payload: dict[str, Any]) -> str | None:
        wanted = payload.get("description", {}).get("transport")
        if wanted is not None and self.transport is not None and wanted != self.transport:
            return (
                f"this worker asks for --transport {wanted} but the driver uses "
                f"transport={self.transport!r}; start every process with the same transport "
                "(or leave --transport out on workers: they follow the driver)."
            )
        return None


def _host_of(payload: dict[str, Any]) -> str:
    description = payload.get("description")
    return str(description.get("hostname", "?")) if isinstance(description, dict) else "?"


def _whom(payload: dict[str, Any]) -> str:
    return f"pid {payload.get('pid', '?')} on {_host_of(payload)}"


def gather(
    server: StoreServer,
    world_size: int,
    token: str,
    timeout: float,
    check_alive: Callable[[], None] | None = None,
    transport: str | None = None,
) -> list[dict[str, Any]]:
    """On rank 0: collects the accepted descriptions of ranks 1..world_size-1.

    Args:
        server: The store rank 0 serves.
        world_size: Processes in all, rank 0 included.
        token: Claims whose proof does not match this token are refused.
        timeout: Seconds to wait for every rank.
        check_alive: Called while waiting; raises if a process we launched has died. Without
            it (workers started by others), a claimant that went silent (killed) is not
            planned, and one silent for ``_GONE_S`` loses its rank.
        transport: The driver's transport; a worker asking for another is refused.

    Returns:
        The descriptions, index ``r - 1`` for rank ``r``.
    """
    judge = _Judge(server, world_size, token, transport)
    server.judge = judge
    start = time.monotonic()
    deadline = start + timeout
    log.info(
        "waiting for %d worker rank(s) at tcp://%s:%d (timeout %g s)",
        world_size - 1, server.host, server.port, timeout,
    )  # fmt: skip
    next_note = start + _WAITING_NOTE_S
    next_look = start + _LOOK_S
    remote = check_alive is None  # else a launched process's death is seen by check_alive
    while True:
        judge.poll()
        if len(judge.accepted) == world_size - 1 and judge.settled(silence_counts=remote):
            break
        if remote and time.monotonic() >= next_look:
            judge.let_go_of_the_gone()
            next_look = time.monotonic() + _LOOK_S
        if check_alive is not None:
            check_alive()
        now = time.monotonic()
        if now >= next_note:
            next_note = now + _WAITING_NOTE_S
            missing = [r for r in range(1, world_size) if r not in judge.accepted]
            log.info(
                "still waiting for rank(s) %s after %.0f s",
                ", ".join(map(str, missing)), now - start,
            )  # fmt: skip
        if now > deadline:
            missing = [r for r in range(1, world_size) if r not in judge.accepted]
            if not missing:  # all in, and some went silent (or a claim would replace one)
                silent = [r for r in sorted(judge.accepted) if judge.silent_for(r) >= _HERE_S]
                raise ClusterError(
                    f"rank(s) {', '.join(map(str, silent)) or '?'} of {world_size} stopped "
                    f"answering before the cluster formed (within {timeout:g} s); start them "
                    "again with the same command (their ranks are taken back), or raise "
                    "timeout=."
                )
            raise ClusterError(
                f"rank(s) {', '.join(map(str, missing))} of {world_size} never joined within "
                f"{timeout:g} s. Start them (actorrt worker --init-method tcp://{server.host}:"
                f"{server.port} --rank N --world-size {world_size}), or lower world_size; "
                "raise timeout= if they are slow to start."
            )
        time.sleep(_POLL_S)
    return [judge.accepted[r] for r in range(1, world_size)]


def serve_late_claims(
    server: StoreServer,
    stop: threading.Event,
    decide: LateDecision,
    period: float = 0.25,
) -> None:
    """On rank 0 after the start: answers claims made while the cluster runs, until ``stop``.

    A claim with the right token gets ``decide``'s answer (a replacement of a dead rank or
    a new rank: accepted with a plan; anything else: refused, with the reason). Without
    this a worker started twice, or one of another job pointed at this address, would
    wait for a verdict until its timeout instead of hearing why it cannot join.
    """
    judge = getattr(server, "judge", None)
    if judge is None:
        return

    def loop() -> None:
        while not stop.wait(period):
            try:
                judge.poll(late=decide)
            except Exception:  # the store is closing with the cluster
                return
        try:  # one last round: who claimed since the last one hears why, not silence
            judge.poll(closed="the cluster is shutting down; start a new cluster to join one.")
        except Exception:
            pass

    torch_threads.start(loop, name="actorrt-late-claims")  # store reads: see torch_threads


def alive_key(name: str) -> str:
    """The store counter process ``name`` adds to at every heartbeat (its liveness)."""
    return f"{_PREFIX}alive/{name}"


def publish_plan(store: dist.TCPStore, plan: dict[str, Any]) -> None:
    """On rank 0: publishes the plan (its JSON form) that every waiting worker reads."""
    store.set(_PREFIX + "plan", json.dumps(plan))


def withdraw_plan(store: dist.TCPStore) -> None:
    """On rank 0, once every rank runs RPC (so has read it): the plan leaves the store."""
    store.delete_key(_PREFIX + "plan")


def publish_abort(store: dist.TCPStore, reason: str) -> None:
    """On rank 0: tells every waiting worker that the start failed, and why."""
    store.set(_PREFIX + "abort", reason)


def wait_plan(store: dist.TCPStore, timeout: float, beat: str | None = None) -> dict[str, Any]:
    """On a worker: the plan rank 0 published, within ``timeout`` s.

    Args:
        store: Rank 0's store.
        timeout: Seconds to wait.
        beat: The claim's counter, beaten while waiting (rank 0 reads it: still here).

    Raises:
        ClusterError: Rank 0 aborted the start, went away, or did not answer in time.
    """
    plan: dict[str, Any] = json.loads(_wait_key(store, _PREFIX + "plan", timeout, beat))
    return plan


def _wait_key(store: dist.TCPStore, key: str, timeout: float, beat: str | None = None) -> str:
    deadline = time.monotonic() + timeout
    abort = _PREFIX + "abort"
    next_beat = 0.0
    while True:
        try:
            if beat is not None and time.monotonic() >= next_beat:
                store.add(beat, 1)
                next_beat = time.monotonic() + _BEAT_S
            if store.check([abort]):
                raise ClusterError(f"the driver aborted the start: {store.get(abort).decode()}")
            if store.check([key]):
                return store.get(key).decode()
        except ClusterError:
            raise
        except Exception as exc:
            raise ClusterError(
                "lost the connection to rank 0's rendezvous store (did the driver exit? see "
                f"its output): {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
            ) from exc
        if time.monotonic() > deadline:
            raise ClusterError(
                f"rank 0 did not answer within {timeout:g} s (waiting for {key!r}); is the "
                "driver still starting, or did it fail? See its output."
            )
        time.sleep(_POLL_S)
