"""A method's error whose ref went without get is logged at the caller, as Ray's
"Unhandled error": a call made only for its effect must not fail unseen."""

import gc
import logging
import time

import pytest

import actorrt
from actorrt.runtime.objects import IGNORE_UNHANDLED

pytestmark = pytest.mark.timeout(120)


@actorrt.actor
class Faulty:
    def boom(self, tag, delay=0.0):
        time.sleep(delay)
        raise ValueError(f"boom {tag}")

    def pair(self, tag):
        raise ValueError(f"pair {tag}")

    def fine(self):
        return 1

    def echo(self, value):
        return value


def _logged(caplog, tag, timeout=15.0):
    """The unhandled-error records naming ``tag``, once one came (or after ``timeout``)."""
    deadline = time.monotonic() + timeout
    while True:
        gc.collect()
        found = [r for r in caplog.records if "unhandled error" in r.getMessage()]
        found = [r for r in found if tag in r.getMessage()]
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def test_an_error_whose_ref_went_unread_is_logged_once(cluster, caplog):
    faulty = Faulty.remote()
    caplog.set_level(logging.ERROR, logger="actorrt")
    ref = faulty.boom.remote("answered")
    actorrt.wait([ref], timeout=30)  # its reply came, and nobody read it
    del ref
    (record,) = _logged(caplog, "boom answered")
    text = record.getMessage()
    assert (
        "Faulty actor " in text and ".boom raised" in text and "ValueError: boom answered" in text
    )
    assert "Traceback" in text and IGNORE_UNHANDLED in text

    faulty.boom.remote("pending", 0.5)  # dropped at once: logged when its reply comes
    assert len(_logged(caplog, "boom pending")) == 1

    refs = faulty.pair.options(num_returns=2).remote("twice")
    del refs  # two refs, one error: one record
    assert len(_logged(caplog, "pair twice")) == 1
    time.sleep(0.5)
    assert len(_logged(caplog, "pair twice", timeout=0)) == 1


def test_an_error_that_was_read_or_went_on_in_a_call_is_not_logged(cluster, caplog):
    faulty = Faulty.remote()
    caplog.set_level(logging.ERROR, logger="actorrt")
    read = [faulty.boom.remote(f"read {i}") for i in range(3)]
    actorrt.wait(read, num_returns=3, timeout=30)  # here before get: read directly
    for i, timeout in enumerate([None, 10]):
        with pytest.raises(actorrt.ActorError, match=f"boom read {i}"):
            actorrt.get(read[i], timeout=timeout)
    with pytest.raises(actorrt.ActorError, match="boom read 2"):
        actorrt.get(faulty.echo.remote(read[2]), timeout=30)  # it went on in that call
    del read
    faulty.fine.remote()  # a value
    # a later unread error is logged: by then the ones read would have been too
    faulty.boom.remote("after")
    assert _logged(caplog, "boom after")
    assert not _logged(caplog, "boom read", timeout=0)


def test_the_log_can_be_turned_off_as_rays(cluster, caplog, monkeypatch):
    faulty = Faulty.remote()
    caplog.set_level(logging.ERROR, logger="actorrt")
    monkeypatch.setenv(IGNORE_UNHANDLED, "1")
    faulty.boom.remote("hidden")
    actorrt.get(faulty.fine.remote(), timeout=30)  # the error came before this answer
    assert not _logged(caplog, "boom hidden", timeout=2)
