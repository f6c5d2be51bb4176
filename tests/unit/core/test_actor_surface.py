"""The Ray surface of ActorClass and ActorHandle, checked without a cluster.

Arguments that cannot bind fail with TypeError at ``.remote()``; arguments that bind get
as far as the runtime, which is missing here (NotInitializedError).
"""

import inspect
import pickle
import subprocess
import sys
import textwrap
import threading
from dataclasses import replace
from pathlib import Path

import cloudpickle
import pytest

import actorrt
from actorrt.actor_class import ActorHandle
from actorrt.options import ActorOptions
from actorrt.placement import Layout, ProcessInfo, make_plan
from actorrt.runtime.directory import ClusterDirectory
from actorrt.runtime.protocol import ActorRecord

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "placement"))
from placement_testlib import node  # noqa: E402


class Base:
    KIND = "base"

    def base_method(self, x):
        return x


class Plain(Base):
    LIMIT = 3

    def __init__(self, a, b=0, *, c=1):
        self.a = a

    def one(self, x):
        return x

    def opt(self, x=0, y=1):
        return x + y

    def var(self, *args, **kwargs):
        return args, kwargs

    def kw_only(self, *, k, j=0):
        return k

    def pos_only(self, p, /, q=0):
        return p

    def pos_only_and_kwargs(self, p, /, **kw):
        return p, kw

    async def aone(self, x):
        return x

    @staticmethod
    def static_add(x, y):
        return x + y

    @classmethod
    def class_limit(cls, extra=0):
        return cls.LIMIT + extra


P = actorrt.actor(Plain)


def _handle(actor_class=P):
    return ActorHandle("0" * 32, "w1", actor_class.__name__, actor_class._table, None)


def _binds(fn, args, kwargs):
    try:
        inspect.signature(fn).bind(*args, **kwargs)
    except TypeError:
        return False
    return True


CALLS = [
    ((), {}),
    ((1,), {}),
    ((1, 2), {}),
    ((1, 2, 3), {}),
    ((), {"x": 1}),
    ((1,), {"x": 1}),
    ((), {"y": 2}),
    ((), {"k": 1}),
    ((), {"k": 1, "j": 2}),
    ((1,), {"k": 1}),
    ((), {"p": 1}),
    ((1,), {"p": 1}),
    ((1,), {"q": 2}),
    ((1, 2), {"q": 2}),
    ((), {"zzz": 1}),
]


@pytest.mark.parametrize(
    "method", ["one", "opt", "var", "kw_only", "pos_only", "pos_only_and_kwargs", "aone"]
)
@pytest.mark.parametrize("args, kwargs", CALLS)
def test_method_arguments_are_checked_at_the_call_site_as_python_binds_them(method, args, kwargs):
    h = _handle()
    bound_method = getattr(Plain(0), method)  # Python's own verdict, self already bound
    if _binds(bound_method, args, kwargs):
        with pytest.raises(actorrt.NotInitializedError):
            getattr(h, method).remote(*args, **kwargs)
    else:
        with pytest.raises(TypeError, match=rf"Plain\.{method}\.remote\(\): .*\(the signature"):
            getattr(h, method).remote(*args, **kwargs)


@pytest.mark.parametrize("args, kwargs", CALLS)
def test_static_and_class_methods_have_no_self_to_bind(args, kwargs):
    h = _handle()
    for name in ("static_add", "class_limit"):
        if _binds(getattr(Plain, name), args, kwargs):
            with pytest.raises(actorrt.NotInitializedError):
                getattr(h, name).remote(*args, **kwargs)
        else:
            with pytest.raises(TypeError, match=rf"Plain\.{name}\.remote\(\)"):
                getattr(h, name).remote(*args, **kwargs)


def test_constructor_arguments_are_checked_before_anything_else():
    with pytest.raises(TypeError, match=r"Plain\.remote\(\): missing a required argument: 'a'"):
        P.remote()
    with pytest.raises(TypeError, match="too many positional arguments"):
        P.remote(1, 2, 3)
    with pytest.raises(TypeError, match="unexpected keyword argument 'd'"):
        P.options(num_cpus=1).remote(1, d=4)
    with pytest.raises(TypeError, match="multiple values for argument 'a'"):
        P.remote(1, a=2)
    for args, kwargs in [((1,), {}), ((1, 2), {"c": 3}), ((), {"a": 1})]:
        with pytest.raises(actorrt.NotInitializedError):
            P.remote(*args, **kwargs)


def test_a_class_without_init_takes_no_arguments():
    class Bare:
        def ping(self):
            return "pong"

    B = actorrt.actor(Bare)
    with pytest.raises(TypeError, match="too many positional arguments"):
        B.remote(1)
    with pytest.raises(actorrt.NotInitializedError):
        B.remote()


def test_builtins_are_checked_as_far_as_inspect_reads_them():
    class FromBuiltins:
        length = len  # a builtin function binds no self: (obj, /)
        lookup = dict.get  # a method descriptor binds one: (self, key, default=None, /)
        keys = dict.keys  # inspect cannot read this one: calls to it go unchecked

    h = _handle(actorrt.actor(FromBuiltins))
    with pytest.raises(TypeError, match="too many positional"):
        h.length.remote(1, 2)
    with pytest.raises(TypeError, match="missing a required argument: 'key'"):
        h.lookup.remote()
    for method, args in [("length", (1,)), ("lookup", (1, 2)), ("keys", (1, 2, 3))]:
        with pytest.raises(actorrt.NotInitializedError):
            getattr(h, method).remote(*args)


def test_a_pickled_handle_checks_too_and_shares_its_class_table():
    h = _handle()
    again = pickle.loads(pickle.dumps(h))
    assert again == h and again.methods == h.methods
    assert again._table is P._table  # one table per class in a process, however it came
    with pytest.raises(TypeError, match=r"Plain\.one\.remote\(\)"):
        again.one.remote(1, 2)
    again2 = cloudpickle.loads(cloudpickle.dumps(h))
    with pytest.raises(TypeError, match="unexpected keyword argument"):
        again2.kw_only.remote(k=1, z=1)


def test_handle_pickles_stay_small():
    h = _handle()
    one = len(pickle.dumps(h))
    assert one < 600, one
    # a batch of handles of one class carries the table once
    ten = len(pickle.dumps([_handle() for _ in range(10)]))
    assert ten < one + 9 * 80, (one, ten)


def test_handle_init_remote_says_constructors_are_not_methods():
    h = _handle()
    with pytest.raises(TypeError, match=r"constructors cannot be called as methods.*Cls\.remote"):
        h.__init__.remote()
    with pytest.raises(TypeError, match="constructors cannot be called as methods"):
        h.__init__.remote(1, x=2)
    assert h.actor_id == "0" * 32  # the handle's own construction still works


def test_the_original_class_surface_is_reachable_through_the_actor_class():
    assert P.LIMIT == 3 and P.KIND == "base"
    assert P.static_add(2, 3) == 5
    assert P.class_limit(1) == 4
    assert P.mro() == Plain.mro() and P.__mro__ == Plain.__mro__
    assert P.__qualname__ == "Plain" and P.__name__ == "Plain"
    assert P.__module__ == Plain.__module__ and P.__doc__ == Plain.__doc__
    assert P.one is Plain.one
    with pytest.raises(AttributeError, match="nothing_here"):
        P.nothing_here  # noqa: B018
    with pytest.raises(AttributeError):
        P.__deepcopy__  # noqa: B018  (dunders of the class are not delegated)
    # ActorClass's own names win over the class's
    assert P.options(num_cpus=1).remote is not None


def test_dir_lists_the_actor_methods():
    expected = {
        "one",
        "opt",
        "var",
        "kw_only",
        "aone",
        "base_method",
        "static_add",
        "class_limit",
    }
    assert expected <= set(dir(P))
    assert {"remote", "options", "LIMIT", "KIND"} <= set(dir(P))
    assert expected <= set(dir(_handle()))
    assert {"actor_id", "worker", "methods"} <= set(dir(_handle()))


def test_get_if_exists_needs_a_name_and_a_bool():
    with pytest.raises(ValueError, match="get_if_exists=True needs a name"):
        actorrt.actor(get_if_exists=True)
    with pytest.raises(ValueError, match="get_if_exists=True needs a name"):
        P.options(get_if_exists=True)
    with pytest.raises(TypeError, match="get_if_exists='yes' must be True or False"):
        P.options(name="x", get_if_exists="yes")
    bound = P.options(name="x", get_if_exists=True)
    assert bound._options == ActorOptions(name="x", get_if_exists=True)
    assert actorrt.actor(name="y", get_if_exists=True)(Plain).default_options.get_if_exists


def _directory():
    driver = replace(node("a"), hosts_actors=False)
    ps = [ProcessInfo(0, "driver", driver), ProcessInfo(1, "w1", node("a"))]
    return ClusterDirectory(make_plan(ps, Layout()), ps)


def _H(actor_id: str) -> ActorRecord:
    return ActorRecord(actor_id, "worker1", "A", "")


def test_the_directory_registers_a_name_or_returns_the_actor_under_it():
    d = _directory()
    first, second = _H("1"), _H("2")
    d.place("1", ActorOptions(name="svc"), "A")
    assert d.register_name("svc", first, True, "m.A") is None
    assert d.register_name("svc", second, True, "m.A") is first
    with pytest.raises(ValueError, match="already exists; pick another name"):
        d.register_name("svc", second, False, "m.A")
    with pytest.raises(ValueError, match="'svc' already exists and is a m.A, not a m.B"):
        d.register_name("svc", second, True, "m.B")
    assert d.lookup("svc") is first and d.lookup("svc", "m.A") is first
    with pytest.raises(ValueError, match="is a m.A, not a m.B"):
        d.lookup("svc", "m.B")
    assert d.lookup("other", "m.B") is None
    d.release("1")
    assert d.lookup("svc") is None
    assert d.register_name("svc", second, True, "m.B") is None


def test_concurrent_get_or_create_registers_one_actor():
    d = _directory()
    got = {}
    start = threading.Barrier(8)

    def create(i):
        start.wait()
        got[i] = d.register_name("race", _H(str(i)), True, "m.A")

    threads = [threading.Thread(target=create, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    winners = [i for i, found in got.items() if found is None]
    assert len(got) == 8 and len(winners) == 1
    assert {found.actor_id for found in got.values() if found is not None} == {str(winners[0])}


def _make_self_spawning():
    # A class defined in a function is shipped by value, as a class of __main__ is.
    @actorrt.actor
    class SelfSpawning:
        def spawn_names(self):
            return SelfSpawning._methods

        def ping(self):
            return "pong"

    return SelfSpawning


def test_a_class_rebuilt_by_value_elsewhere_keeps_its_methods(tmp_path):
    # cloudpickle rebuilds SelfSpawning in two steps (an empty class, then its methods),
    # and the ActorClass its method refers to is made in between. A fresh interpreter is
    # needed: in this one cloudpickle hands back the original class.
    blob = cloudpickle.dumps(_make_self_spawning())
    (tmp_path / "cls.pkl").write_bytes(blob)
    code = textwrap.dedent(
        """
        import sys, cloudpickle
        A = cloudpickle.loads(open(sys.argv[1], "rb").read())
        print(A._methods, A.cls.spawn_names(None))
        """
    )
    root = Path(__file__).resolve().parents[3]
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "cls.pkl")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=root,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["('ping',", "'spawn_names')"] * 2, out.stdout


@pytest.mark.parametrize("make", ["plain", "grouped", "returns", "stream"])
def test_a_calls_task_name_travels_with_its_name(make):
    from actorrt.runtime.generators import Stream
    from actorrt.runtime.protocol import Returns, call_name, task_name

    if make == "plain":
        name = call_name("step", task="step-7")
    elif make == "grouped":
        name = call_name("step", "io", "step-7")
    elif make == "returns":
        name = Returns("step", 2, "io")
        name.task = "step-7"
    else:
        name = Stream("step", 3, 1, None)
        name.task = "step-7"
    again = pickle.loads(pickle.dumps(name))
    assert (type(again), str(again), task_name(again)) == (type(name), "step", "step-7")
    assert again.group == name.group
    assert task_name("step") is None and call_name("step") == "step"
    assert type(call_name("step")) is str  # a plain call stays a plain str (the fast path)
