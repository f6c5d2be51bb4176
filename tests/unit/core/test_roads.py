"""The tensor road's parts that need no GPU (the CUDA cases: tests/gpu/test_gpu_roads.py)."""

from __future__ import annotations

import pickle

import torch

from actorrt.runtime.roads import EmptyCudaTensor, tensor_road


def test_no_road_when_there_is_no_cuda_and_no_shared_memory() -> None:
    assert tensor_road(None, cuda=False, guard_tiny=False, to_shm=False) is None
    assert tensor_road({"cuda:0": "cuda:1"}, cuda=False, guard_tiny=True, to_shm=False) is None


def test_cpu_tensors_travel_as_they_are_without_shared_memory() -> None:
    road = tensor_road(None, cuda=True, guard_tiny=True, to_shm=False)
    t = torch.zeros(1 << 20)
    assert road is not None and road(t) is t


def test_the_empty_tensor_stand_in_pickles_small_and_unpickles_as_an_empty_tensor() -> None:
    stand_in = EmptyCudaTensor(torch.empty(2, 0, dtype=torch.int64), "cpu")
    data = pickle.dumps(stand_in)
    out = pickle.loads(data)
    assert len(data) < 200
    assert out.shape == (2, 0) and out.dtype == torch.int64 and out.device.type == "cpu"
