"""Recovery without a cluster: which errors mean the learner died, and a collector re-pointed."""

from __future__ import annotations

from types import SimpleNamespace

import actorrt
from examples.atari_dqn.backend import backend
from examples.atari_dqn.collector import ActorLink, Collector
from examples.atari_dqn.config import config_for_env
from examples.atari_dqn.recovery import Crew, learner_death

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


def test_a_repointed_collector_pushes_to_the_new_learner_and_refetches_weights():
    cfg = config_for_env("CartPole-v1", num_envs_per_collector=1)
    collector = Collector(cfg, learner="old")
    collector.core.weight_version = 7
    collector.set_learner("new")
    assert isinstance(collector.link, ActorLink)
    assert collector.link._learner == "new"
    assert collector.core.weight_version == -1  # whatever version the new one counts from
