"""The backend seam's pure parts: names, Ray's options, and which actor an error says died."""

from __future__ import annotations

import pytest

import actorrt
from examples.atari_dqn.backend import BACKENDS, ActorSpec, backend, ray_options


def test_backends_are_looked_up_by_name_once_and_a_wrong_name_lists_them():
    assert backend("actorrt") is backend("actorrt")
    assert backend("actorrt").name == "actorrt"
    with pytest.raises(ValueError, match="'torch' is not one of actorrt, ray"):
        backend("torch")
    assert BACKENDS == ("actorrt", "ray")


def test_ray_gets_the_specs_gpus_restarts_and_concurrency_and_no_cpu_reservation():
    spec = ActorSpec(label="learner", num_gpus=0.5, max_restarts=3, max_concurrency=1)
    assert ray_options(spec) == {
        "num_cpus": 0,
        "num_gpus": 0.5,
        "max_restarts": 3,
        "max_concurrency": 1,
    }
    assert "max_concurrency" not in ray_options(ActorSpec())  # Ray's own default


def test_actorrt_errors_name_the_dead_actor_also_inside_a_methods_error():
    rt = backend("actorrt")
    dead = actorrt.ActorDiedError("its process died", "a" * 32)
    assert rt.died(dead) == "a" * 32
    assert rt.died(actorrt.ActorError("run raised", dead, "tb", "c" * 32)) == "a" * 32
    assert rt.died(actorrt.ActorError("run raised", ValueError("x"), "tb", "c" * 32)) is None
    assert rt.died(TimeoutError()) is None


def test_ray_errors_name_the_dead_actor_also_inside_a_methods_error():
    pytest.importorskip("ray", reason="ray is not installed")
    from ray.exceptions import RayActorError, RayTaskError

    rt = backend("ray")
    dead = RayActorError(actor_id="ab" * 16)
    assert rt.died(dead) == "ab" * 16
    # What ray.get raises for a collector's run that raised it: a RayTaskError that is
    # also a RayActorError (with the caller's id), the dead actor in its cause.
    wrapped = RayTaskError("Collector.run", "tb", dead, actor_id="cd" * 16).as_instanceof_cause()
    assert isinstance(wrapped, RayActorError)
    assert rt.died(wrapped) == "ab" * 16
    assert rt.died(RayTaskError("Collector.run", "tb", ValueError("x"))) is None


def test_only_rays_unavailable_actor_is_one_being_restarted():
    assert not backend("actorrt").restarting(actorrt.ActorDiedError("gone", "a" * 32))
    pytest.importorskip("ray", reason="ray is not installed")
    from ray.exceptions import ActorUnavailableError, RayActorError

    rt = backend("ray")
    unavailable = ActorUnavailableError("socket closed", bytes(16))
    assert rt.restarting(unavailable) and rt.died(unavailable) == "00" * 16
    assert not rt.restarting(RayActorError(actor_id="ab" * 16))
