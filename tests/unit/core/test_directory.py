"""The cluster directory: which process hosts an actor, resources, names (no processes)."""

import pytest

from actorrt.errors import PlacementError
from actorrt.options import ActorOptions
from actorrt.runtime.directory import ClusterDirectory, ProcessSlot


def _dir(*slots):
    return ClusterDirectory(list(slots))


def test_least_loaded_process_first_then_lowest_rank():
    d = _dir(ProcessSlot("w1", 1, num_cpus=2), ProcessSlot("w2", 2, num_cpus=2))
    got = [d.place(f"a{i}", ActorOptions(), "A").worker for i in range(4)]
    assert got == ["w1", "w2", "w1", "w2"]
    d.release("a0")
    assert d.place("a4", ActorOptions(), "A").worker == "w1"


def test_labels_are_honoured_when_processes_offer_them():
    d = _dir(ProcessSlot("w1", 1, labels=("learner",)), ProcessSlot("w2", 2, labels=("collector",)))
    assert d.place("l", ActorOptions(label="learner"), "L").worker == "w1"
    assert d.place("c", ActorOptions(label="collector"), "C").worker == "w2"
    with pytest.raises(PlacementError, match="no process offers label 'evaluator'.*--labels"):
        d.place("e", ActorOptions(label="evaluator"), "E")


def test_labels_go_anywhere_when_no_process_offers_any():
    d = _dir(ProcessSlot("w1", 1), ProcessSlot("w2", 2))
    assert d.place("l", ActorOptions(label="learner"), "L").worker == "w1"


def test_gpus_whole_and_shared():
    d = _dir(ProcessSlot("w1", 1, gpus=(0, 1)))
    assert d.place("a", ActorOptions(num_gpus=1), "A").gpu_ids == (0,)
    assert d.place("b", ActorOptions(num_gpus=0.5), "B").gpu_ids == (1,)
    assert d.place("c", ActorOptions(num_gpus=0.5), "C").gpu_ids == (1,)
    with pytest.raises(PlacementError, match="needs num_cpus=0, num_gpus=1"):
        d.place("d", ActorOptions(num_gpus=1), "D")
    d.release("a")
    assert d.place("d", ActorOptions(num_gpus=1), "D").gpu_ids == (0,)


def test_gpu_request_on_a_cpu_cluster_says_what_to_do():
    d = _dir(ProcessSlot("w1", 1, num_cpus=2))
    with pytest.raises(PlacementError, match=r"needs 1 GPU\(s\); no process has a GPU.*num_gpus=0"):
        d.place("a", ActorOptions(num_gpus=1), "Learner")


def test_cpu_reservations_and_dead_processes():
    d = _dir(ProcessSlot("w1", 1, num_cpus=1), ProcessSlot("w2", 2, num_cpus=1))
    assert d.place("a", ActorOptions(num_cpus=1), "A").worker == "w1"
    d.mark_dead("w2")
    with pytest.raises(PlacementError):
        d.place("b", ActorOptions(num_cpus=1), "B")
    assert d.place("c", ActorOptions(), "C").worker == "w1"  # 0 CPUs reserves nothing


def test_names_register_lookup_and_go_with_the_actor():
    d = _dir(ProcessSlot("w1", 1))

    class H:
        actor_id = "x"

    d.register_name("svc", H)
    assert d.lookup("svc") is H
    with pytest.raises(ValueError, match="already exists"):
        d.register_name("svc", H)
    d.unregister_actor("x")
    assert d.lookup("svc") is None
