"""ActorError as Ray's RayTaskError: also an instance of the class the method raised."""

import pickle

import cloudpickle
import pytest

import actorrt
from actorrt.errors import ActorError, actor_error


class EnvResetError(Exception):
    """A user's error whose __init__ takes other arguments than its message."""

    def __init__(self, code, why):
        super().__init__(code, why)
        self.code = code


def _raised(cause, what="Env.reset"):
    return actor_error(f"{what} raised {type(cause).__name__}", cause, "Traceback ...", "a1")


def test_the_error_is_also_of_the_class_the_method_raised():
    cause = EnvResetError(3, "emulator died")
    error = _raised(cause)
    assert isinstance(error, EnvResetError) and isinstance(error, ActorError)
    assert type(error).__name__ == "ActorError(EnvResetError)"
    assert error.cause is cause and error.actor_id == "a1"
    assert error.code == 3  # the cause's own attributes
    assert str(error).startswith("Env.reset raised EnvResetError\n\nRemote traceback:")
    with pytest.raises(EnvResetError):
        raise error
    key = _raised(KeyError("x"))
    assert isinstance(key, KeyError) and str(key).startswith("Env.reset raised KeyError")
    assert type(_raised(KeyError("y"))) is type(key)  # one class per class of cause


def test_an_os_error_keeps_its_fields():
    error = _raised(FileNotFoundError(2, "No such file", "/data/rom"))
    assert isinstance(error, FileNotFoundError)
    assert (error.errno, error.strerror, error.filename) == (2, "No such file", "/data/rom")


def test_an_error_let_through_by_a_method_keeps_the_first_class():
    inner = _raised(KeyError("x"), "Replay.sample")
    outer = _raised(inner, "Learner.step")
    assert isinstance(outer, KeyError) and outer.cause is inner
    assert type(outer) is type(inner)


@pytest.mark.parametrize(
    "cause",
    [actorrt.ObjectLostError("gone"), KeyboardInterrupt(), None],
    ids=["actorrt's own", "not an Exception", "did not travel"],
)
def test_otherwise_a_plain_actor_error(cause):
    error = actor_error("Env.reset raised", cause, "Traceback ...")
    assert type(error) is ActorError and error.cause is cause


@pytest.mark.parametrize("dumps", [pickle.dumps, cloudpickle.dumps])
def test_it_pickles_to_the_same_class_and_fields(dumps):
    error = _raised(EnvResetError(3, "emulator died"))
    back = pickle.loads(dumps(error))
    assert type(back) is type(error) and isinstance(back, EnvResetError)
    assert (back.code, back.actor_id, back.remote_traceback) == (3, "a1", "Traceback ...")
    assert str(back) == str(error)


def test_a_call_whose_process_is_unreachable_says_how_an_actor_goes_on():
    """An actor's call says later calls reach its new instance if it restarts (it told
    every caller to create a new actor, also of actors that come back by themselves); a
    remote function's says nothing of actors."""
    from actorrt.runtime.protocol import rpc_failure

    reset = RuntimeError("ECONNRESET: connection reset by peer")
    of_actor = rpc_failure("A.step", "worker1", reset, "a1")
    assert isinstance(of_actor, actorrt.ActorDiedError) and of_actor.actor_id == "a1"
    assert "'worker1' is unreachable (ECONNRESET" in str(of_actor)
    assert "new instance if it was made with max_restarts" in str(of_actor), of_actor
    of_function = rpc_failure("f", "worker1", reset)
    assert isinstance(of_function, actorrt.ActorDiedError)
    assert str(of_function).endswith("it probably died."), of_function
