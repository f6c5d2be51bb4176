"""@actor, options and errors: validation happens at decoration time, no process needed."""

import concurrent.futures as cf

import pytest

import actorrt
from actorrt.placement.resources import Resources
from actorrt.refs import ObjectRef


class Plain:
    def __init__(self, x=0):
        self.x = x

    def get(self):
        return self.x

    async def aget(self):
        return self.x

    def _private(self):
        return 1


def test_bare_and_parametrised_decorator():
    A = actorrt.actor(Plain)
    assert isinstance(A, actorrt.ActorClass)
    assert A.default_options == actorrt.ActorOptions()
    B = actorrt.actor(label="learner", num_gpus=1, max_concurrency=4, name="b")(Plain)
    assert B.default_options.label == "learner"
    assert B.default_options.num_gpus == 1
    assert B.default_options.max_concurrency == 4
    assert B.cls is Plain
    assert B._methods == ("_private", "aget", "get")


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"num_gpus": -1}, ValueError, "num_gpus=-1 must be a number >= 0"),
        ({"num_cpus": float("nan")}, ValueError, "num_cpus=nan must be a number >= 0"),
        ({"num_gpus": float("inf")}, ValueError, "num_gpus=inf must be a number >= 0"),
        ({"num_cpus": "two"}, TypeError, "num_cpus='two' must be a number"),
        ({"max_concurrency": 0}, ValueError, "max_concurrency=0 must be an int >= 1"),
        ({"max_concurrency": 1.5}, TypeError, "max_concurrency=1.5"),
        ({"label": "bad label!"}, ValueError, "not a valid label"),
        ({"label": 3}, TypeError, "not a valid label"),
        ({"name": ""}, ValueError, "non-empty string"),
        ({"num_gpus": 1.5}, ValueError, "fractions are only allowed below 1"),
        ({"max_restarts": -2}, ValueError, "max_restarts=-2 must be an int >= 0, or -1 for no"),
        ({"max_restarts": 1.0}, TypeError, "max_restarts=1.0 must be an int"),
        ({"max_restarts": "x"}, TypeError, "max_restarts='x' must be an int"),
        ({"max_restarts": True}, TypeError, "max_restarts=True must be an int"),
        (
            {"max_restarts": 1, "max_task_retries": -2},
            ValueError,
            "max_task_retries=-2 must be an int >= 0",
        ),
        (
            {"max_restarts": 1, "max_task_retries": "3"},
            TypeError,
            "max_task_retries='3' must be an int",
        ),
        ({"max_task_retries": 3}, ValueError, "max_task_retries=3 needs max_restarts.*=1"),
        ({"max_pending_calls": 0}, ValueError, r"max_pending_calls=0 must be an int >= 1, or -1"),
        ({"max_pending_calls": -2}, ValueError, "max_pending_calls=-2 must be an int >= 1"),
        ({"max_pending_calls": 2.0}, TypeError, "max_pending_calls=2.0 must be an int"),
        ({"max_pending_calls": True}, TypeError, "max_pending_calls=True must be an int"),
        ({"concurrency_groups": [1]}, TypeError, "must be a dict of names to threads"),
        ({"concurrency_groups": {1: 2}}, TypeError, "name 1 must be a Python identifier"),
        ({"concurrency_groups": {"a b": 2}}, ValueError, "must be a Python identifier"),
        ({"concurrency_groups": {"io": "2"}}, TypeError, "has '2' threads"),
        ({"concurrency_groups": {"io": 0}}, ValueError, "has 0 threads"),
    ],
)
def test_bad_options_fail_at_decoration_and_options_with_rays_error_class(kwargs, error, match):
    # As Ray's: a value of the wrong type is a TypeError, one out of range a ValueError
    # (Ray 2.60: num_cpus="2", max_restarts=1.5 TypeError; max_restarts=-2 ValueError).
    with pytest.raises(error, match=match) as raised:
        actorrt.actor(**kwargs)
    assert type(raised.value) is error  # exactly Ray's class, not one of both
    with pytest.raises(error, match=match):
        actorrt.actor(Plain).options(**kwargs)


@pytest.mark.parametrize("name", [1, object(), b"learner", ["a"]])
def test_a_name_of_the_wrong_type_is_a_type_error(name):
    # As in Ray: a name that is not a str is a TypeError, by decorator, by options() and
    # for get_actor (checked before any cluster is asked, so none is needed here).
    with pytest.raises(TypeError, match="must be a string, not"):
        actorrt.actor(name=name)
    with pytest.raises(TypeError, match="must be a string, not"):
        actorrt.actor(Plain).options(name=name)
    with pytest.raises(TypeError, match="must be a string, not"):
        actorrt.get_actor(name)


@pytest.mark.parametrize(
    "name, match",
    [
        ("", "non-empty string"),
        ("   ", "not only whitespace"),
        ("learner\n", "control character"),
        ("a\x00b", "control character"),
    ],
)
def test_a_bad_name_string_is_a_value_error(name, match):
    with pytest.raises(ValueError, match=match):
        actorrt.actor(name=name)
    with pytest.raises(ValueError, match=match):
        actorrt.actor(Plain).options(name=name)
    with pytest.raises(ValueError, match=match):
        actorrt.get_actor(name)


def test_good_names_pass():
    for name in ("learner", "learner 0", "collector/3", "élève"):
        assert actorrt.actor(Plain).options(name=name)._options.name == name


def test_task_retries_by_decorator_and_by_options():
    A = actorrt.actor(max_restarts=-1, max_task_retries=-1)(Plain)
    assert A.default_options.max_task_retries == -1
    assert A.options(max_task_retries=2)._options.max_task_retries == 2
    with pytest.raises(ValueError, match="needs max_restarts"):
        A.options(max_restarts=0)  # its retries would never happen


def test_unknown_option_names_valid_ones():
    with pytest.raises(TypeError, match="unknown actor option.*'gpus'.*valid options are: label"):
        actorrt.actor(gpus=1)
    A = actorrt.actor(Plain)
    with pytest.raises(TypeError, match="'num_gpu'"):
        A.options(num_gpu=1)


def test_options_override_keeps_the_rest():
    A = actorrt.actor(label="collector", num_cpus=1)(Plain)
    bound = A.options(num_gpus=0.5)
    assert bound._options.label == "collector"
    assert bound._options.num_cpus == 1
    assert bound._options.num_gpus == 0.5


@pytest.mark.parametrize(
    ("decorated", "options", "assigned"),
    [
        # What Ray 2.60's get_assigned_resources() gives in such an actor (checked on
        # ray.init(num_cpus=2, num_gpus=1)): num_gpus given (even 0) without num_cpus runs
        # it on 1 CPU; nothing given, 0 CPUs.
        ({}, {}, {}),
        ({}, {"num_gpus": 0.25}, {"CPU": 1.0, "GPU": 0.25}),
        ({}, {"num_gpus": 1}, {"CPU": 1.0, "GPU": 1.0}),
        ({}, {"num_gpus": 0}, {"CPU": 1.0}),
        ({}, {"num_cpus": 0, "num_gpus": 0.25}, {"GPU": 0.25}),
        ({}, {"num_cpus": 0}, {}),
        ({}, {"num_cpus": 0.5}, {"CPU": 0.5}),
        ({}, {"num_cpus": 1, "num_gpus": 0.25}, {"CPU": 1.0, "GPU": 0.25}),
        ({"num_gpus": 0.25}, {}, {"CPU": 1.0, "GPU": 0.25}),  # @ray.remote(num_gpus=0.25)
        ({"num_gpus": 0.25}, {"num_cpus": 0}, {"GPU": 0.25}),  # then .options(num_cpus=0)
        ({"label": "learner"}, {}, {}),  # a label is no resource (Ray's resources= is)
    ],
)
def test_assigned_resources_of_an_actor_are_rays(decorated, options, assigned):
    A = actorrt.actor(**decorated)(Plain) if decorated else actorrt.actor(Plain)
    got = A.options(**options)._options.assigned_resources()
    assert got == assigned
    assert all(type(v) is float for v in got.values())


def test_the_cpu_ray_reports_for_num_gpus_alone_is_not_reserved():
    # A layout slot of {"num_gpus": 0.25} has no CPU: such an actor must still fit it.
    options = actorrt.ActorOptions(num_gpus=0.25)
    assert options.resources == Resources(num_cpus=0, num_gpus=0.25)
    assert actorrt.ActorOptions().resources == Resources()


def test_decorating_a_function_is_an_error():
    with pytest.raises(TypeError, match="decorates classes"):
        actorrt.actor(lambda: None)


def test_calling_the_remote_class_directly_is_an_error():
    A = actorrt.actor(Plain)
    with pytest.raises(TypeError, match=r"Plain.remote\(...\)"):
        A()
    assert A.cls(3).get() == 3


def test_remote_before_start_says_to_start():
    assert not actorrt.is_initialized()
    A = actorrt.actor(Plain)
    with pytest.raises(actorrt.NotInitializedError, match=r"call actorrt.start\(\) first"):
        A.remote()


def test_get_and_wait_validate_arguments():
    with pytest.raises(TypeError, match="expected an ObjectRef"):
        actorrt.get([1])
    with pytest.raises(TypeError):
        actorrt.get(42)
    ref = ObjectRef("x")
    with pytest.raises(ValueError, match="num_returns=2"):
        actorrt.wait([ref], num_returns=2)


def test_get_timeout_and_results_on_local_refs():
    pending = ObjectRef("slow")
    with pytest.raises(actorrt.GetTimeoutError, match="not ready after 0.05 s"):
        actorrt.get(pending, timeout=0.05)
    done = ObjectRef("done", cf.Future())
    done.future().set_result(5)
    assert actorrt.get([done], timeout=1) == [5]
    ready, not_ready = actorrt.wait([pending, done], num_returns=1, timeout=1)
    assert ready == [done] and not_ready == [pending]


def test_object_ref_cannot_be_pickled_inside_values():
    import pickle

    with pytest.raises(TypeError, match="cannot be pickled another way"):
        pickle.dumps({"r": ObjectRef("x")})


def test_actor_error_keeps_cause_and_traceback():
    import pickle

    err = actorrt.ActorError("Plain.get raised ValueError: x", ValueError("x"), "Traceback...")
    assert "Remote traceback" in str(err)
    again = pickle.loads(pickle.dumps(err))
    assert isinstance(again.cause, ValueError)
    assert again.remote_traceback == "Traceback..."


def test_num_returns_travels_in_the_method_table():
    from actorrt.actor_class import MethodTable, _method_specs

    class Two:
        @actorrt.method(num_returns=2)
        def pair(self, x):
            return x, x

        def one(self):
            return 1

        def values(self):  # a generator method streams its values by default (Ray's)
            yield 1

        async def async_values(self):
            yield 1

        @actorrt.method(num_returns=2)
        def two_values(self):
            yield from (1, 2)

        @actorrt.method(num_returns="streaming")
        def iterates(self):
            return iter([1])

        @actorrt.method(_generator_backpressure_num_objects=3)
        def paced(self):
            yield 1

    specs = _method_specs(Two)
    assert "pair#2:" in specs and "one:" in specs
    table = MethodTable(specs)
    assert table.returns == {
        "pair": 2,
        "values": "streaming",
        "async_values": "streaming",
        "two_values": 2,
        "iterates": "streaming",
        "paced": "streaming",
    }
    assert table.backpressure == {"paced": 3} and "paced#streaming/3" in specs
    assert set(table.names) == {
        "one",
        "pair",
        "values",
        "async_values",
        "two_values",
        "iterates",
        "paced",
    }
    table.check("Two", "pair", (1,), {})  # the signature is still checked
    with pytest.raises(TypeError):
        table.check("Two", "pair", (), {})


def test_a_methods_own_task_retries_travel_in_the_table_and_are_checked():
    from actorrt.actor_class import ActorHandle, MethodTable, _method_specs

    class Steps:
        @actorrt.method(max_task_retries=0)  # not idempotent: never sent again
        def apply(self, x):
            return x

        @actorrt.method(max_task_retries=-1, num_returns=2)
        def pair(self):
            return 1, 2

        def read(self):
            return 0

    specs = _method_specs(Steps)
    assert "apply!0:" in specs and "pair!-1#2:" in specs
    table = MethodTable(specs)
    assert table.retries == {"apply": 0, "pair": -1}
    assert table.returns == {"pair": 2}
    table.check("Steps", "apply", (1,), {})  # the signature is still checked
    with pytest.raises(TypeError):
        table.check("Steps", "apply", (), {})

    for bad, error in ((-2, ValueError), (True, TypeError), ("0", TypeError), (1.0, TypeError)):
        with pytest.raises(error, match="max_task_retries=.* must be an int >= 0"):
            actorrt.method(max_task_retries=bad)
    # A method asking for retries on an actor without: refused at decoration and options.
    with pytest.raises(ValueError, match="Steps.pair asks for max_task_retries=-1"):
        actorrt.actor(max_restarts=1)(Steps)
    A = actorrt.actor(max_restarts=1, max_task_retries=1)(Steps)  # 0 is fine anywhere
    with pytest.raises(ValueError, match="max_restarts=1, max_task_retries=-1"):
        A.options(max_task_retries=0)

    plain = ActorHandle("a" * 32, "w", "Steps", table, None, max_task_retries=0)
    retried = ActorHandle("a" * 32, "w", "Steps", table, None, max_task_retries=2)
    assert plain.read.options(max_task_retries=0)._retries == 0  # never sent again: as ever
    with pytest.raises(ValueError, match="made without max_task_retries"):
        plain.read.options(max_task_retries=1)
    assert retried.read.options(max_task_retries=-1)._retries == -1
    assert retried.pair.options(max_task_retries=0, num_returns=2)._method._retries == 0
    with pytest.raises(ValueError, match="must be an int >= 0"):
        retried.read.options(max_task_retries=-3)
    with pytest.raises(TypeError, match="must be an int >= 0"):
        retried.read.options(max_task_retries="x")


def test_num_returns_options_are_checked():
    from actorrt.actor_class import ActorMethod

    method = ActorMethod(None, "m")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=">= 0"):
        method.options(num_returns=-1)
    assert type(method.options(num_returns=0)).__name__ == "NoReturns"  # None, as Ray's
    with pytest.raises(TypeError, match="must be an int"):
        method.options(num_returns=True)
    with pytest.raises(TypeError, match="or 'streaming'"):
        method.options(num_returns="dynamic")  # Ray's deprecated form is not there
    assert type(method.options(num_returns="streaming")).__name__ == "StreamingReturns"


def _plain_function():
    return 1


def test_function_options_are_rays_and_fail_at_once():
    from actorrt.options import FunctionOptions

    default = FunctionOptions()
    # num_returns None: 1, or "streaming" for a generator function (RemoteFunction.remote)
    assert (default.num_cpus, default.num_gpus, default.num_returns) == (1.0, 0.0, None)
    assert FunctionOptions.from_kwargs({"num_returns": "streaming"}).num_returns == "streaming"
    assert (default.max_retries, default.retry_exceptions) == (3, False)
    listed = FunctionOptions.from_kwargs({"retry_exceptions": [KeyError, OSError]})
    assert listed.retry_exceptions == (KeyError, OSError)  # kept as a tuple: hashable
    for bad, error, message in [
        ({"num_gpus": 1.5}, ValueError, "fractions are only allowed below 1"),
        ({"num_cpus": "2"}, TypeError, "num_cpus='2' must be a number"),
        ({"num_gpus": -1}, ValueError, "num_gpus=-1 must be a number >= 0"),
        ({"label": "no spaces"}, ValueError, "is not a valid label"),
        ({"max_retries": -2}, ValueError, "max_retries=-2 must be an int >= 0"),
        ({"max_retries": "x"}, TypeError, "max_retries='x' must be an int"),
        ({"max_retries": 1.5}, TypeError, "max_retries=1.5 must be an int"),
        ({"num_returns": -1}, ValueError, "num_returns=-1 must be >= 0"),
        ({"num_returns": 1.5}, TypeError, "num_returns=1.5 must be an int"),
        ({"num_returns": "2"}, TypeError, "num_returns='2' must be an int"),
        ({"retry_exceptions": []}, ValueError, "must be True, False or a list of exception"),
        ({"retry_exceptions": [1]}, ValueError, "must be True, False or a list"),
        ({"retry_exceptions": "KeyError"}, TypeError, "must be True, False or a list"),
        ({"_generator_backpressure_num_objects": "x"}, TypeError, "must be an int >= 1"),
        ({"_generator_backpressure_num_objects": 0}, ValueError, "must be an int >= 1"),
    ]:
        # Ray 2.60's classes: TypeError for the wrong type, ValueError for a bad value.
        with pytest.raises(error, match=message) as raised:
            FunctionOptions.from_kwargs(bad)
        assert type(raised.value) is error
        with pytest.raises(error, match=message):
            actorrt.remote(**bad)(_plain_function)
        with pytest.raises(error, match=message):
            actorrt.remote(_plain_function).options(**bad)
    with pytest.raises(TypeError, match="unknown remote function option.*valid options are"):
        FunctionOptions.from_kwargs({"max_restarts": 1})


class _Retried(ConnectionError):
    pass


def test_a_methods_retry_exceptions_travel_in_the_table_by_name_and_are_checked():
    from actorrt.actor_class import ActorHandle, MethodTable, _method_specs

    class Service:
        @actorrt.method(retry_exceptions=True)
        def any_error(self):
            return 0

        @actorrt.method(retry_exceptions=[ConnectionError, _Retried], max_task_retries=2)
        def picky(self, x):
            return x

        def plain(self):
            return 0

    specs = _method_specs(Service)
    names = f"builtins.ConnectionError,{__name__}._Retried"
    assert "any_error?*:" in specs and f"picky?{names}!2:" in specs, specs
    table = MethodTable(specs)
    assert table.retry_on == {
        "any_error": True,
        "picky": ("builtins.ConnectionError", f"{__name__}._Retried"),
    }
    assert table.retries == {"picky": 2}
    table.check("Service", "picky", (1,), {})  # the signature is still checked
    with pytest.raises(TypeError):
        table.check("Service", "picky", (), {})

    for bad, error in (
        ([], ValueError),
        ([ValueError, "x"], ValueError),
        ("ValueError", TypeError),
        (1, TypeError),
        ([int], ValueError),
    ):
        with pytest.raises(error, match="retry_exceptions=.* must be True, False or a list"):
            actorrt.method(retry_exceptions=bad)
    # Its retries are the actor's max_task_retries: refused on an actor without.
    with pytest.raises(ValueError, match="Service.any_error asks for retry_exceptions"):
        actorrt.actor(max_restarts=1)(Service)
    A = actorrt.actor(max_restarts=1, max_task_retries=1)(Service)
    with pytest.raises(ValueError, match="Service.any_error asks for retry_exceptions"):
        A.options(max_task_retries=0)

    plain = ActorHandle("a" * 32, "w", "Service", table, None, max_task_retries=0)
    retried = ActorHandle("a" * 32, "w", "Service", table, None, max_task_retries=2)
    assert plain.plain.options(retry_exceptions=False)._retry_on is False
    with pytest.raises(ValueError, match="made without max_task_retries"):
        plain.plain.options(retry_exceptions=True)
    assert retried.plain.options(retry_exceptions=[ValueError])._retry_on == (
        "builtins.ValueError",
    )
    assert retried.plain._retry_on is None  # the method's own: read from the table per call
    with pytest.raises(TypeError, match="must be True, False or a list"):  # a class, no list
        retried.plain.options(retry_exceptions=ValueError)


def test_retry_exceptions_are_refused_on_streams():
    from actorrt.actor_class import ActorHandle, MethodTable, _method_specs

    for streaming in ({}, {"num_returns": "streaming"}):
        with pytest.raises(TypeError, match="retry_exceptions is not for streaming calls"):

            @actorrt.method(retry_exceptions=True, **streaming)
            def gen(self):
                yield 1

    class Ticker:
        def ticks(self):
            yield 1

        def many(self):
            return iter([1, 2])

    table = MethodTable(_method_specs(Ticker))
    handle = ActorHandle("a" * 32, "w", "Ticker", table, None, max_task_retries=2)
    with pytest.raises(TypeError, match="Ticker.ticks.options.*not for streaming calls"):
        handle.ticks.options(retry_exceptions=True)
    with pytest.raises(TypeError, match="Ticker.many.options.*not for streaming calls"):
        handle.many.options(num_returns="streaming", retry_exceptions=[ValueError])
    assert handle.ticks.options(retry_exceptions=False) is not None  # no retries: as ever

    # remote functions, as well: a generator, or num_returns="streaming"
    def ticks():
        yield 1

    def many():
        return iter([1, 2])

    with pytest.raises(TypeError, match="ticks: retry_exceptions is not for streaming calls"):
        actorrt.remote(retry_exceptions=True)(ticks)
    plain = actorrt.remote(retry_exceptions=[ValueError])(many)  # one value: retried as ever
    with pytest.raises(TypeError, match="many: retry_exceptions is not for streaming calls"):
        plain.options(num_returns="streaming")
    with pytest.raises(TypeError, match="ticks: retry_exceptions is not for streaming calls"):
        actorrt.remote(ticks).options(retry_exceptions=True)


@pytest.mark.parametrize(
    ("option", "hint"),
    [
        ("lifetime", "no detached actors"),
        ("namespace", "no namespaces"),
        ("resources", "label="),
        ("memory", "reserves no memory"),
    ],
)
def test_a_ray_option_actorrt_lacks_says_what_to_use_instead(option, hint):
    with pytest.raises(TypeError, match=f"unknown actor option.*{option!r}.*{hint}"):

        @actorrt.actor(**{option: "detached" if option == "lifetime" else 1})
        class Detached:
            pass


@pytest.mark.parametrize("name", ["_worker", "_actor_id", "_table", "_check_cluster"])
def test_a_method_named_like_a_handles_private_attribute_fails_at_decoration(name):
    cls = type("Clash", (), {name: lambda self: 1, "fine": lambda self: 2})
    with pytest.raises(ValueError, match=rf"Clash.{name}: a handle has an attribute .*rename"):
        actorrt.actor(cls)


def test_the_refused_names_are_the_handles_private_ones_and_it_has_no_public_one():
    from actorrt.actor_class import ActorHandle, _handles_own

    assert {"_worker", "_actor_id", "_class_name", "_moves", "_table"} <= _handles_own()
    assert not {n for n in _handles_own() if not n.startswith("_") or n.startswith("__")}
    # What a handle tells under public names is answered after the methods (__getattr__):
    # a public class attribute would hide a method of its name again.
    assert not {n for n in dir(ActorHandle) if not n.startswith("_")}


def test_rays_namespace_arguments_say_actorrt_has_none():
    with pytest.raises(TypeError, match="actorrt has no namespaces.*Drop namespace="):
        actorrt.get_actor("x", namespace=3)
    with pytest.raises(TypeError, match="actorrt has no namespaces.*Drop all_namespaces="):
        actorrt.list_named_actors(all_namespaces=True)
    with pytest.raises(actorrt.NotInitializedError):  # the defaults are taken
        actorrt.get_actor("x", namespace=None)


def test_a_users_base_exception_gives_an_error_of_its_class_and_pythons_do_not():
    from actorrt.errors import actor_error

    class Halt(BaseException):
        pass

    error = actor_error("A.m raised Halt", Halt("x"), "tb")
    assert isinstance(error, Halt) and isinstance(error, actorrt.ActorError)
    for cause in (KeyboardInterrupt(), SystemExit(1), GeneratorExit()):
        error = actor_error("A.m raised", cause, "tb")
        assert type(error) is actorrt.ActorError and error.cause is cause
