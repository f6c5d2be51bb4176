"""actorrt.get_runtime_context(): an actor's own id and handle, as Ray's runtime context."""

import asyncio
import gc
import time

import pytest

import actorrt

pytestmark = pytest.mark.timeout(120)


@actorrt.actor
class Collector:
    def __init__(self):
        self.id_at_init = actorrt.get_runtime_context().get_actor_id()

    def ids(self):
        return self.id_at_init, actorrt.get_runtime_context().get_actor_id()

    def register_with(self, learner):
        # The pattern the API is for: an actor hands its own handle to another.
        return actorrt.get(learner.register.remote(actorrt.get_runtime_context().current_actor))

    def ping(self, x):
        return ("pong", x)


@actorrt.actor
class Learner:
    def __init__(self):
        self.collectors = []

    def register(self, collector):
        self.collectors.append(collector)
        return len(self.collectors)

    def call_back(self, x):
        return [actorrt.get(c.ping.remote(x)) for c in self.collectors]

    def own_id(self):
        return actorrt.get_runtime_context().get_actor_id()


@actorrt.actor
class AsyncActor:
    async def ids(self):
        await asyncio.sleep(0)
        return actorrt.get_runtime_context().get_actor_id()


@actorrt.actor(name="runtime-context-named")
class Named:
    def me(self):
        return actorrt.get_runtime_context().current_actor

    def ping(self):
        return "named"


@actorrt.remote
def id_in_a_function():
    return actorrt.get_runtime_context().get_actor_id()


def test_get_actor_id_is_the_actors_own_in_methods_and_constructor_and_none_elsewhere(cluster):
    c = Collector.remote()
    assert actorrt.get(c.ids.remote(), timeout=30) == (c.actor_id, c.actor_id)
    a = AsyncActor.remote()
    assert actorrt.get(a.ids.remote(), timeout=30) == a.actor_id
    assert actorrt.get(id_in_a_function.remote(), timeout=30) is None  # a function: no actor
    assert actorrt.get_runtime_context().get_actor_id() is None  # the driver
    with pytest.raises(RuntimeError, match="only inside an actor's method"):
        _ = actorrt.get_runtime_context().current_actor


def test_current_actor_is_a_handle_that_others_call_back_and_that_keeps_the_actor(cluster):
    learner = Learner.remote()
    collector = Collector.remote()
    assert actorrt.get(collector.register_with.remote(learner), timeout=30) == 1
    assert actorrt.get(learner.call_back.remote(7), timeout=30) == [("pong", 7)]
    # The driver lets go of its own handle: the learner's (made by the collector of
    # itself) still keeps the collector alive, as any handle would.
    del collector
    gc.collect()
    time.sleep(3)  # past the RRef keeper's holds and the release of a dropped handle
    assert actorrt.get(learner.call_back.remote(8), timeout=30) == [("pong", 8)]


def test_a_named_actors_own_handle_is_its_handle(cluster):
    n = Named.remote()
    me = actorrt.get(n.me.remote(), timeout=30)
    assert me.actor_id == n.actor_id
    assert actorrt.get(me.ping.remote(), timeout=30) == "named"
    actorrt.kill(n)


class _Where:
    def __init__(self):
        self.name_at_init = actorrt.get_runtime_context().get_actor_name()
        self.task_at_init = actorrt.get_runtime_context().get_task_name()

    def about(self):
        ctx = actorrt.get_runtime_context()
        return self.name_at_init, ctx.get_actor_name(), ctx.get_node_id()

    def process(self):
        from actorrt.runtime.runtime import current_or_none

        return current_or_none().name


Where = actorrt.actor(_Where)


@actorrt.remote
def accelerators():
    return actorrt.get_runtime_context().get_accelerator_ids()


def test_an_actor_knows_its_name_and_node(cluster):
    named = Where.options(name="where-am-i").remote()
    plain = Where.remote()
    name_at_init, name, node = actorrt.get(named.about.remote(), timeout=30)
    assert name_at_init == name == "where-am-i"
    assert actorrt.get(plain.about.remote(), timeout=30)[:2] == (None, None)
    process = actorrt.get(named.process.remote(), timeout=30)
    assert node == cluster.plan.for_name(process).node and node  # as `actorrt plan` shows
    ctx = actorrt.get_runtime_context()
    assert ctx.get_actor_name() is None  # the driver runs no actor
    assert ctx.get_node_id() == cluster.plan.for_name(cluster.name).node
    assert ctx.get_accelerator_ids() == {"GPU": []}
    assert actorrt.get(accelerators.remote(), timeout=30) == {"GPU": []}  # no num_gpus
    actorrt.kill(named)


@actorrt.actor
class Tasks(_Where):
    def task(self):
        ctx = actorrt.get_runtime_context()
        return self.task_at_init, ctx.get_task_name(), ctx.get_task_id(), ctx.get_worker_id()

    async def about_async(self):
        await asyncio.sleep(0)
        ctx = actorrt.get_runtime_context()
        return ctx.get_task_name(), ctx.get_task_id()

    def streamed(self):
        for _ in range(2):
            yield actorrt.get_runtime_context().get_task_name()

    def everything(self):
        return actorrt.get_runtime_context().get()

    def pair(self):
        return actorrt.get_runtime_context().get_task_name(), 2

    def fail(self):
        raise ValueError("failed on purpose")


@actorrt.remote
def task_in_a_function():
    ctx = actorrt.get_runtime_context()
    return ctx.get_task_name(), ctx.get_task_id(), ctx.get_worker_id()


def test_a_call_knows_its_task_name_and_id_and_its_process(cluster):
    t = Tasks.remote()
    at_init, name, first, worker = actorrt.get(t.task.remote(), timeout=30)
    assert (at_init, name) == ("Tasks.__init__", "Tasks.task")
    assert worker in {p.name for p in cluster.plan.processes}  # a process of the plan
    second = actorrt.get(t.task.remote(), timeout=30)[2]
    assert first != second and first.endswith(t.actor_id) and second.endswith(t.actor_id)
    assert first.startswith(cluster.name + ":")  # the caller: this driver
    async_name, async_id = actorrt.get(t.about_async.remote(), timeout=30)
    assert async_name == "Tasks.about_async" and async_id not in (first, second)
    assert [actorrt.get(r, timeout=30) for r in t.streamed.remote()] == ["Tasks.streamed"] * 2
    fn_name, fn_id, fn_worker = actorrt.get(task_in_a_function.remote(), timeout=30)
    assert fn_name == "task_in_a_function" and fn_id.endswith(f"@fn:{fn_worker}")
    everything = actorrt.get(t.everything.remote(), timeout=30)
    assert everything["task_name"] == "Tasks.everything"
    assert everything["actor_id"] == t.actor_id and everything["worker_id"] == worker
    ctx = actorrt.get_runtime_context()  # the driver: no call runs here
    assert (ctx.get_task_name(), ctx.get_task_id()) == (None, None)
    assert ctx.get_worker_id() == cluster.name
    job = ctx.get_job_id()
    assert ctx.get() == {
        "job_id": job,
        "namespace": job,
        "worker_id": cluster.name,
        "node_id": ctx.get_node_id(),
    }


def test_a_call_named_with_options_gives_that_task_name_as_rays(cluster):
    t = Tasks.remote()
    name = actorrt.get(t.task.options(name="step-7").remote(), timeout=30)[1]
    assert name == "step-7"
    assert actorrt.get(t.task.remote(), timeout=30)[1] == "Tasks.task"  # only that call
    assert actorrt.get(t.about_async.options(name="a-1").remote(), timeout=30)[0] == "a-1"
    streamed = t.streamed.options(name="s-1").remote()
    assert [actorrt.get(r, timeout=30) for r in streamed] == ["s-1"] * 2
    first, second = t.pair.options(num_returns=2, name="p-1").remote()
    assert actorrt.get([first, second], timeout=30) == ["p-1", 2]
    fn = task_in_a_function.options(name="fn-1").remote()
    assert actorrt.get(fn, timeout=30)[0] == "fn-1"
    # Its errors name it too, after the method (as Ray's name the task).
    with pytest.raises(actorrt.ActorError, match=r"Tasks actor \w+\.fail \(task 'f-1'\) raised"):
        actorrt.get(t.fail.options(name="f-1").remote(), timeout=30)
    with pytest.raises(actorrt.ActorError, match=r"\.pair \(task 'p-2'\) raised ValueError"):
        actorrt.get(t.pair.options(num_returns=3, name="p-2").remote()[0], timeout=30)
    with pytest.raises(TypeError, match="name=3 must be a string"):
        t.task.options(name=3)
    with pytest.raises(ValueError, match="name='' names nothing"):
        task_in_a_function.options(name="")


def _job_parts():
    ctx = actorrt.get_runtime_context()
    return ctx.get_job_id(), ctx.namespace, ctx.get_assigned_resources(), ctx.get_node_labels()


@actorrt.actor
class Job:
    def __init__(self):
        self.at_init = _job_parts()

    def parts(self):
        return self.at_init, _job_parts()

    async def parts_async(self):
        return _job_parts()

    def streamed(self):
        yield _job_parts()


@actorrt.remote
def job_in_a_function():
    return _job_parts()


@actorrt.remote
def job_in_a_generator():
    yield _job_parts()


def test_the_job_namespace_resources_and_labels_of_a_call_as_rays(cluster):
    job, namespace, resources, labels = _job_parts()  # the driver's
    assert isinstance(job, str) and len(job) == 8 and int(job, 16) >= 0  # hex, as Ray's
    assert cluster.driver_name == f"driver_{job}"  # the cluster's own id
    assert namespace == job  # one scope of names per cluster: actorrt has no namespaces
    assert resources == {}  # the driver reserves nothing (Ray's raises here)
    assert labels == {}  # no layout, and local workers offer no labels
    got = actorrt.get_runtime_context().get()
    assert got["job_id"] == job and got["namespace"] == namespace
    # An actor reserves nothing unless asked (as Ray's, num_cpus=0); the job is the same.
    plain = Job.remote()
    assert actorrt.get(plain.parts.remote(), timeout=30) == ((job, job, {}, {}),) * 2
    sized = Job.options(num_cpus=0.5).remote()
    assert actorrt.get(sized.parts.remote(), timeout=30) == ((job, job, {"CPU": 0.5}, {}),) * 2
    assert actorrt.get(sized.parts_async.remote(), timeout=30) == (job, job, {"CPU": 0.5}, {})
    assert [actorrt.get(r, timeout=30) for r in sized.streamed.remote()] == [
        (job, job, {"CPU": 0.5}, {})
    ]
    # num_gpus given without num_cpus runs on 1 CPU in Ray, num_gpus=0 too (Ray 2.60
    # reports {"CPU": 1.0} there); with num_cpus=0 on none.
    gpu_given = Job.options(num_gpus=0).remote()
    assert actorrt.get(gpu_given.parts.remote(), timeout=30)[1] == (job, job, {"CPU": 1.0}, {})
    no_cpu = Job.options(num_cpus=0, num_gpus=0).remote()
    assert actorrt.get(no_cpu.parts.remote(), timeout=30)[1] == (job, job, {}, {})
    # A remote function takes one CPU per call unless told otherwise, as in Ray.
    assert actorrt.get(job_in_a_function.remote(), timeout=30) == (job, job, {"CPU": 1.0}, {})
    half = job_in_a_function.options(num_cpus=0.5).remote()
    assert actorrt.get(half, timeout=30) == (job, job, {"CPU": 0.5}, {})
    free = job_in_a_function.options(num_cpus=0).remote()
    assert actorrt.get(free, timeout=30) == (job, job, {}, {})
    streamed = job_in_a_generator.options(num_cpus=0.25).remote()
    assert [actorrt.get(r, timeout=30) for r in streamed] == [(job, job, {"CPU": 0.25}, {})]
    for actor in (plain, sized, gpu_given, no_cpu):
        actorrt.kill(actor)
