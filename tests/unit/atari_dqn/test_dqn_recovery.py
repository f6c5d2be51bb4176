"""Recovery without a cluster: which errors mean the learner died, and a collector re-pointed."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

import actorrt
from examples.atari_dqn.backend import backend
from examples.atari_dqn.collector import ActorLink, Collector
from examples.atari_dqn.config import config_for_env
from examples.atari_dqn.recovery import Crew, learner_death, top_up

LEARNER = SimpleNamespace(actor_id="a" * 32)
CREW = Crew(backend("actorrt"), LEARNER, collectors=[], runs=[])


def _died(actor_id: str | None) -> actorrt.ActorDiedError:
    return actorrt.ActorDiedError("its process died", actor_id)


def test_the_learners_death_is_recognised_directly_and_through_a_collectors_run():
    assert learner_death(CREW, _died(LEARNER.actor_id))
    # A collector's run raised it (its push failed): the driver gets an ActorError.
    wrapped = actorrt.ActorError("Collector.run raised", _died(LEARNER.actor_id), "tb", "c" * 32)
    assert learner_death(CREW, wrapped)


def test_other_failures_are_not_the_learners_death():
    assert not learner_death(CREW, _died("c" * 32))  # a collector died
    assert not learner_death(CREW, _died(None))
    raised = actorrt.ActorError("Collector.run raised", ValueError("bad"), "tb", "c" * 32)
    assert not learner_death(CREW, raised)
    assert not learner_death(CREW, TimeoutError("no push answered"))


class _Recorder:
    """A collector stand-in whose ``run.remote`` records its arguments."""

    def __init__(self):
        self.calls = []
        self.run = SimpleNamespace(remote=self._remote)

    def _remote(self, frames, **kwargs):
        self.calls.append((frames, kwargs))
        return f"run{len(self.calls)}"


def test_runs_get_what_is_left_of_the_deadline_and_none_is_topped_up_after_it():
    c = _Recorder()
    crew = Crew(backend("actorrt"), LEARNER, collectors=[c], runs=[])
    crew.start_run(c, 100)
    assert c.calls[-1] == (100, {}) and not crew.out_of_time()  # no deadline: frames alone
    crew.deadline = time.monotonic() + 60
    crew.start_run(c, 100)
    frames, kwargs = c.calls[-1]
    assert frames == 100 and 50 < kwargs["seconds"] <= 60 and not crew.out_of_time()
    crew.deadline = time.monotonic() - 1
    crew.start_run(c, 100)
    assert c.calls[-1] == (100, {"seconds": 0.0}) and crew.out_of_time()
    crew.runs = ["run3"]
    # Past the deadline there is no last round, and the learner is not asked (LEARNER
    # has no stats method: asking would raise).
    assert not top_up(crew, 10**9, timeout=1.0)
    assert len(c.calls) == 3


def test_a_repointed_collector_pushes_to_the_new_learner_and_refetches_weights():
    cfg = config_for_env("CartPole-v1", num_envs_per_collector=1)
    collector = Collector(cfg, learner="old")
    collector.core.weight_version = 7
    collector.set_learner("new")
    assert isinstance(collector.link, ActorLink)
    assert collector.link._learner == "new"
    assert collector.core.weight_version == -1  # whatever version the new one counts from


def _link_whose_learner(monkeypatch, stats_answer):
    """An ActorLink whose published weights are lost; the learner's ``stats`` call then
    returns or raises ``stats_answer``."""
    learner = SimpleNamespace(actor_id=LEARNER.actor_id,
                              stats=SimpleNamespace(remote=lambda: "stats-ref"))  # fmt: skip
    link = ActorLink(learner, "actorrt")
    lost = actorrt.ObjectLostError("object 1 is lost: its owner process is unreachable")
    asked = []

    def get(ref, timeout):
        asked.append(ref)
        if ref == "reply-ref":  # get_weights answered: (version, ref of the weights)
            return (3, "weights-ref")
        if ref == "weights-ref":
            raise lost
        if isinstance(stats_answer, BaseException):
            raise stats_answer
        return stats_answer

    monkeypatch.setattr(link._rt, "get", get)
    return link, lost, asked


def test_weights_lost_with_the_learner_raise_the_learners_death(monkeypatch):
    """Was: the collector's run failed with the bare ObjectLostError (the weights' owner,
    the learner's process, had died), which the driver did not take for the learner's
    death, so a run with --learner-restarts ended with that error instead of resuming."""
    link, _, asked = _link_whose_learner(monkeypatch, _died(LEARNER.actor_id))
    with pytest.raises(actorrt.ActorDiedError) as raised:
        link.result("reply-ref", 5)
    assert asked == ["reply-ref", "weights-ref", "stats-ref"]
    run_failed = actorrt.ActorError("Collector.run raised", raised.value, "tb", "c" * 32)
    assert learner_death(CREW, run_failed)


def test_weights_lost_while_the_learner_answers_raise_the_objects_error(monkeypatch):
    link, lost, _ = _link_whose_learner(monkeypatch, {"frames": 0})
    with pytest.raises(actorrt.ObjectLostError) as raised:
        link.result("reply-ref", 5)
    assert raised.value is lost
    assert not learner_death(CREW, lost)
