"""Glue between the rendezvous and :mod:`actorrt.placement`: describe, plan, apply.

Every process describes itself as a JSON-safe dict; rank 0 turns the descriptions into a
:class:`~actorrt.placement.Plan` and publishes it; each process applies its own part
(environment, TensorPipe options) before ``init_rpc``.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from typing import Any

from actorrt.placement.clusterfile import ClusterSpec
from actorrt.placement.device_flags import device_map_override_from_di
from actorrt.placement.discovery import describe_node
from actorrt.placement.layout import Layout
from actorrt.placement.node import NodeDescription, ProcessInfo
from actorrt.placement.plan import Plan
from actorrt.placement.transports import registered_tensorpipe_backends

__all__ = ["ProcessSetup", "cluster_spec", "describe_process", "process_name"]


def process_name(rank: int, session: str = "") -> str:
    """RPC name of a rank: rank 0 is the driver.

    The driver's name carries the session, because torch keeps per-name-set state across
    ``init_rpc`` calls in one process (its all-gather sequence numbers): a driver that
    starts a second cluster under the same names would wait forever at start-up.
    """
    if rank == 0:
        # No "-": torch's dynamic groups list members as "name-id" and split on it.
        return f"driver_{session[:8]}" if session else "driver"
    return f"worker{rank}"


def describe_process(
    labels: Sequence[str] = (),
    gpus: Sequence[int] | None = None,
    cuda_device_map: str | None = None,
    *,
    hosts_actors: bool = True,
) -> dict[str, Any]:
    """This process's node description (host, container, GPUs, HCAs, labels) as a dict.

    ``cuda_device_map`` is this process's own DI-engine style map
    (``<peer rank>_<local gpu>_<peer gpu>,...``); it travels with the description so rank 0
    can apply every process's override when it plans. The driver passes
    ``hosts_actors=False``: it hosts no actors.
    """
    node = describe_node(tuple(labels), gpus=gpus)
    if not hosts_actors:
        node = dataclasses.replace(node, hosts_actors=False)
    description = node.to_dict()
    if cuda_device_map:
        description["cuda_device_map"] = cuda_device_map
    return description


def cluster_spec(
    descriptions: Sequence[dict[str, Any]],
    layout: Layout,
    *,
    transport: str = "auto",
    socket_ifname: str | None = None,
    session: str = "",
) -> ClusterSpec:
    """On rank 0: the planner's input for ranks ``0..len(descriptions)-1``.

    ``ClusterSpec.plan()`` on it is the cluster's plan; ``dump_cluster`` writes it as the
    cluster file that ``actorrt plan`` plans identically.
    """
    processes = [
        ProcessInfo(rank=r, name=process_name(r, session), node=NodeDescription.from_dict(d))
        for r, d in enumerate(descriptions)
    ]
    di_maps = {
        r: d["cuda_device_map"] for r, d in enumerate(descriptions) if d.get("cuda_device_map")
    }
    override = device_map_override_from_di(di_maps, processes) if di_maps else {}
    return ClusterSpec(
        processes=tuple(processes),
        layout=layout,
        transport=transport,
        socket_ifname=socket_ifname,
        device_map_override=override,
    )


class ProcessSetup:
    """What one process needs from the plan: its name, RPC options, and who it maps GPUs to."""

    def __init__(self, plan: dict[str, Any], rank: int) -> None:
        self.plan = Plan.from_dict(plan)
        self.process = self.plan.for_rank(rank)
        self.name = self.process.name
        process = self.process
        forced_transports = _env_list("ACTORRT_TP_TRANSPORTS")
        forced_channels = _env_list("ACTORRT_TP_CHANNELS")
        if forced_transports or forced_channels:
            # A debugging / benchmarking override (e.g. TCP only: uv + basic); it wins
            # over the plan, so the user owns the traps it may walk into.
            process = dataclasses.replace(
                process,
                transports=forced_transports or process.transports,
                channels=forced_channels or process.channels,
            )
            self.process = process
        available: tuple[frozenset[str] | None, frozenset[str] | None] = (None, None)
        if self.process.transports or self.process.channels:
            # torch refuses channel names its build lacks (no cuda_* on a CPU build).
            available = registered_tensorpipe_backends()
        self.backend_kwargs = self.process.backend_options_kwargs(*available)
        self.device_maps = self.process.device_maps
        self.guard_tiny_cuda = self.process.guard_tiny_cuda
        self.env = dict(self.process.env)

    def apply_env(self) -> None:
        """Sets the environment TensorPipe reads when the agent starts."""
        os.environ.update(self.env)


def _env_list(name: str) -> list[str] | None:
    value = os.environ.get(name, "").strip()
    return [v.strip() for v in value.split(",") if v.strip()] or None
