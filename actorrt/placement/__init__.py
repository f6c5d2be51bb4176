"""Placement: node descriptions in, a :class:`Plan` out.

Pure computation over plain data: which process hosts which label and GPU, the
TensorPipe device maps, transports and channels of every process, and the transport
every pair of processes will use. No processes, sockets or GPUs are touched, except by
:func:`describe_node`, which reads the local machine.
"""

from actorrt.placement.clusterfile import (
    ClusterSpec,
    dump_cluster,
    load_cluster,
    node_table,
    parse_cluster,
)
from actorrt.placement.device_flags import (
    device_map_override_from_di,
    di_device_map_for,
    format_cuda_device_map,
    format_local_cuda_devices,
    parse_cuda_device_map,
    parse_local_cuda_devices,
)
from actorrt.placement.discovery import describe_node
from actorrt.placement.layout import (
    DEFAULT_STRATEGY,
    STRATEGIES,
    LabelSpec,
    Layout,
    load_layout,
    parse_label_specs,
    parse_layout,
)
from actorrt.placement.node import (
    ContainerIdentity,
    GpuInfo,
    HcaInfo,
    NodeDescription,
    ProcessInfo,
)
from actorrt.placement.plan import (
    TRANSPORT_MODES,
    Pair,
    Plan,
    ProcessPlan,
    make_plan,
    plan_graph,
)
from actorrt.placement.resources import Resources
from actorrt.placement.scheduler import Placer, Slot
from actorrt.placement.topology import BANDWIDTH_CLASS, LINK_KINDS, build_topology
from actorrt.placement.transports import (
    GDR_MIN_BYTES,
    registered_tensorpipe_backends,
)

__all__ = [
    "BANDWIDTH_CLASS",
    "DEFAULT_STRATEGY",
    "GDR_MIN_BYTES",
    "LINK_KINDS",
    "STRATEGIES",
    "TRANSPORT_MODES",
    "ClusterSpec",
    "ContainerIdentity",
    "GpuInfo",
    "HcaInfo",
    "LabelSpec",
    "Layout",
    "NodeDescription",
    "Pair",
    "Placer",
    "Plan",
    "ProcessInfo",
    "ProcessPlan",
    "Resources",
    "Slot",
    "build_topology",
    "describe_node",
    "device_map_override_from_di",
    "dump_cluster",
    "di_device_map_for",
    "format_cuda_device_map",
    "format_local_cuda_devices",
    "load_cluster",
    "load_layout",
    "make_plan",
    "plan_graph",
    "node_table",
    "parse_cluster",
    "parse_cuda_device_map",
    "parse_label_specs",
    "parse_local_cuda_devices",
    "parse_layout",
    "registered_tensorpipe_backends",
]
