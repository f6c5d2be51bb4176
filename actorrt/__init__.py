"""actorrt: Ray-style actors on torch.distributed.rpc (TensorPipe).

Example::

    import actorrt

    @actorrt.actor
    class Counter:
        def __init__(self):
            self.n = 0

        def add(self, k):
            self.n += k
            return self.n

    with actorrt.start(num_workers=2):
        c = Counter.remote()
        print(actorrt.get(c.add.remote(1)))
"""

# The public names are imported on first use (PEP 562): most of them import torch, which
# takes seconds, and `import actorrt.cli` runs this file first, so `actorrt --help`,
# `actorrt plan` and `actorrt describe` would pay for torch without needing it. A new
# public name goes into _EXPORTS (and __all__), not into an eager import here;
# tests/unit/cli/test_cli_fast.py fails if `import actorrt` imports torch again.

from __future__ import annotations

import importlib
import importlib.util
from typing import TYPE_CHECKING, Any

from actorrt._version import __version__ as __version__  # re-exported

if TYPE_CHECKING:  # the same names, eagerly, for type checkers and IDEs
    from actorrt.actor_class import (
        ActorClass,
        ActorHandle,
        ActorMethod,
        TypedActor,
        actor,
        method,
    )
    from actorrt.actor_pool import ActorPool
    from actorrt.api import (
        actors,
        available_resources,
        cluster_resources,
        dump_cluster,
        get_actor,
        is_initialized,
        kill,
        list_named_actors,
        nodes,
        plan,
        shutdown,
        stacks,
        start,
        status,
        timeline,
    )
    from actorrt.errors import (
        ActorDiedError,
        ActorError,
        ActorRtError,
        ClusterError,
        GetTimeoutError,
        NotInitializedError,
        ObjectLostError,
        PendingCallsLimitExceeded,
        PlacementError,
        TaskCancelledError,
    )
    from actorrt.options import ActorOptions, FunctionOptions
    from actorrt.queues import Queue
    from actorrt.ref_generator import ObjectRefGenerator
    from actorrt.refs import ObjectRef, cancel, get, put, wait
    from actorrt.remote_function import RemoteFunction, remote
    from actorrt.runtime.devices import get_gpu_ids
    from actorrt.runtime.directory import ActorInfo, NodeInfo
    from actorrt.runtime.exits import exit_actor
    from actorrt.runtime.trace import profile
    from actorrt.runtime_context import RuntimeContext, get_runtime_context

#: public name -> the module that defines it
_EXPORTS = {
    "ActorPool": "actorrt.actor_pool",
    "ActorClass": "actorrt.actor_class",
    "ActorHandle": "actorrt.actor_class",
    "ActorMethod": "actorrt.actor_class",
    "TypedActor": "actorrt.actor_class",
    "actor": "actorrt.actor_class",
    "method": "actorrt.actor_class",
    "actors": "actorrt.api",
    "available_resources": "actorrt.api",
    "cluster_resources": "actorrt.api",
    "dump_cluster": "actorrt.api",
    "get_actor": "actorrt.api",
    "is_initialized": "actorrt.api",
    "kill": "actorrt.api",
    "list_named_actors": "actorrt.api",
    "nodes": "actorrt.api",
    "plan": "actorrt.api",
    "shutdown": "actorrt.api",
    "stacks": "actorrt.api",
    "start": "actorrt.api",
    "status": "actorrt.api",
    "timeline": "actorrt.api",
    "ActorDiedError": "actorrt.errors",
    "ActorError": "actorrt.errors",
    "ActorRtError": "actorrt.errors",
    "ClusterError": "actorrt.errors",
    "GetTimeoutError": "actorrt.errors",
    "NotInitializedError": "actorrt.errors",
    "ObjectLostError": "actorrt.errors",
    "PendingCallsLimitExceeded": "actorrt.errors",
    "PlacementError": "actorrt.errors",
    "TaskCancelledError": "actorrt.errors",
    "ActorOptions": "actorrt.options",
    "FunctionOptions": "actorrt.options",
    "Queue": "actorrt.queues",
    "ObjectRefGenerator": "actorrt.ref_generator",
    "ObjectRef": "actorrt.refs",
    "cancel": "actorrt.refs",
    "get": "actorrt.refs",
    "put": "actorrt.refs",
    "wait": "actorrt.refs",
    "RemoteFunction": "actorrt.remote_function",
    "remote": "actorrt.remote_function",
    "ActorInfo": "actorrt.runtime.directory",
    "NodeInfo": "actorrt.runtime.directory",
    "exit_actor": "actorrt.runtime.exits",
    "get_gpu_ids": "actorrt.runtime.devices",
    "profile": "actorrt.runtime.trace",
    "RuntimeContext": "actorrt.runtime_context",
    "get_runtime_context": "actorrt.runtime_context",
}

__all__ = [
    "ActorClass",
    "ActorInfo",
    "ActorDiedError",
    "ActorError",
    "ActorHandle",
    "ActorMethod",
    "ActorOptions",
    "ActorPool",
    "ActorRtError",
    "ClusterError",
    "FunctionOptions",
    "GetTimeoutError",
    "NodeInfo",
    "NotInitializedError",
    "ObjectLostError",
    "ObjectRef",
    "ObjectRefGenerator",
    "PendingCallsLimitExceeded",
    "PlacementError",
    "Queue",
    "RemoteFunction",
    "RuntimeContext",
    "TaskCancelledError",
    "TypedActor",
    "actor",
    "actors",
    "available_resources",
    "cancel",
    "cluster_resources",
    "dump_cluster",
    "exit_actor",
    "get",
    "get_actor",
    "get_gpu_ids",
    "get_runtime_context",
    "is_initialized",
    "kill",
    "list_named_actors",
    "method",
    "nodes",
    "plan",
    "profile",
    "put",
    "remote",
    "shutdown",
    "stacks",
    "start",
    "status",
    "timeline",
    "wait",
]


def __getattr__(name: str) -> Any:
    """Imports a public name (or a submodule) the first time it is looked up."""
    module_name = _EXPORTS.get(name)
    if module_name is not None:
        value = getattr(importlib.import_module(module_name), name)
        globals()[name] = value  # later lookups no longer come here
        return value
    # `import actorrt; actorrt.placement....` worked when everything was imported eagerly.
    if not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}") is not None:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
