"""Joining the RPC group once the plan is known: the one road of the driver and every worker.

The driver (:mod:`actorrt.cluster.driver`) and each worker (:mod:`actorrt.cluster.worker`)
reach this point differently (the driver made the plan, a worker read it from the
rendezvous store); from here on they do the same: set the environment TensorPipe reads,
make the process's :class:`~actorrt.runtime.runtime.Runtime`, install it, start RPC.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from actorrt.cluster import process_setup, rendezvous
from actorrt.cluster.netif import apply_socket_ifname
from actorrt.runtime import context
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
    directory: ClusterDirectory | None = None,
    on_shutdown: Callable[[], None] | None = None,
    before_rpc: Callable[[rt_mod.Runtime], None] | None = None,
) -> rt_mod.Runtime:
    """Starts this process's ``Runtime`` and RPC agent as ``rank`` of the published plan.

    Args:
        published: The plan as the driver published it (``Plan.to_dict()`` and the
            driver's notes, e.g. ``graceful_shutdown``).
        rank: This process's rank.
        store: The rendezvous store (``init_rpc`` forms its group over it).
        rendezvous_address: Host and port of the rendezvous: TensorPipe listens on the
            interface that holds it (the driver) or that reaches it (a worker), unless
            ``TP_SOCKET_IFNAME`` says otherwise.
        own_address: True on the driver, whose own address the rendezvous host is.
        num_worker_threads: TensorPipe's RPC thread pool size.
        rpc_timeout: Default timeout of control messages.
        directory: The cluster directory (the driver only).
        on_shutdown: Called by ``Runtime.shutdown`` once RPC is down (the driver's steps).
        before_rpc: Runs with the installed runtime just before ``init_rpc`` (what must
            be in place before the first message can arrive).

    Returns:
        The installed runtime, with RPC up.

    Raises:
        Exception: Whatever ``init_rpc`` raised; the runtime is uninstalled first.
    """
    setup = process_setup.ProcessSetup(published, rank)
    setup.apply_env()
    # TensorPipe and init_rpc's Gloo group listen on TP_SOCKET_IFNAME / GLOO_SOCKET_IFNAME;
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
    rt.install()
    try:
        if before_rpc is not None:
            before_rpc(rt)
        rt_mod.init_rpc(
            setup.name,
            rank,
            len(setup.plan.processes),
            rendezvous.store_init_method(store),
            setup.backend_kwargs,
            num_worker_threads=num_worker_threads,
            rpc_timeout=rpc_timeout,
        )
    except BaseException:
        context.install(None)
        raise
    return rt
