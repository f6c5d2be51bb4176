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
from actorrt.api import get_actor, is_initialized, kill, shutdown, start
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

__all__ = [
    "ActorClass",
    "ActorDiedError",
    "ActorError",
    "ActorHandle",
    "ActorMethod",
    "ActorOptions",
    "ActorRtError",
    "ClusterError",
    "GetTimeoutError",
    "NotInitializedError",
    "ObjectRef",
    "PlacementError",
    "actor",
    "get",
    "get_actor",
    "is_initialized",
    "kill",
    "shutdown",
    "start",
    "wait",
]

__version__ = "0.1.0"
