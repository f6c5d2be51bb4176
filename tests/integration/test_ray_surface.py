"""Ray's actor surface on the shared local cluster: argument checks at the call site,
handles made on workers, get-or-create of named actors."""

import threading

import pytest

import actorrt

pytestmark = pytest.mark.timeout(180)


@actorrt.actor
class Tally:
    def __init__(self, start, *, step=1):
        self.n = start
        self.step = step

    def add(self, k=None):
        self.n += self.step if k is None else k
        return self.n

    def value(self):
        return self.n

    @staticmethod
    def double(x):
        return 2 * x


@actorrt.actor
class Other:
    def value(self):
        return "other"


@actorrt.actor
class NeverPlaced:
    def __init__(self, x):
        self.x = x


@actorrt.actor
class Prober:
    def bad_call(self, tally):
        # a handle that came as an argument checks arguments on this process too
        try:
            tally.add.remote(1, 2)
        except TypeError as exc:
            return f"TypeError: {exc}"
        return "sent"

    def named(self):
        return actorrt.list_named_actors()

    def echo(self, value):
        return value

    def named_bad_call(self, name):
        try:
            actorrt.get_actor(name).value.remote(1)
        except TypeError as exc:
            return f"TypeError: {exc}"
        return "sent"

    def get_or_create(self, name, start):
        h = Tally.options(name=name, get_if_exists=True).remote(start)
        return h.actor_id, actorrt.get(h.add.remote(), timeout=60)


def _make_breeder():
    # Defined in a function, the class is shipped by value (as a class of __main__ is):
    # on the worker cloudpickle rebuilds it, and Breeder.remote() below runs there.
    @actorrt.actor
    class Breeder:
        def __init__(self, generation=0):
            self.generation = generation

        def breed(self):
            child = Breeder.remote(self.generation + 1)
            return child, sorted(child.methods), actorrt.get(child.whoami.remote(), timeout=60)

        def whoami(self):
            return self.generation

    return Breeder


def test_bad_constructor_arguments_fail_at_the_call_site_and_place_nothing(cluster):
    with pytest.raises(TypeError, match=r"NeverPlaced\.remote\(\): missing a required argument"):
        NeverPlaced.remote()
    with pytest.raises(TypeError, match="unexpected keyword argument 'y'"):
        NeverPlaced.options(num_cpus=0).remote(1, y=2)
    assert not [a for a in actorrt.actors() if a.class_name == "NeverPlaced"]


def test_bad_method_arguments_fail_at_the_call_site(cluster):
    t = Tally.remote(0, step=2)
    with pytest.raises(TypeError, match=r"Tally\.add\.remote\(\): too many positional arguments"):
        t.add.remote(1, 2)
    with pytest.raises(TypeError, match="unexpected keyword argument 'x'"):
        t.value.remote(x=1)
    with pytest.raises(TypeError, match="missing a required argument: 'x'"):
        t.double.remote()
    # the failed calls took no sequence number: later calls run, in order
    assert actorrt.get([t.add.remote(), t.add.remote(k=5), t.double.remote(4)], timeout=60) == [
        2,
        7,
        8,
    ]


def test_handles_on_other_processes_check_arguments_too(cluster):
    t = Tally.options(name="surface-tally").remote(0)
    p = Prober.remote()
    try:
        said = actorrt.get(p.bad_call.remote(t), timeout=60)
        assert said.startswith("TypeError: Tally.add.remote(): too many positional"), said
        said = actorrt.get(p.named_bad_call.remote("surface-tally"), timeout=60)
        assert said.startswith("TypeError: Tally.value.remote(): too many positional"), said
        h = actorrt.get_actor("surface-tally")
        with pytest.raises(TypeError, match="too many positional"):
            h.add.remote(1, 2)
        assert {"add", "value", "double"} <= set(dir(h))
        assert actorrt.get(h.add.remote(), timeout=60) == 1
    finally:
        actorrt.kill(t)


def test_an_actor_creating_an_actor_of_its_own_class_gets_a_full_handle(cluster):
    breeder = _make_breeder()
    parent = breeder.remote()
    child, names, generation = actorrt.get(parent.breed.remote(), timeout=60)
    assert names == ["breed", "whoami"]
    assert generation == 1
    assert actorrt.get(child.whoami.remote(), timeout=60) == 1
    grandchild, _, generation = actorrt.get(child.breed.remote(), timeout=60)
    assert generation == 2 and actorrt.get(grandchild.whoami.remote(), timeout=60) == 2


@actorrt.actor
class Policy:
    def __call__(self, obs):
        return obs * 2

    def __len__(self):
        return 3

    def __del__(self):  # Python's hook: never called remotely
        pass


def test_the_classs_own_dunder_methods_are_called_remotely_as_in_ray(cluster):
    p = Policy.remote()
    assert actorrt.get(p.__call__.remote(21), timeout=30) == 42
    assert actorrt.get(p.__len__.remote(), timeout=30) == 3
    assert {"__call__", "__len__"} <= set(p.methods) and "__del__" not in p.methods
    assert not hasattr(p, "__del__") and not hasattr(p, "__getitem__")  # probes: no method
    assert repr(p).startswith("ActorHandle(Policy")  # the handle's own stay its own


def test_handle_init_remote_is_an_error(cluster):
    t = Tally.remote(0)
    with pytest.raises(TypeError, match="constructors cannot be called as methods"):
        t.__init__.remote(5)
    assert actorrt.get(t.value.remote(), timeout=60) == 0


def test_get_if_exists_returns_the_existing_actor(cluster):
    first = Tally.options(name="surface-goc", get_if_exists=True).remote(10)
    try:
        again = Tally.options(name="surface-goc", get_if_exists=True).remote(99)
        assert again == first  # the constructor arguments of a later call are ignored
        assert actorrt.get(again.add.remote(), timeout=60) == 11
        with pytest.raises(ValueError, match="already exists"):
            Tally.options(name="surface-goc").remote(0)
        with pytest.raises(ValueError, match=r"surface-goc.*is a .*Tally, not a .*Other"):
            Other.options(name="surface-goc", get_if_exists=True).remote()
        assert actorrt.get(first.value.remote(), timeout=60) == 11
    finally:
        actorrt.kill(first)


def test_list_named_actors_gives_the_live_names_from_anywhere(cluster):
    a = Tally.options(name="surface-list-a").remote(0)
    b = Other.options(name="surface-list-b").remote()
    unnamed, prober = Tally.remote(0), Prober.remote()
    try:
        names = actorrt.list_named_actors()
        assert {"surface-list-a", "surface-list-b"} <= set(names), names
        assert names == sorted(names) and all(isinstance(n, str) for n in names), names
        assert actorrt.get(prober.named.remote(), timeout=60) == names  # from an actor
        actorrt.kill(a)
        assert "surface-list-a" not in actorrt.list_named_actors()
        assert actorrt.get(unnamed.value.remote(), timeout=60) == 0
    finally:
        for h in (a, b):
            actorrt.kill(h)


def test_get_if_exists_is_atomic_across_concurrent_creators(cluster):
    name = "surface-race"
    probers = [Prober.remote() for _ in range(3)]
    handles, errors = [], []

    def create():
        try:
            handles.append(Tally.options(name=name, get_if_exists=True).remote(0))
        except Exception as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=create) for _ in range(6)]
    remote = [p.get_or_create.remote(name, 0) for p in probers]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    from_actors = actorrt.get(remote, timeout=60)
    try:
        assert not errors, errors
        ids = {h.actor_id for h in handles} | {actor_id for actor_id, _ in from_actors}
        assert len(ids) == 1, ids
        assert sorted(n for _, n in from_actors) == [1, 2, 3]  # one actor counted them all
        assert actorrt.get(handles[0].value.remote(), timeout=60) == 3
        assert [a.name for a in actorrt.actors() if a.name == name] == [name]
    finally:
        actorrt.kill(actorrt.get_actor(name))


class Halt(BaseException):  # a user's own BaseException, not an Exception
    pass


@actorrt.actor
class Halter:
    def halt(self):
        raise Halt("stop here")

    def value(self):
        return 1


def test_a_users_own_base_exception_is_caught_by_its_class_as_in_ray(cluster):
    h = Halter.remote()
    with pytest.raises(Halt) as caught:
        actorrt.get(h.halt.remote(), timeout=60)
    assert isinstance(caught.value, actorrt.ActorError) and "stop here" in str(caught.value)
    assert isinstance(caught.value, Exception)  # `except Exception` catches it still
    assert actorrt.get(h.value.remote(), timeout=60) == 1  # the actor stays usable


def test_a_remote_class_derived_from_a_remote_class_has_both_methods(cluster):
    @actorrt.actor
    class TallyPlus(Tally):  # derived from a remote class: from its plain class
        def twice(self):
            return self.add() + self.add()

    t = TallyPlus.remote(1, step=2)
    assert actorrt.get(t.twice.remote(), timeout=60) == 3 + 5
    assert actorrt.get(t.value.remote(), timeout=60) == 5
    assert TallyPlus.cls.__mro__[1] is Tally.cls


def test_a_deep_copy_of_a_value_holding_a_handle_and_a_ref_holds_them(cluster):
    import copy

    t = Tally.remote(0)
    ref = t.add.remote(4)
    config = {"lr": 1e-3, "tally": t, "first": ref}
    for copied in (copy.deepcopy(config), copy.copy(config)):
        assert copied["tally"] is t and copied["first"] is ref
    assert actorrt.get(copy.deepcopy(config)["tally"].add.remote(1), timeout=60) == 5


@actorrt.actor
class Named:
    """Methods named like what a handle tells of its actor: as on a Ray handle, they win."""

    def worker(self):
        return "worker()"

    def actor_id(self, x):
        return x + 1

    def methods(self):
        return ["mine"]

    def class_name(self):
        return "mine"


def test_methods_named_like_a_handles_public_attributes_are_called(cluster):
    named = Named.remote()
    assert actorrt.get(named.worker.remote(), timeout=60) == "worker()"
    assert actorrt.get(named.actor_id.remote(1), timeout=60) == 2
    assert actorrt.get(named.methods.remote(), timeout=60) == ["mine"]
    assert actorrt.get(named.class_name.remote(), timeout=60) == "mine"
    # The handle still works as a handle: it travels, and compares by its actor's id.
    assert actorrt.get(Prober.remote().echo.remote(named), timeout=60) == named
    # An actor without such methods: the handle tells them.
    tally = Tally.remote(0)
    assert tally.class_name == "Tally"
    assert sorted(tally.methods) == ["add", "double", "value"]
    assert len(tally.actor_id) == 32 and tally.actor_id in repr(tally)
    assert tally.worker in repr(tally)
    assert (tally.max_task_retries, tally.max_pending_calls) == (0, -1)


def test_get_actor_takes_the_clusters_own_namespace_as_ray_code_passes_it(cluster):
    """Ray code looks actors up with ``get_actor(name, namespace=ctx.namespace)``: that
    namespace (the cluster's id) is taken (was: TypeError for any namespace); another is
    not found, as in Ray, and the error says which one there is."""
    a = Tally.options(name="surface-namespace").remote(5)
    try:
        ours = actorrt.get_runtime_context().namespace
        assert isinstance(ours, str) and ours
        found = actorrt.get_actor("surface-namespace", namespace=ours)
        assert actorrt.get(found.value.remote(), timeout=60) == 5
        with pytest.raises(ValueError, match=f"no actor is in that namespace.*{ours}"):
            actorrt.get_actor("surface-namespace", namespace="elsewhere")
    finally:
        actorrt.kill(a)
