"""Joining the RPC group once the plan is known: the one road of the driver and every worker.

The driver (:mod:`actorrt.cluster.driver`) and each worker (:mod:`actorrt.cluster.worker`)
reach this point differently (the driver made the plan, a worker read it from the
rendezvous store); from here on they do the same: set the environment TensorPipe reads,
make the process's :class:`~actorrt.runtime.runtime.Runtime`, install it, start RPC.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from actorrt.cluster import process_setup
from actorrt.cluster.netif import apply_socket_ifname
from actorrt.runtime import context, group
from actorrt.runtime import runtime as rt_mod
from actorrt.runtime.directory import ClusterDirectory

__all__ = ["join"]


def join(
    published: dict[str, Any],
    rank: int,
    store: Any,
    *,
    rendezvous_address: tuple[str, int],
    own_address: bool,
    num_worker_threads: int,
    rpc_timeout: float,
    timeout: float,
    rpc_id: int | None = None,
    directory: ClusterDirectory | None = None,
    on_shutdown: Callable[[], None] | None = None,
    before_rpc: Callable[[rt_mod.Runtime], None] | None = None,
) -> rt_mod.Runtime:
    """Starts this process's ``Runtime`` and RPC agent as ``rank`` of the published plan.

    Args:
        published: The plan as the driver published it (``Plan.to_dict()`` and the
            driver's notes, e.g. ``graceful_shutdown``).
        rank: This process's rank.
        store: The rendezvous store (the RPC group forms over it).
        rendezvous_address: Host and port of the rendezvous: TensorPipe listens on the
            interface that holds it (the driver) or that reaches it (a worker), unless
            ``TP_SOCKET_IFNAME`` says otherwise.
        own_address: True on the driver, whose own address the rendezvous host is.
        num_worker_threads: TensorPipe's RPC thread pool size.
        rpc_timeout: Default timeout of control messages.
        timeout: How long to wait for the other processes of a starting cluster.
        rpc_id: A fresh RPC id for a process that replaces ``rank``'s dead one, which
            joins the running group (rank 0 admits it); None (the rank) at start-up.
        directory: The cluster directory (the driver only).
        on_shutdown: Called by ``Runtime.shutdown`` once RPC is down (the driver's steps).
        before_rpc: Runs with the installed runtime just before RPC starts (what must
            be in place before the first message can arrive).

    Returns:
        The installed runtime, with RPC up.

    Raises:
        Exception: Whatever starting the agent raised; the runtime is uninstalled first.
    """
    setup = process_setup.ProcessSetup(published, rank)
    setup.apply_env()
    # TensorPipe listens on TP_SOCKET_IFNAME (and Gloo, where a user's own group uses it,
    # on GLOO_SOCKET_IFNAME);
    # their fallbacks (the host name's address, 127.0.0.1) are often unreachable from
    # other machines, so unless given they are set to the rendezvous's interface.
    apply_socket_ifname(*rendezvous_address, own_address=own_address)
    rt = rt_mod.Runtime(
        name=setup.name,
        rank=rank,
        driver_name=setup.plan.for_rank(0).name,
        directory=directory,
        device_maps=setup.device_maps,
        guard_tiny_cuda=setup.guard_tiny_cuda,
        on_shutdown=on_shutdown,
    )
    rt.plan = setup.plan
    if directory is not None and not group.rrefs_will_work():
        rt.objects.leases = False  # a second agent here: the leases (rank 0's RRefs) cannot work
    rt.objects.rpc_id = rank if rpc_id is None else rpc_id
    rt.install()
    try:
        if before_rpc is not None:
            before_rpc(rt)
        group.start_agent(
            setup.name,
            rank if rpc_id is None else rpc_id,
            store,
            setup.backend_kwargs,
            {p.name: p.device_maps for p in setup.plan.processes},
            num_worker_threads=num_worker_threads,
            rpc_timeout=rpc_timeout,
            on_member=rt.note_alive,
            admit_by=None if rpc_id is None else rt.driver_name,
        )
        if rpc_id is None:
            group.wait_for_world(
                store,
                [(p.name, p.rank) for p in setup.plan.processes],
                timeout,
                rank0=None if rank == 0 else rt.driver_name,
                own=setup.name,
            )
    except BaseException:
        group.end_local(2.0)  # if the agent started; a no-op otherwise
        context.install(None)
        raise
    return rt
