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

from actorrt.actor import ActorClass, ActorHandle, ActorMethod, actor
from actorrt.api import (
    actors,
    dump_cluster,
    get_actor,
    is_initialized,
    kill,
    nodes,
    plan,
    shutdown,
    start,
)
from actorrt.errors import (
    ActorDiedError,
    ActorError,
    ActorRtError,
    ClusterError,
    GetTimeoutError,
    NotInitializedError,
    PlacementError,
)
from actorrt.options import ActorOptions
from actorrt.refs import ObjectRef, get, wait
from actorrt.runtime.directory import ActorInfo, NodeInfo

__all__ = [
    "ActorClass",
    "ActorInfo",
    "ActorDiedError",
    "ActorError",
    "ActorHandle",
    "ActorMethod",
    "ActorOptions",
    "ActorRtError",
    "ClusterError",
    "GetTimeoutError",
    "NodeInfo",
    "NotInitializedError",
    "ObjectRef",
    "PlacementError",
    "actor",
    "actors",
    "dump_cluster",
    "get",
    "get_actor",
    "is_initialized",
    "kill",
    "nodes",
    "plan",
    "shutdown",
    "start",
    "wait",
]

__version__ = "0.1.0"
