"""The tensor road (:mod:`actorrt.runtime.roads`) on real CUDA tensors (no processes started).

Two TensorPipe traps are kept off the wire one tensor at a time: cuda_gdr can crash on
CUDA tensors under 32 bytes (pytorch issue 57136), so where the plan sets
``guard_tiny_cuda`` those go through host memory; and an empty CUDA tensor aborts the
sending process on every CUDA channel (tensorpipe issue 447), so it travels as its shape
and dtype and is made anew on the device the map names.
"""

from __future__ import annotations

import pickle

import pytest
import torch
from gpu_testlib import requires_cuda, requires_gpus

from actorrt.placement.transports import GDR_MIN_BYTES
from actorrt.runtime.payload import pack, unpack
from actorrt.runtime.roads import EmptyCudaTensor, tensor_road

pytestmark = [requires_cuda, pytest.mark.timeout(60)]

_MAP = {"cuda:0": "cuda:0"}


def _gdr_road():
    road = tensor_road(_MAP, cuda=True, guard_tiny=True, to_shm=False)
    assert road is not None
    return road


def test_threshold_is_32_bytes():
    assert GDR_MIN_BYTES == 32


_CASES = [
    (torch.uint8, 1, True),
    (torch.uint8, 31, True),
    (torch.uint8, 32, False),
    (torch.float32, 7, True),  # 28 bytes
    (torch.float32, 8, False),  # 32 bytes: not under the limit
    (torch.float64, 3, True),  # 24 bytes
    (torch.float64, 4, False),
    (torch.float16, 15, True),  # 30 bytes
    (torch.float32, 1 << 20, False),
]


@pytest.mark.parametrize(
    "dtype, numel, staged",
    [
        pytest.param(d, n, st, id=f"{str(d).split('.')[-1]}x{n}-{'cpu' if st else 'stays'}")
        for d, n, st in _CASES
    ],
)
def test_tensors_under_32_bytes_go_to_the_cpu_where_cuda_gdr_may_run(dtype, numel, staged):
    t = (torch.arange(numel) % 100).to(dtype=dtype, device="cuda")
    out = _gdr_road()(t)
    if staged:
        assert out.device.type == "cpu", (dtype, numel, out.device)
    else:
        assert out is t  # left alone: same object, same device
    assert out.dtype == dtype and out.shape == t.shape
    assert torch.equal(out.cpu(), t.cpu())


def test_tiny_tensors_stay_on_the_gpu_where_cuda_gdr_cannot_run():
    road = tensor_road(_MAP, cuda=True, guard_tiny=False, to_shm=False)
    t = torch.tensor([1.0, 2.0], device="cuda")
    assert road is not None and road(t) is t


def test_a_small_view_of_a_large_tensor_counts_its_own_bytes():
    big = torch.arange(1024, dtype=torch.float32, device="cuda")
    out = _gdr_road()(big[10:14])  # 16 bytes of a 4 KiB storage
    assert out.device.type == "cpu" and out.tolist() == [10.0, 11.0, 12.0, 13.0]


def test_without_a_device_map_cuda_tensors_go_through_host_memory():
    road = tensor_road(None, cuda=True, guard_tiny=False, to_shm=False)
    t = torch.arange(1 << 16, dtype=torch.float32, device="cuda")
    assert road is not None
    out = road(t)
    assert out.device.type == "cpu" and torch.equal(out, t.cpu())


@pytest.mark.parametrize("guard_tiny", [False, True])
@pytest.mark.parametrize("shape", [(0,), (3, 0, 2)])
def test_an_empty_cuda_tensor_travels_as_its_shape_and_lands_on_the_mapped_device(
    shape, guard_tiny
):
    road = tensor_road(_MAP, cuda=True, guard_tiny=guard_tiny, to_shm=False)
    t = torch.empty(shape, dtype=torch.float16, device="cuda")
    assert road is not None
    stand_in = road(t)
    assert isinstance(stand_in, EmptyCudaTensor)
    out = pickle.loads(pickle.dumps(stand_in))
    assert out.shape == t.shape and out.dtype == t.dtype and str(out.device) == "cuda:0"


def test_a_payload_with_empty_and_full_cuda_tensors_keeps_its_shape():
    road = tensor_road(_MAP, cuda=True, guard_tiny=False, to_shm=False)
    full = torch.arange(64, dtype=torch.float32, device="cuda")
    value = {"returns": torch.empty(0, device="cuda"), "obs": full, "n": 3}
    blob, side = pack(value, road)
    wire = pickle.loads(pickle.dumps((blob, side)))  # what torch's pickler does to the side list
    out = unpack(wire)
    assert out["n"] == 3 and out["returns"].is_cuda and out["returns"].numel() == 0
    assert torch.equal(out["obs"], full)


@requires_gpus(2)
def test_large_tensor_on_the_second_gpu_stays_there_tiny_one_is_staged():
    road = tensor_road({"cuda:1": "cuda:0"}, cuda=True, guard_tiny=True, to_shm=False)
    on1 = torch.arange(16, dtype=torch.float32, device="cuda:1")
    tiny1 = torch.tensor([5, 6], dtype=torch.int32, device="cuda:1")
    assert road is not None
    assert road(on1) is on1
    out = road(tiny1)
    assert out.device.type == "cpu" and out.tolist() == [5, 6]
