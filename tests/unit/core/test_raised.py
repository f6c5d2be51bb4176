"""What a reply raised, and which ``retry_exceptions`` retry it (``runtime/raised.py``)."""

import torch

from actorrt.runtime.payload import pack
from actorrt.runtime.protocol import OK, error_reply
from actorrt.runtime.raised import error_of, exception_names, fails, retried


class Flaky(ConnectionError):
    pass


class Unpicklable(Exception):
    def __reduce__(self):
        raise TypeError("not this one")


class NotMadeAgain(Exception):
    """Pickles, but unpickling calls __init__ with its args (one string): it fails."""

    def __init__(self, code, msg):
        super().__init__(f"code {code}: {msg}")


UNPACKED = []


def _record():
    UNPACKED.append(1)
    return "made"


class Recorded:
    """Unpickling it is seen: proves whether a reply was unpacked."""

    def __reduce__(self):
        return (_record, ())


def test_an_error_is_matched_by_the_names_along_its_class_hierarchy():
    wire = pack(error_reply("A.m", Flaky("down")))
    failed, cause = error_of(wire)
    assert failed and isinstance(cause, Flaky)
    assert retried(wire, True)
    assert retried(wire, exception_names((Flaky,)))
    assert retried(wire, exception_names((ConnectionError,)))  # a base class's name
    assert retried(wire, exception_names((OSError,)))
    assert not retried(wire, exception_names((ValueError,)))
    assert not retried(wire, False)
    assert exception_names((Flaky,)) == (f"{__name__}.Flaky",)


def test_an_exception_that_did_not_pickle_is_retried_only_by_true():
    wire = pack(error_reply("A.m", Unpicklable("x")))
    assert error_of(wire) == (True, None)
    assert retried(wire, True)
    assert not retried(wire, exception_names((Unpicklable,)))


def test_an_exception_that_pickles_but_cannot_be_made_again_reaches_the_caller_as_text():
    from actorrt.errors import ActorError
    from actorrt.runtime.payload import unpack
    from actorrt.runtime.protocol import decode_reply

    wire = pack(error_reply("A.m", NotMadeAgain(7, "disk full")))
    assert error_of(wire) == (True, None)
    try:
        decode_reply(unpack(wire))
    except ActorError as error:
        assert "code 7: disk full" in str(error)
        assert "NotMadeAgain" in error.remote_traceback
        assert error.cause is None
    else:
        raise AssertionError("an error reply decoded as a value")


def test_a_values_reply_is_not_unpacked_to_read_its_status():
    UNPACKED.clear()
    for value in (Recorded(), [Recorded(), torch.ones(2)], {"t": torch.zeros(3), "r": Recorded()}):
        wire = pack((OK, value))
        assert wire[0] is not None  # pickled: the status is read from its first opcodes
        assert error_of(wire) == (False, None)
        assert not retried(wire, True)
    assert UNPACKED == []
    for plain in ((OK, 3), (OK, "text"), (OK, torch.ones(2))):
        assert error_of(pack(plain)) == (False, None)
    assert error_of(pack(error_reply("A.m", ValueError("v"))))[0]


def test_a_failing_reply_is_told_from_its_status_alone():
    from actorrt.runtime.protocol import cancelled_reply, died_reply

    UNPACKED.clear()
    assert fails(pack(error_reply("A.m", ValueError("v"))))
    assert fails(pack(died_reply("it died")))
    assert fails(pack(cancelled_reply("A.m", "before it ran")))
    assert not fails(pack((OK, 3)))
    assert not fails(pack((OK, [Recorded(), torch.ones(2)])))
    assert UNPACKED == []  # a value is not unpacked to say so


def test_a_functions_sys_exit_is_never_retried():
    from actorrt.runtime.raised import ExitRefused

    wire = pack(error_reply("f", ExitRefused("f called sys.exit(3)")))
    assert fails(wire) and error_of(wire)[0]
    assert not retried(wire, True)
    assert not retried(wire, exception_names((RuntimeError,)))
    assert retried(pack(error_reply("f", RuntimeError("x"))), True)
