"""``actorrt.get_runtime_context()``: what runs here, as Ray's ``get_runtime_context()``.

An actor that registers itself with another (a collector with its learner, a worker with
a coordinator) needs its own handle; code shared by actors and the driver needs to know
which actor it runs in. Both come from the actor method running in the calling thread or
task (:data:`~actorrt.runtime.exits.in_actor`, set by the mailbox around each call).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from actorrt.actor_class import ActorHandle, handle_of
from actorrt.runtime import context, lineage
from actorrt.runtime.exits import in_actor, in_method
from actorrt.runtime.protocol import task_name

if TYPE_CHECKING:
    from actorrt.runtime.host import ActorHost
    from actorrt.runtime.runtime import Runtime

__all__ = ["RuntimeContext", "get_runtime_context"]


class RuntimeContext:
    """What runs in the calling thread: see :func:`get_runtime_context`."""

    def get_actor_id(self) -> str | None:
        """The id of the actor whose method (or constructor) runs in this thread or task.

        Returns:
            The 32 hex digits of ``handle.actor_id``; None outside an actor (the driver's
            own code, a remote function, a thread the method started itself).
        """
        return in_actor.get()

    def get_actor_name(self) -> str | None:
        """The name of the actor running here (``options(name=...)``); None if unnamed.

        None outside an actor too, as Ray's.
        """
        actor_id = in_actor.get()
        return None if actor_id is None else _host().name_of(actor_id)

    def get_node_id(self) -> str | None:
        """The node (host) this process runs on, as the plan names it (``actorrt plan``).

        The host name, with ``/cN`` appended when several containers share a host. Unlike
        Ray's, it is readable and the same in every process of that host. None in a
        process that has no plan (not started).
        """
        from actorrt.runtime.runtime import current_or_none  # torch: only when asked

        rt = current_or_none()
        if rt is None or rt.plan is None:
            return None
        try:
            return rt.plan.for_name(rt.name).node
        except Exception:  # a process the plan does not know (a worker that grew in)
            return None

    def get_job_id(self) -> str | None:
        """The running cluster's id, as Ray's job id: 8 hex digits, the same in every process.

        actorrt's job is the cluster: ``actorrt.start()`` draws a random id for it, which
        its driver's name carries (``driver_1a2b3c4d`` gives ``"1a2b3c4d"``); a later
        ``start()`` gets a new one. None in a process that is not started.
        """
        from actorrt.runtime.runtime import current_or_none  # torch: only when asked

        rt = current_or_none()
        if rt is None:
            return None
        _, _, session = rt.driver_name.partition("_")
        return session or None

    @property
    def namespace(self) -> str | None:
        """Ray's namespace of the running job; actorrt has none, so it is the cluster's id.

        Ray's default namespace is an anonymous one per job, in which the job's actor
        names are unique; an actorrt cluster is the one scope of its names, so this is
        :meth:`get_job_id`. ``actorrt.get_actor`` takes no namespace (leave it out).
        """
        return self.get_job_id()

    def get_assigned_resources(self) -> dict[str, float]:
        """What the running actor or remote function was given, as Ray's: ``{"CPU": 1.0}``.

        An actor's ``num_cpus`` and ``num_gpus`` (a fraction for a share of one GPU), a
        remote function's per call (1 CPU unless given, as in Ray); a zero is left out,
        so an actor that asked for nothing gives ``{}``, as Ray's does. As in Ray 2.60,
        an actor given ``num_gpus`` (0 included) but no ``num_cpus`` gives 1 CPU:
        ``num_gpus=0.25`` is ``{"CPU": 1.0, "GPU": 0.25}``, ``num_cpus=0, num_gpus=0.25``
        is ``{"GPU": 0.25}``. Ray reserves that CPU; actorrt does not (a layout slot of
        ``num_gpus=0.25`` has no CPU to give), so ``actorrt.available_resources()``
        counts only the ``num_cpus`` given.

        Returns:
            ``{"CPU": n, "GPU": m}`` as floats; ``{}`` outside an actor or remote function
            (the driver's own code, where Ray's raises; a thread the method started).
        """
        takes = _function_takes()
        if takes is not None:
            return dict(takes)
        actor_id = in_actor.get()
        return {} if actor_id is None else _host().resources_of(actor_id)

    def get_node_labels(self) -> dict[str, str]:
        """The labels of this process, as Ray's node labels: ``{"learner": ""}``.

        actorrt's labels are names without values (Ray's are ``key: value``): each is a
        key, with ``""`` as its value; test one with ``"learner" in labels``. They are
        the labels ``actorrt.nodes()`` lists for this process: with a layout
        (``actorrt.start(labels=...)``), those of the slots the plan gave it; without
        one, those it offers (``actorrt worker --labels``, a cluster file's). The driver
        and a local worker without labels have none: ``{}``, as has a process that is
        not started.
        """
        from actorrt.runtime.runtime import current_or_none  # torch: only when asked

        rt = current_or_none()
        if rt is None:
            return {}
        return dict.fromkeys(_plan_labels(rt) or rt.offered_labels, "")

    def get_worker_id(self) -> str | None:
        """The process running here, by its RPC name, as ``actorrt.nodes()`` lists it.

        ``"worker3"``, ``"driver_1a2b3c4d"`` (a readable name where Ray gives hex; the
        same in every thread of the process). None in a process that is not started.
        """
        from actorrt.runtime.runtime import current_or_none  # torch: only when asked

        rt = current_or_none()
        return None if rt is None else rt.name

    def get_task_id(self) -> str | None:
        """An id of the call running here, as Ray's: the same for the call's whole run.

        Readable, where Ray's is hex: ``"<caller>:<n>@<actor id>"`` for an actor's call
        (the caller's n-th call to that actor), ``"<caller>:<n>@fn:<process>"`` for a
        remote function's. No two calls running at one time share it; a call sent again
        (``max_task_retries``, ``max_retries``) gets a new one.

        Returns:
            None outside a call: the driver's own code, an actor's constructor, a thread
            the method started itself.
        """
        call = lineage.serving.get()
        if call is None:
            return None
        actor_id = in_actor.get()
        if actor_id is None:
            return f"{call.caller}:{call.seq}@fn:{self.get_worker_id()}"
        return f"{call.caller}:{call.seq}@{actor_id}"

    def get_task_name(self) -> str | None:
        """The name of the call running here, as Ray's: ``"Class.method"`` or the function's.

        A call made with ``.options(name=...)`` gives that name, as in Ray. An actor's
        constructor is ``"Class.__init__"``. None outside an actor method,
        constructor or remote function (the driver's own code, a thread the method
        started itself).
        """
        method = in_method.get()  # an actor's method or constructor
        if method is not None:
            return method
        call = lineage.serving.get()  # a remote function: its executor runs it by name
        if call is None or call.method is None:
            return None
        return task_name(call.method) or str(call.method)

    def get_accelerator_ids(self) -> dict[str, list[str]]:
        """The accelerators of the running actor or remote function, as Ray's.

        Returns:
            ``{"GPU": [...]}``: the local CUDA indices (as strings, as Ray gives them) of
            the GPUs it was given; an empty list elsewhere.
        """
        from actorrt.runtime.devices import get_gpu_ids  # torch: only when asked

        return {"GPU": [str(i) for i in get_gpu_ids()]}

    @property
    def current_actor(self) -> ActorHandle:
        """A handle of the actor whose method runs here, to pass to other actors.

        Like any handle it keeps an unnamed actor alive while it exists, so an actor that
        stores it in an attribute lives until killed (handles of a named actor, or one
        with ``max_restarts``, hold nothing: such an actor lives until killed anyway).

        Raises:
            RuntimeError: Called outside an actor method or constructor, or by an actor
                that is being freed (no handle referred to it any more).
        """
        actor_id = _running_actor(
            "current_actor", "; outside one, keep the handle that Cls.remote() returned"
        )
        record, lease = _host().own_handle_parts(actor_id)
        return handle_of(record, None if lease is None else _new_rref(lease))

    @property
    def was_current_actor_reconstructed(self) -> bool:
        """Whether the actor running here was made again after its process died.

        True in an actor with ``max_restarts`` from its first restart on (its constructor
        included): the moment to load what it saved, a checkpoint for instance. False in
        its first instance.

        Raises:
            RuntimeError: Called outside an actor method or constructor.
        """
        return _host().was_reconstructed(_running_actor("was_current_actor_reconstructed"))

    def is_canceled(self) -> bool:
        """Whether ``actorrt.cancel`` was called on the call running here, as Ray's.

        A plain (threaded) actor's method is not interrupted by a cancel, since a method
        cut in half would leave the actor's state half changed: it runs to its end unless
        it reads this and returns early. True from the moment the cancel reached the call's
        process; in a remote function and an async actor's method too, which a cancel
        interrupts (a function that catches ``KeyboardInterrupt`` can read it).

        Raises:
            RuntimeError: Called outside an actor method or remote function (the driver's
                own code, a thread the method started itself).
        """
        call = lineage.serving.get()
        if call is None:
            raise RuntimeError(
                "get_runtime_context().is_canceled() works only inside an actor's method or "
                "a remote function, in the thread (or task) that runs it"
            )
        return call.cancel_asked

    def get(self) -> dict[str, Any]:
        """What this context knows, as one dict (Ray's ``get()``): the set values only.

        Keys: ``job_id``, ``namespace``, ``worker_id`` and ``node_id`` in a started
        process; ``actor_id``, ``task_id`` and ``task_name`` where they apply (see their
        methods).
        """
        values = {
            "job_id": self.get_job_id(),
            "namespace": self.namespace,
            "worker_id": self.get_worker_id(),
            "node_id": self.get_node_id(),
            "actor_id": self.get_actor_id(),
            "task_id": self.get_task_id(),
            "task_name": self.get_task_name(),
        }
        return {key: value for key, value in values.items() if value is not None}

    def __repr__(self) -> str:
        return f"RuntimeContext(actor_id={self.get_actor_id()!r})"


def get_runtime_context() -> RuntimeContext:
    """What runs in the calling thread (Ray's ``get_runtime_context()``).

    Example::

        @actorrt.actor
        class Collector:
            def __init__(self, learner):
                me = actorrt.get_runtime_context().current_actor
                learner.register.remote(me)  # the learner calls back on this handle

    Returns:
        A :class:`RuntimeContext`; read it in the thread (or task) that needs it.
    """
    return RuntimeContext()


def _running_actor(what: str, hint: str = "") -> str:
    """The id of the actor running here; ``RuntimeError`` naming ``what`` outside one."""
    actor_id = in_actor.get()
    if actor_id is None:
        raise RuntimeError(
            f"get_runtime_context().{what} works only inside an actor's method or constructor{hint}"
        )
    return actor_id


def _plan_labels(rt: Runtime) -> tuple[str, ...]:
    """The labels of the slots the plan gave this process (none without a layout)."""
    if rt.plan is None:
        return ()
    try:
        return rt.plan.for_name(rt.name).labels
    except Exception:  # a process the plan does not know (a worker that grew in)
        return ()


def _function_takes() -> dict[str, float] | None:
    """What the remote function running here takes per call; None outside one."""
    from actorrt.runtime.executor import in_function  # torch: only when asked

    return in_function.get()


def _host() -> ActorHost:
    from actorrt.runtime.host import ActorHost  # torch: only once an actor asks

    return context.part(ActorHost)


def _new_rref(lease: Any) -> Any:
    """A new RRef of ``lease``, owned here: one more holder of the actor's lease."""
    import torch.distributed.rpc as rpc

    return rpc.RRef(lease)
