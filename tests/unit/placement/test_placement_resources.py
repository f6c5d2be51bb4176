"""Placer.resources: what actorrt.cluster_resources() / available_resources() report."""

from __future__ import annotations

import dataclasses

from placement_testlib import node, procs

from actorrt.placement.resources import Resources
from actorrt.placement.scheduler import Placer


def _cluster():
    driver = dataclasses.replace(node("h0", gpus=2), hosts_actors=False)
    return Placer(procs(driver, node("h0", gpus=2), node("h0", gpus=2), node("h1")))


def test_each_hosts_cpus_and_each_gpu_count_once_and_the_driver_adds_nothing():
    total, free = _cluster().resources()
    assert total == {"CPU": 16.0, "GPU": 2.0}  # h0's 8 CPUs and 2 GPUs for its two workers
    assert free == total


def test_reserved_cpus_and_gpu_shares_leave_the_rest_available_until_given_back():
    placer = _cluster()
    i, gpus = placer.place(None, Resources(num_cpus=2, num_gpus=0.25))
    assert placer.procs[i].node.hostname == "h0"
    j, _ = placer.place(None, Resources(num_cpus=3))
    total, free = placer.resources()
    assert total == {"CPU": 16.0, "GPU": 2.0}
    assert free == {"CPU": 11.0, "GPU": 1.75}
    placer.give_back(i, Resources(num_cpus=2, num_gpus=0.25), [g.index for g in gpus])
    placer.give_back(j, Resources(num_cpus=3), [])
    assert placer.resources() == (total, total)


def test_a_dead_process_no_longer_counts_and_no_gpus_means_no_gpu_key():
    placer = Placer(procs(node("h0"), node("h1")))
    assert placer.resources()[0] == {"CPU": 16.0}
    placer.alive[1] = False
    assert placer.resources() == ({"CPU": 8.0}, {"CPU": 8.0})


def test_as_dict_is_rays_assigned_resources_form_without_zeros():
    # What get_runtime_context().get_assigned_resources() gives an actor or function.
    assert Resources(num_cpus=1, num_gpus=0.5).as_dict() == {"CPU": 1.0, "GPU": 0.5}
    assert Resources(num_gpus=2).as_dict() == {"GPU": 2.0}
    assert Resources().as_dict() == {}
    assert all(type(v) is float for v in Resources(num_cpus=2, num_gpus=1).as_dict().values())
