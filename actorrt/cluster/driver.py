"""Rank 0's launch: the rendezvous store, the local cluster, the plan, and the steps of shutdown.

:func:`actorrt.start` validates its arguments and hands them to :meth:`Driver.launch`,
which serves the rendezvous, starts the local workers (if any), gathers every process's
description, makes the plan (before ``init_rpc``: see DESIGN.md), publishes it, and
joins the RPC group (:func:`actorrt.cluster.join.join`) like every worker. The
:class:`Driver` then owns what only rank 0 holds (the store, the local cluster) and stops
them when the runtime shuts down.

The driver logs under ``actorrt.driver`` (start-up, workers that die, the steps of
shutdown).
"""

from __future__ import annotations

import os
import threading
import time
import warnings
from collections.abc import Callable
from typing import Any

import torch.distributed.rpc as rpc

from actorrt.cluster import process_setup, rendezvous
from actorrt.cluster.join import join
from actorrt.cluster.launch_env import heartbeat_interval, set_fork_safety
from actorrt.cluster.local import LocalCluster, exit_text
from actorrt.errors import ActorRtError, ClusterError
from actorrt.logs import get_logger
from actorrt.placement.discovery import cuda_device_count
from actorrt.placement.layout import Layout
from actorrt.placement.node import ProcessInfo
from actorrt.placement.plan import Plan
from actorrt.runtime import group, torch_threads
from actorrt.runtime import trace as _trace
from actorrt.runtime.directory import ClusterDirectory
from actorrt.runtime.host import rpc_ping
from actorrt.runtime.output import rpc_flush_output
from actorrt.runtime.runtime import Runtime, rpc_stop

__all__ = ["Driver"]

log = get_logger("driver")

#: How many times a local worker process that died is replaced, per rank, by default.
DEFAULT_MAX_WORKER_RESTARTS = 10

#: A local worker that dies within this many seconds of its start died young: the next
#: replacement of its rank waits (see replacement_delay).
YOUNG_S = 60.0

#: The longest a replacement of a worker that keeps dying young waits.
BACKOFF_MAX_S = 10.0

#: How long an actor restart waits for a replacement to join when no live process can
#: host the actor.
REPLACEMENT_WAIT_S = 30.0

_started_before = False  # torch's RRef context stays bound to this process's first agent

_RESTART_WARNING = (
    "actorrt was already started once in this process. torch binds its RRef context to "
    "the first RPC agent of a process, so in this cluster the driver holds no RRefs: the "
    "unnamed actors it creates, and those whose handles reach it, live until they are "
    "killed or the cluster shuts down. Start each cluster in a fresh process for the full "
    "semantics (e.g. one script run per cluster)."
)


class Driver:
    """What rank 0 holds besides its runtime, and how it is let go.

    Made by :meth:`launch`; its :meth:`stop` is the runtime's ``on_shutdown``.

    Args:
        server: The rendezvous store's server.
        cluster: The local cluster's workers, or None for a multi-node cluster.
        shutdown_timeout: Bound on :meth:`stop`.
        heartbeat_timeout: A worker that answers no ping for this long is marked dead
            (a local one is also killed: it is hung).
        log_to_driver: Whether workers send their output here (flushed at shutdown).
        max_worker_restarts: How many times a local worker process that died is
            replaced, per rank.
        join_timeout: How long a process given a rank in the running cluster has to
            join; after that, another claim for that rank may take it.
    """

    def __init__(
        self,
        server: rendezvous.StoreServer,
        cluster: LocalCluster | None,
        *,
        shutdown_timeout: float,
        log_to_driver: bool,
        heartbeat_timeout: float = 10.0,
        max_worker_restarts: int = 0,
        published: dict[str, Any] | None = None,
        join_timeout: float = 120.0,
    ) -> None:
        self.server = server
        self.cluster = cluster
        self.shutdown_timeout = shutdown_timeout
        self.heartbeat_timeout = heartbeat_timeout
        self.log_to_driver = log_to_driver
        self.max_worker_restarts = max_worker_restarts
        self.published = published or {}
        self.workers: list[str] = []  # RPC names of ranks 1.., once RPC is up
        self.rt: Runtime | None = None
        self._last_heard: dict[str, float] = {}  # worker -> when it last answered a ping
        # worker -> when the newest ping it answered was sent: an answer to a ping sent
        # after a claim for its rank arrived proves the rank runs (see _late_claim)
        self._alive_at: dict[str, float] = {}
        self._restarts: dict[int, int] = {}  # rank -> replacements so far
        self.join_timeout = join_timeout
        # name -> (when, with which RPC id) it was given to a process that has not joined
        # yet (a replacement forked, a late claim granted)
        self._joining: dict[str, tuple[float, int]] = {}
        self._next_rpc_id = 0  # set at launch: the first id after the plan's ranks
        # Processes growing the cluster, accepted, not yet admitted: name -> (a plan with
        # it, its rank, what it was planned from).
        self._growing: dict[str, tuple[Plan, int, ProcessInfo]] = {}
        self._descriptions: list[dict[str, Any]] = []  # by rank, growers accepted included
        self._world_size = 0  # set at launch: the ranks the cluster started with
        self._claimed_by: dict[str, int] = {}  # name -> pid of the late worker taking it
        self._probing: set[str] = set()  # suspect workers being probed (multi-node)
        self._probe_lock = threading.Lock()
        # Local replacements: when each rank's process started (for the backoff), how
        # many of its processes in a row died young, and the ranks being replaced.
        self._born: dict[int, float] = {}
        self._young_deaths: dict[int, int] = {}
        self._replacing: set[int] = set()
        self._exit_seen: set[int] = set()  # ranks whose process's exit was handled
        self._admitted = threading.Condition()
        self._admissions = 0
        self._rank_joining: int | None = None  # the local replacement joining now
        self._admitting: set[int] = set()  # local ranks in :meth:`_admit` now

    @classmethod
    def launch(
        cls,
        *,
        host: str,
        port: int,
        world_size: int,
        token: str | None,
        layout: Layout,
        local_workers: int,
        transport: str,
        cuda_device_map: str | None,
        gpus: tuple[int, ...] | None,
        timeout: float,
        shutdown_timeout: float,
        rpc_timeout: float,
        num_worker_threads: int,
        log_level: str,
        log_to_driver: bool,
        heartbeat_timeout: float = 10.0,
        max_worker_restarts: int = DEFAULT_MAX_WORKER_RESTARTS,
        trace: bool = False,
    ) -> Runtime:
        """Forms the cluster with this process as rank 0; returns its installed runtime.

        The arguments are :func:`actorrt.start`'s, validated; ``local_workers > 0`` starts
        a local cluster on loopback (with a token of its own), 0 waits for
        ``world_size - 1`` workers of a multi-node cluster.

        Raises:
            ClusterError: The cluster could not be formed.
            PlacementError: The layout is infeasible (before any local worker starts).
        """
        if _started_before:
            warnings.warn(_RESTART_WARNING, RuntimeWarning, stacklevel=3)
        set_fork_safety(os.environ)
        local = local_workers > 0
        socket_ifname = "lo" if local else None
        own = process_setup.describe_process((), gpus, cuda_device_map, hosts_actors=False)
        per_worker: list[tuple[int, ...]] = []
        if local:
            per_worker = _local_gpus(own, layout, local_workers, gpus, transport)
        started = time.monotonic()
        server = rendezvous.StoreServer(host, port, timeout)
        log.info(
            "starting %s: rendezvous on %s:%d, %d process(es) in all",
            "a local cluster" if local else "a multi-node cluster", host, server.port, world_size,
        )  # fmt: skip
        cluster: LocalCluster | None = None
        if local:
            token = rendezvous.new_token()
            cluster = LocalCluster(
                local_workers,
                server.port,
                token,
                gpus_per_worker=per_worker,
                labels_per_worker=[() for _ in range(local_workers)],
                timeout=timeout,
                rpc_timeout=rpc_timeout,
                num_worker_threads=num_worker_threads,
                log_level=log_level,
            )
        assert token is not None

        def abandon() -> None:
            if cluster is not None:
                cluster.stop(timeout=2.0)
            server.close()

        try:
            others = rendezvous.gather(
                server,
                world_size,
                token,
                timeout,
                cluster.check_alive if cluster else None,
                transport=transport,
            )
            descriptions = [own, *others]
            # Multi-node: every process keeps its own TP_SOCKET_IFNAME (interface names
            # differ between machines), so the plan sets none.
            spec = process_setup.cluster_spec(
                descriptions,
                layout,
                transport=transport,
                socket_ifname=socket_ifname,
                session=server.session,
            )
            the_plan = spec.plan()
        except BaseException as exc:
            if isinstance(exc, ActorRtError):
                reason = str(exc)
            elif isinstance(exc, KeyboardInterrupt):
                reason = "the driver was interrupted (Ctrl-C)"
            else:
                reason = f"{type(exc).__name__}: {exc}"
            log.info("start failed, telling the workers: %s", reason)
            try:
                rendezvous.publish_abort(server.store, reason)
                if not local:
                    time.sleep(0.3)  # let waiting workers read why before the store closes
            finally:
                abandon()
            raise
        published = the_plan.to_dict()
        published["log_to_driver"] = log_to_driver  # workers send their output here, or not
        published["heartbeat_timeout"] = heartbeat_timeout  # workers exit when pings stop
        # A driver on its second agent cannot receive RRefs (group.rrefs_work): workers
        # then send it handles without theirs (Runtime.driver_holds_no_rrefs).
        published["driver_holds_rrefs"] = group.rrefs_will_work()
        # Every process records a timeline, or none does (replacements read this too).
        published["trace"] = trace
        _trace.enable(trace)
        rendezvous.publish_plan(server.store, published)
        driver = cls(
            server,
            cluster,
            shutdown_timeout=shutdown_timeout,
            log_to_driver=log_to_driver,
            heartbeat_timeout=heartbeat_timeout,
            max_worker_restarts=max_worker_restarts if local else 0,
            published=published,
            join_timeout=timeout,  # what a starting process is given to join, too
        )
        driver._next_rpc_id = driver._world_size = world_size
        driver._descriptions = list(descriptions)

        def before_rpc(rt: Runtime) -> None:
            rt.spec = spec
            rt.descriptions = descriptions
            judge = getattr(server, "judge", None)
            rt.pids = {0: os.getpid(), **(judge.pids if judge is not None else {})}
            log.info("every rank joined; plan made; starting RPC as %s", rt.name)

        try:
            rt = join(
                published,
                0,
                server.store,
                rendezvous_address=(host, server.port),
                own_address=True,
                num_worker_threads=num_worker_threads,
                rpc_timeout=rpc_timeout,
                timeout=timeout,
                directory=ClusterDirectory(the_plan, spec.processes),
                on_shutdown=driver.stop,
                before_rpc=before_rpc,
            )
        except BaseException as exc:
            abandon()
            raise ClusterError(f"RPC failed to start on the driver: {exc}") from exc
        _mark_started()
        rendezvous.withdraw_plan(server.store)  # every rank read it before it started RPC
        driver.rt = rt
        group.set_admitter(driver._admit)
        driver.workers = [p.name for p in the_plan.processes if p.rank != 0]
        rendezvous.serve_late_claims(server, rt.stopped, driver._late_claim)
        if cluster is not None:
            rt.local_worker_pids = cluster.pids
            driver._born = dict.fromkeys(range(1, world_size), time.monotonic())
            if rt.directory is not None:
                rt.directory.await_capacity = driver._await_replacement
            driver._watch_local_workers(rt, cluster)
        else:
            rt.probe = lambda worker: driver._probe(rt, worker)
        driver._start_heartbeat(rt)
        log.info(
            "cluster up in %.2f s: %d process(es) on %d host(s)",
            time.monotonic() - started, world_size,
            len({d.get("hostname") for d in descriptions}),
        )  # fmt: skip
        return rt

    def _watch_local_workers(self, rt: Runtime, cluster: LocalCluster) -> None:
        """Marks a local worker dead as soon as the zygote reports its exit."""

        def exited(rank: int) -> None:
            if rt.stopped.is_set():
                return  # exits during shutdown are the expected ones
            name = process_setup.process_name(rank)
            replace = self._restarts.get(rank, 0) < self.max_worker_restarts
            with self._admitted:
                self._exit_seen.add(rank)
                if replace:  # before it is marked: its actors' restarts may wait for it
                    self._replacing.add(rank)
                else:  # none is coming (one that died while admitted left it in)
                    self._replacing.discard(rank)
                # It died joining: the next one may join, but not while rank 0 still
                # admits this one (_admit marks it dead again at its end, then lets go).
                if self._rank_joining == rank and rank not in self._admitting:
                    self._rank_joining = None
                    self._admitted.notify_all()
            rt.mark_worker_dead(name)
            pid, code = cluster.exit_of(rank)
            cause = exit_text(code)
            log.warning(
                "%s (rank %d, pid %s) died: %s; calls to its actors fail with "
                "ActorDiedError and no new actor is placed there",
                name, rank, pid, cause,
            )  # fmt: skip
            if replace:
                threading.Thread(
                    target=self._replace, args=(rt, cluster, rank, cause),
                    name="actorrt-replace", daemon=True,
                ).start()  # fmt: skip
            elif self.max_worker_restarts:
                log.warning(
                    "%s is not replaced: its max_worker_restarts=%d replacements are used up",
                    name, self.max_worker_restarts,
                )  # fmt: skip

        def confirm_dead(worker: str) -> bool:
            # A call failed because its connection closed: the process is exiting or gone.
            # The kernel closes its sockets a moment before it turns into a zombie, so
            # look a few times before believing it is alive.
            rank = _rank_of(rt, worker)
            if rank is None:
                return False
            for _ in range(10):
                if cluster.is_gone(rank):
                    return True
                time.sleep(0.02)
            return False

        cluster.on_exit = exited
        rt.confirm_dead = confirm_dead
        for rank in cluster.dead_ranks():  # exits reported before the callback was set
            exited(rank)

    def _replace(self, rt: Runtime, cluster: LocalCluster, rank: int, cause: str) -> None:
        """Forks a new worker for the dead ``rank``; it joins the running RPC group.

        It takes the dead one's name and plan slot and a fresh RPC id (TensorPipe keeps a
        broken connection per id); :meth:`_admit` lets it in. A rank whose processes keep
        dying young waits first (:func:`replacement_delay`), so a crash loop cannot spin.
        """
        name = process_setup.process_name(rank)
        self._restarts[rank] = self._restarts.get(rank, 0) + 1
        lived = time.monotonic() - self._born.get(rank, 0.0)
        young = self._young_deaths.get(rank, 0) + 1 if lived < YOUNG_S else 0
        self._young_deaths[rank] = young
        delay = replacement_delay(young)
        log.warning(
            "replacing %s (rank %d; it died: %s, after %.1f s) with a new process%s (%d of "
            "max_worker_restarts=%d)",
            name, rank, cause, lived, f" in {delay:g} s" if delay else "",
            self._restarts[rank], self.max_worker_restarts,
        )  # fmt: skip
        try:
            if rt.stopped.wait(delay):
                raise ClusterError("the cluster is shutting down")
            # One replacement joins at a time: several at once (every worker died) took
            # torch's group membership token in turns and one timed out waiting for it
            # ("Group membership token ... timed out"), leaving its rank dead.
            with self._admitted:
                self._admitted.wait_for(
                    lambda: self._rank_joining is None or rt.stopped.is_set(),
                    timeout=self.join_timeout,
                )
                self._rank_joining = rank
            if rt.stopped.is_set():
                raise ClusterError("the cluster is shutting down")
            rpc_id, self._next_rpc_id = self._next_rpc_id, self._next_rpc_id + 1
            freed = group.free_token_of_dead_joiner(self.server.store, self._joiner_gone)
            if freed is not None:
                log.warning("%s died while joining, holding torch's membership token: "
                            "released", freed)  # fmt: skip
            group.evict(self.server.store, name)
            self._joining[name] = (time.monotonic(), rpc_id)
            self._born[rank] = time.monotonic()
            cluster.respawn(rank, plan=self.published, rpc_id=rpc_id)
            with self._admitted:
                self._exit_seen.discard(rank)  # a new process: its exit is to come
        except Exception as exc:  # stopping, or the store is gone: it stays dead
            if not rt.stopped.is_set():
                log.warning("could not replace %s: %s", name, exc)
            with self._admitted:
                self._replacing.discard(rank)
                if self._rank_joining == rank:
                    self._rank_joining = None
                self._admitted.notify_all()

    def _joiner_gone(self, name: str) -> bool:
        """Whether the local process last started as ``name`` has died."""
        rank = _rank_of(self.rt, name) if self.rt is not None else None
        return rank is not None and self.cluster is not None and self.cluster.is_gone(rank)

    def _await_replacement(self) -> bool:
        """Waits (bounded) for a local replacement to join; False if none is coming.

        An actor restart, or a new actor, that finds no live process able to host it
        waits here, so a restartable actor comes back once the replacement of its process
        is in, and ``A.remote()`` made while the only worker is replaced goes there.
        """
        with self._admitted:
            if not self._replacement_coming():
                return False
            seen = self._admissions
            return (
                self._admitted.wait_for(
                    lambda: self._admissions != seen or not self._replacement_coming(),
                    timeout=REPLACEMENT_WAIT_S,
                )
                and self._admissions != seen
            )

    def _replacement_coming(self) -> bool:
        """Under ``_admitted``: whether a local replacement is on its way, or soon will be.

        A death can be known before the zygote reports the exit that starts its
        replacement: a call found the connection closed and the process gone
        (``confirm_dead``), and the actor's restart came first. Such a rank, with
        replacements left, counts as coming too.
        """
        if self._replacing:
            return True
        cluster = self.cluster
        if cluster is None or (self.rt is not None and self.rt.stopped.is_set()):
            return False
        return any(
            rank not in self._exit_seen
            and self._restarts.get(rank, 0) < self.max_worker_restarts
            and cluster.is_gone(rank)
            for rank in self._born
        )

    def _late_claim(self, claim: dict[str, Any], waited: float) -> dict[str, Any] | str | None:
        """Rank 0's answer to a worker claiming a place in the running cluster.

        A multi-node cluster takes a worker that replaces a dead rank (same ``--rank`` and
        ``--world-size``), and one that grows it by a rank (``--grow``). A claim for a rank
        whose process answers a ping sent after the claim arrived is refused at once; one
        for a rank that answers nothing waits up to two heartbeat timeouts for it to be
        marked dead (its process may be dying). Any other claim is refused, the reason
        naming the fix.

        Returns:
            The plan for the claimant (its rank and RPC id under ``"join"``), the reason
            it is refused, or None: not yet.
        """
        rt = self.rt
        if rt is None or rt.plan is None or rt.stopped.is_set():
            return "the cluster is shutting down; start a new cluster to join one."
        if self.cluster is not None:
            return (
                "this is a local cluster: its driver replaces its own workers "
                "(actorrt.start(max_worker_restarts=N)); workers join only a multi-node one."
            )
        rank = int(claim["rank"])
        if rank == rendezvous.GROW_RANK:
            answer = self._grow(rt, rt.plan, claim["description"])
            if isinstance(answer, dict):
                self._note_pid(process_setup.process_name(answer["join"]["rank"]), claim)
            return answer
        world = self._world_size
        if claim.get("world_size") != world or not 0 < rank < world:
            return (
                f"rank {rank} of world size {claim.get('world_size')} is not a rank of this "
                f"cluster (ranks 1..{world - 1} of world size {world}); to add a process to "
                "the running cluster, start it with --grow instead of --rank/--world-size."
            )
        name = process_setup.process_name(rank)
        if name not in rt.dead_workers:
            # A process that answered a ping sent after the claim arrived runs: refused
            # now (within a ping or two), not after two heartbeat timeouts, which may be
            # longer than the claimant waits (it then read "no answer", not the fix).
            # One that answers nothing may be dying: the heartbeat will tell.
            answered = self._alive_at.get(name, -1.0) > time.monotonic() - waited
            if not answered and waited < 2 * self.heartbeat_timeout:
                return None
            return (
                f"rank {rank} ({name}) is running; a worker started with --rank replaces a "
                "dead one only. To add a process, start it with --grow."
            )
        slot = rt.plan.for_rank(rank)
        offered = {g.get("index") for g in claim.get("description", {}).get("gpus", ())}
        if not set(slot.gpus) <= offered:
            return (
                f"rank {rank}'s plan uses GPU(s) {list(slot.gpus)} and this worker offers "
                f"{sorted(i for i in offered if i is not None)}; start it where those GPUs are "
                "(or with --gpus naming them), or add it with --grow."
            )
        given = self._joining.get(name)
        if given is not None:
            since = time.monotonic() - given[0]
            if since < self.join_timeout:
                return (
                    f"another worker is already replacing rank {rank}; wait for it (it has "
                    f"{self.join_timeout:g} s to join), or stop it."
                )
            log.warning(
                "rank %d (%s) was given to a worker %.0f s ago that never joined; a new "
                "claim takes it", rank, name, since,
            )  # fmt: skip
        rpc_id, self._next_rpc_id = self._next_rpc_id, self._next_rpc_id + 1
        group.evict(self.server.store, name)
        self._joining[name] = (time.monotonic(), rpc_id)
        self._note_pid(name, claim)
        log.warning("rank %d (%s) is coming back as RPC id %d", rank, name, rpc_id)
        return {**self.published, "join": {"rank": rank, "rpc_id": rpc_id}}

    def _note_pid(self, name: str, claim: dict[str, Any]) -> None:
        pid = claim.get("pid")
        if isinstance(pid, int):
            self._claimed_by[name] = pid

    def _grow(self, rt: Runtime, plan: Plan, description: dict[str, Any]) -> dict[str, Any] | str:
        """A new rank for a process growing the cluster, and the plan it joins with.

        The rank is the next one, or one given to a grower that did not join within
        :attr:`join_timeout` (which then cannot join: its RPC id is not the one given).
        """
        stale, rpc_id = self._stale_growth(), self._next_rpc_id
        descriptions = [*self._descriptions]
        if stale is None:
            rank = len(descriptions)
            descriptions.append(description)
        else:
            rank = stale
            descriptions[rank] = description
        try:
            # Only the new process is taken from this plan (Plan.grown): planned on CPU,
            # since the running agents' device maps cannot change.
            spec = process_setup.cluster_spec(
                descriptions, Layout(), transport="cpu", session=self.server.session
            )
            bigger = spec.plan()
            grown = plan.grown(bigger, rank)
        except ActorRtError as exc:
            return f"rank 0 cannot plan it in: {exc}"
        self._descriptions = descriptions
        self._next_rpc_id = rpc_id + 1
        name = process_setup.process_name(rank)
        self._growing[name] = (bigger, rank, spec.processes[rank])
        self._joining[name] = (time.monotonic(), rpc_id)
        if stale is not None:
            log.warning("rank %d was given to a growing process that never joined", rank)
        log.warning("a new process joins the cluster as rank %d (%s)", rank, name)
        published = {**self.published, **grown.to_dict()}
        return {**published, "join": {"rank": rank, "rpc_id": rpc_id}}

    def _stale_growth(self) -> int | None:
        """The lowest rank given to a growing process that has not joined in time, if any."""
        now = time.monotonic()
        stale = [
            rank
            for name, (_, rank, _) in self._growing.items()
            if now - self._joining.get(name, (now, 0))[0] >= self.join_timeout
        ]
        return min(stale, default=None)

    def _admit(self, name: str, rpc_id: int) -> None:
        """Rank 0's side of a process joining the running group as ``name``.

        It replaces the dead process of that name, or grows the cluster (:meth:`_grow`).
        """
        rt = self.rt
        if rt is None or rt.stopped.is_set():
            raise ClusterError("the cluster is shutting down")
        given = self._joining.get(name)
        if given is not None and given[1] != rpc_id:
            raise ClusterError(
                f"{name} was given to another worker (RPC id {given[1]}) after this one "
                f"(RPC id {rpc_id}) did not join within {self.join_timeout:g} s"
            )
        self._last_heard[name] = time.monotonic()  # the heartbeat starts afresh
        growing = self._growing.pop(name, None)
        grown: tuple[Plan, ProcessInfo] | None = None
        if growing is not None and rt.plan is not None:
            bigger, new_rank, info = growing
            rt.plan = rt.plan.grown(bigger, new_rank)
            rt.descriptions = [*rt.descriptions, self._descriptions[new_rank]]
            grown = (rt.plan, info)
        rank = _rank_of(rt, name)
        pid = self._claimed_by.pop(name, None)
        if rank is not None and pid is not None:
            rt.pids[rank] = pid
        # A local replacement: its exit, if it dies now, is seen (see _died_joining)
        local = rank if self.cluster is not None and growing is None else None
        if local is not None:
            with self._admitted:
                self._admitting.add(local)
        try:
            rt.admit(name, rpc_id, replaces=growing is None)
        finally:
            died = local is not None and self._died_joining(rt, name, local)
        if growing is not None:
            # Placeable (and listed by nodes()) only now that every live process, this
            # one included, knows its RPC id: an actor placed on it earlier could not be
            # created ("could not find destination url").
            if grown is not None and rt.directory is not None:
                rt.directory.grow(*grown)
            self.workers.append(name)  # heartbeats and shutdown reach it from now on
        self._joining.pop(name, None)
        if self.cluster is not None:
            rt.local_worker_pids = self.cluster.pids
        with self._admitted:
            if rank is not None:
                if rank not in self._exit_seen:  # else its exit decided what comes next
                    self._replacing.discard(rank)
                if self._rank_joining == rank:
                    self._rank_joining = None  # the next replacement may join
            self._admissions += 0 if died else 1
            self._admitted.notify_all()
        if died:
            return
        if growing is None:
            log.warning("%s is back (RPC id %d): actors may be placed on it again", name, rpc_id)
        else:
            log.warning("%s joined the running cluster (RPC id %d)", name, rpc_id)

    def _died_joining(self, rt: Runtime, name: str, rank: int) -> bool:
        """Whether the local process admitted as ``name`` died during its admission.

        If so, it is marked dead again (after :meth:`Runtime.admit`). Its exit came while
        ``name`` was still dead, so the exit's own marking found nothing to do, and the
        admission then took it for alive: calls and new actors would have gone to a dead
        process until the heartbeat noticed. An exit reported after this is handled as
        any other (the name is alive again by then).
        """
        with self._admitted:
            self._admitting.discard(rank)
            died = rank in self._exit_seen  # reported while admitted
        cluster = self.cluster
        if not died and (cluster is None or not cluster.is_gone(rank)):
            return False
        log.warning("%s (rank %d) died while rank 0 admitted it", name, rank)
        rt.mark_worker_dead(name, "it died while it joined the cluster")
        return True

    def _start_heartbeat(self, rt: Runtime) -> None:
        """Watches every worker; one silent for ``heartbeat_timeout`` is marked dead.

        Two signs of life count: an answered RPC ping, and the worker's store counter
        (:func:`~actorrt.cluster.rendezvous.alive_key`) having moved. The second has a
        connection of its own, so a bulk transfer queued on the RPC pipe cannot starve it.
        A dead process fails its calls by itself (its connections close), and a ping that
        fails so has it probed (:meth:`_probe`), as a failed call does; a hung one
        (stopped, deadlocked in C code, its host partitioned away) does not, and would go
        on receiving actors. Marked dead, it gets no new actor and calls to it fail at
        once; a local one is also killed, which fails the calls it holds.
        """
        timeout = self.heartbeat_timeout
        interval = heartbeat_interval(timeout)
        last_heard = self._last_heard
        pending: dict[str, Any] = {}
        sent_at: dict[str, float] = {}
        beats: dict[str, tuple[int, float]] = {}  # worker -> its store count, read when
        store = self.server.store

        def beat() -> None:
            while not rt.stopped.wait(interval):
                now = time.monotonic()
                for name in self.workers:
                    if name in rt.dead_workers:
                        continue
                    # Its store heartbeat (a connection of its own, which a bulk transfer
                    # on the RPC pipe cannot hold up): a count that moved since the last
                    # read is a sign of life given after that read.
                    try:
                        count = int(store.add(rendezvous.alive_key(name), 0))
                    except Exception:  # the store is closing with the cluster
                        count = -1
                    seen, read_at = beats.get(name, (-1, now))
                    if count >= 0:
                        if seen >= 0 and count != seen:
                            last_heard[name] = now
                            self._alive_at[name] = max(self._alive_at.get(name, 0.0), read_at)
                        beats[name] = (count, now)
                    fut = pending.get(name)
                    if fut is not None and fut.done():
                        try:
                            fut.wait()
                            last_heard[name] = now
                            answered = sent_at.get(name, 0.0)
                            self._alive_at[name] = max(self._alive_at.get(name, 0.0), answered)
                        except Exception as exc:  # a failed connection (killed): judged
                            self._ping_failed(rt, name, exc)  # now, as after a failed call
                        fut = None
                    if fut is None:
                        try:
                            sent_at[name] = time.monotonic()
                            pending[name] = rpc.rpc_async(name, rpc_ping, timeout=timeout)
                        except Exception:
                            pending.pop(name, None)
                            self._ping_failed(rt, name, None)
                    silent = now - last_heard.setdefault(name, now)
                    if silent >= timeout and not rt.stopped.is_set():
                        self._declare_dead(rt, name, silent)

        torch_threads.start(beat, name="actorrt-heartbeat")  # ends with the runtime

    def _ping_failed(self, rt: Runtime, name: str, exc: BaseException | None) -> None:
        """A heartbeat ping to ``name`` failed (``exc``; None: it could not be sent).

        A failed connection has the worker probed. A ping that timed out does not: it may
        wait behind a bulk transfer on a slow link, and the store heartbeat, on a
        connection of its own, says whether the worker lives (the silence decides).
        Multi-node only: a local worker's exit is reported by its zygote, which starts the
        replacement too (:meth:`_watch_local_workers`).
        """
        if self.cluster is not None or (exc is not None and "timeout" in str(exc).lower()):
            return
        self._probe(rt, name)

    def _probe(self, rt: Runtime, name: str) -> None:
        """A call could not reach ``name`` (multi-node): suspect now, judged within a window.

        The caller's side knows first (its connection failed: ECONNRESET, eof), long before
        the heartbeat's silence would. Until judged the directory places no actor there
        (nor a restart); a probe then pings it, with :func:`probe_window` as its timeout: an
        answer clears it; a failed connection or no answer marks it dead. Returns at once;
        one probe per worker at a time.
        """
        if rt.stopped.is_set() or name in rt.dead_workers or name not in self.workers:
            return
        with self._probe_lock:
            if name in self._probing:
                return
            self._probing.add(name)
        if rt.directory is not None:
            rt.directory.suspect(name)
        if rt.restarts is not None:
            rt.restarts.suspected(name)
        torch_threads.start(self._judge_suspect, name="actorrt-probe", args=(rt, name))

    def _judge_suspect(self, rt: Runtime, name: str) -> None:
        window = probe_window(self.heartbeat_timeout)
        answered, failure = False, ""
        try:
            try:
                rpc.rpc_sync(name, rpc_ping, timeout=window)
                answered = True
            except Exception as exc:  # refused, reset, or no answer in the window
                failure = (str(exc).splitlines() or [type(exc).__name__])[0]
            if not answered and not rt.stopped.is_set() and name not in rt.dead_workers:
                why = f"a call could not reach it, nor could a probe ({failure})"
                rt.mark_worker_dead(name, why)
                log.warning(
                    "%s: %s; marked dead: calls to its actors fail with ActorDiedError and "
                    "no new actor is placed there", name, why,
                )  # fmt: skip
            elif answered:
                rt.worker_answered(name)
                log.info("%s answered a probe after a call could not reach it", name)
        finally:
            if rt.directory is not None:
                rt.directory.clear_suspect(name)
            with self._probe_lock:
                self._probing.discard(name)

    def _declare_dead(self, rt: Runtime, name: str, silent: float) -> None:
        rt.mark_worker_dead(name, f"it answered no heartbeat for {silent:.1f} s")
        log.warning(
            "%s answered no heartbeat for %.1f s (heartbeat_timeout): marked dead; calls to "
            "its actors fail with ActorDiedError and no new actor is placed there",
            name, silent,
        )  # fmt: skip
        rank = _rank_of(rt, name)
        if self.cluster is not None and rank is not None:
            # Hung: killing it fails the calls it holds. Its stacks first, on this terminal:
            # what it was stuck in (a deadlock, C code holding the GIL) is otherwise lost.
            if self.cluster.is_stopped(rank):
                log.warning("%s is stopped (SIGSTOP or a debugger): killed", name)
                self.cluster.kill_rank(rank)
            else:
                log.warning(
                    "%s: its threads' stacks follow (faulthandler), then it is killed", name
                )
                self.cluster.kill_rank(rank, stacks_first=True)

    def stop(self) -> None:
        """Stops the workers and ends RPC within ``shutdown_timeout`` (the runtime's shutdown).

        Each step gets what is left of the bound, less a reserve for ending the local
        workers: every worker stops its actors and quiesces its agent (``rpc_stop``); then
        the driver quiesces its own, tells the workers to end (``rpc_end``) and ends. A
        quiesced agent takes a peer's closing as expected, so nobody prints a warning; a
        worker that does not answer (dead, or hung) is not waited for.
        """
        rt = self.rt
        timeout = self.shutdown_timeout
        started = time.monotonic()
        deadline = started + timeout
        reserve = min(2.0, timeout * 0.25) if self.cluster is not None else 0.0

        def budget(most: float) -> float:
            return max(0.1, min(most, deadline - time.monotonic() - reserve))

        group.set_admitter(None)
        if self.cluster is not None:
            for name in list(self._joining):  # half-joined: ending RPC under it can abort
                rank = _rank_of(rt, name) if rt is not None else None
                if rank is not None:
                    self.cluster.kill_rank(rank)
        dead = rt.dead_workers if rt is not None else frozenset()
        live = [name for name in self.workers if name not in dead]
        lost = rt is not None and rt.ever_lost_a_peer  # a dead or replaced process's leases
        let_go = not lost and not dead and not self._restarts
        group.announce_let_go(let_go)  # one word for every process (see group.lets_go)
        # What actors printed before shutdown reaches this terminal before shutdown returns.
        if self.log_to_driver:
            log.info("shutdown: collecting the output of %d worker(s)", len(live))
            _call_all(live, rpc_flush_output, (2.0,), timeout=budget(2.0))
        log.info("shutdown: telling %d worker(s) to stop", len(live))
        answered = _call_all(live, rpc_stop, (), timeout=budget(2.0))
        silent = [name for name in live if name not in answered]
        if silent:
            log.info("shutdown: no answer from %s; not waiting for them", ", ".join(silent))
        # All at once: a process's quiesce waits for the others to let go of its RRefs.
        if silent and let_go:
            let_go = False  # a hung one would never let go: nobody waits for it
            group.announce_let_go(False)
        if not let_go and rt is not None:
            # Nobody lets go: what the others said they hold of this process's leases is
            # dropped here, or torch prints each as a leak as the agent ends.
            rt.objects.forks.drop_all()
        # Not joined with a silent one: its calls would never be answered (see quiesce).
        mine = torch_threads.start(
            group.quiesce, name="actorrt-quiesce", args=(budget(3.0), let_go, not silent)
        )
        quiesced = group.wait_quiesced(len(answered) + 1, budget(3.0))
        mine.join(budget(1.0))
        log.debug("shutdown: %d of %d process(es) quiesced", quiesced, len(answered) + 1)
        group.announce_end()
        log.info("shutdown: ending RPC")
        if not group.end_local(budget(timeout)):
            log.info("shutdown: RPC did not end in time; the process's exit waits for it")
        if self.cluster is not None:
            log.info("shutdown: stopping the local workers")
            self.cluster.stop(timeout=max(0.0, deadline - time.monotonic()))
        self.server.close()
        log.info("shutdown: done in %.2f s", time.monotonic() - started)


def replacement_delay(young_deaths: int) -> float:
    """Seconds to wait before replacing a local worker.

    None (0) for a process that lived :data:`YOUNG_S` or more (``young_deaths`` 0); then
    0.5 s after the first young death, doubling with each one in a row, at most
    :data:`BACKOFF_MAX_S`: a worker that crashes at once cannot make the driver spin.
    """
    if young_deaths <= 0:
        return 0.0
    return float(min(BACKOFF_MAX_S, 0.5 * 2 ** (young_deaths - 1)))


def probe_window(heartbeat_timeout: float) -> float:
    """How long rank 0 waits for a worker a call could not reach to answer a probe.

    Well inside the heartbeat's bound (a quarter of it, at most 2 s): a dead process's
    connection fails at once, so the window matters only for one that hangs or is cut off.
    """
    return max(0.5, min(2.0, heartbeat_timeout / 4))


def _local_gpus(
    own: dict[str, Any],
    layout: Layout,
    local_workers: int,
    gpus: tuple[int, ...] | None,
    transport: str,
) -> list[tuple[int, ...]]:
    """The GPUs each local worker offers; with a layout, also checks that it fits first."""
    visible = gpus if gpus is not None else tuple(range(cuda_device_count()))
    if not layout.specs:
        return [(visible[i % len(visible)],) if visible else () for i in range(local_workers)]
    # Every worker sees the GPUs the driver may use; the plan says which one each slot
    # takes (capacity per physical GPU). Planned now, on the descriptions the workers will
    # report, so an infeasible layout fails before any is started.
    per_worker = [visible] * local_workers
    worker = {k: v for k, v in own.items() if k != "cuda_device_map"}
    predicted = [own, *({**worker, "hosts_actors": True} for _ in per_worker)]
    process_setup.cluster_spec(predicted, layout, transport=transport, socket_ifname="lo").plan()
    return per_worker


def _rank_of(rt: Runtime, name: str) -> int | None:
    ranks = {p.name: p.rank for p in rt.plan.processes} if rt.plan is not None else {}
    return ranks.get(name)


def _mark_started() -> None:
    global _started_before
    _started_before = True


def _call_all(
    names: list[str], fn: Callable[..., Any], args: tuple[Any, ...], timeout: float
) -> set[str]:
    """Calls ``fn`` on every process in ``names`` at once; the names that answered in time."""
    futures = {}
    for name in names:
        try:
            futures[name] = rpc.rpc_async(name, fn, args=args, timeout=timeout)
        except Exception:
            pass
    answered = set()
    for name, fut in futures.items():
        try:
            fut.wait()
            answered.add(name)
        except Exception:  # dead or hung: it cannot be told; it is killed later
            pass
    return answered
