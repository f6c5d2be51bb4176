"""``guard_tiny_cuda_tensors`` on real CUDA tensors (no processes started).

cuda_gdr can crash on CUDA tensors under 32 bytes (pytorch issue 57136): where the plan
sets ``guard_tiny_cuda`` the runtime passes payloads through this function, which stages
those tensors through the CPU and leaves everything else where it is.
"""

from __future__ import annotations

from collections import OrderedDict, namedtuple

import pytest
import torch
from gpu_testlib import requires_cuda, requires_gpus

from actorrt.placement import GDR_MIN_BYTES, guard_tiny_cuda_tensors

pytestmark = [requires_cuda, pytest.mark.timeout(60)]

Pair = namedtuple("Pair", "left right")


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
    (torch.int64, 0, True),  # empty: 0 bytes
    (torch.float32, 1 << 20, False),
]


@pytest.mark.parametrize(
    "dtype, numel, staged",
    [
        pytest.param(d, n, st, id=f"{str(d).split('.')[-1]}x{n}-{'cpu' if st else 'stays'}")
        for d, n, st in _CASES
    ],
)
def test_tensors_under_32_bytes_go_to_the_cpu(dtype, numel, staged):
    t = (torch.arange(numel) % 100).to(dtype=dtype, device="cuda")
    out = guard_tiny_cuda_tensors(t)
    if staged:
        assert out.device.type == "cpu", (dtype, numel, out.device)
    else:
        assert out is t  # left alone: same object, same device
        assert out.device == t.device
    assert out.dtype == dtype and out.shape == t.shape
    assert torch.equal(out.cpu(), t.cpu())


def test_a_small_view_of_a_large_tensor_counts_its_own_bytes():
    big = torch.arange(1024, dtype=torch.float32, device="cuda")
    view = big[10:14]  # 16 bytes of a 4 KiB storage
    out = guard_tiny_cuda_tensors(view)
    assert out.device.type == "cpu"
    assert out.tolist() == [10.0, 11.0, 12.0, 13.0]


def test_nested_structure_is_kept_and_only_tiny_cuda_tensors_move():
    tiny = torch.tensor([1.0, 2.0, 3.0], device="cuda")  # 12 bytes
    large = torch.arange(64, dtype=torch.float32, device="cuda")  # 256 bytes
    cpu_tiny = torch.tensor([7], dtype=torch.uint8)
    flag = torch.tensor(True, device="cuda")  # 1 byte scalar
    payload = {
        "obs": large,
        "reward": tiny,
        "cpu": cpu_tiny,
        "meta": ["step", 3, None, (flag, large)],
        "pair": Pair(tiny, large),
        "ordered": OrderedDict(a=tiny, b="keep"),
    }
    out = guard_tiny_cuda_tensors(payload)

    assert out is not payload and type(out) is dict
    assert list(out) == list(payload)  # key order kept
    assert out["obs"] is large and out["obs"].is_cuda
    assert out["reward"].device.type == "cpu" and out["reward"].tolist() == [1.0, 2.0, 3.0]
    assert out["cpu"] is cpu_tiny
    meta = out["meta"]
    assert type(meta) is list and meta[:3] == ["step", 3, None]
    assert type(meta[3]) is tuple and len(meta[3]) == 2
    assert meta[3][0].device.type == "cpu" and bool(meta[3][0]) is True
    assert meta[3][1] is large
    assert type(out["pair"]) is Pair
    assert out["pair"].left.device.type == "cpu" and out["pair"].right is large
    assert type(out["ordered"]) is OrderedDict and list(out["ordered"]) == ["a", "b"]
    assert out["ordered"]["a"].device.type == "cpu" and out["ordered"]["b"] == "keep"
    # the input was not modified in place
    assert payload["reward"].is_cuda and payload["meta"][3][0].is_cuda
    assert payload["pair"].left.is_cuda and payload["ordered"]["a"].is_cuda


def test_nothing_to_move_returns_the_input_itself():
    large = torch.zeros(16, dtype=torch.float32, device="cuda")  # 64 bytes
    payload = {"x": [large, (large, "s")], "c": torch.zeros(1)}
    assert guard_tiny_cuda_tensors(payload) is payload
    assert guard_tiny_cuda_tensors([]) == []


@requires_gpus(2)
def test_large_tensor_on_the_second_gpu_stays_there_tiny_one_is_staged():
    on1 = torch.arange(16, dtype=torch.float32, device="cuda:1")
    tiny1 = torch.tensor([5, 6], dtype=torch.int32, device="cuda:1")
    out = guard_tiny_cuda_tensors([on1, tiny1])
    assert out[0] is on1 and out[0].device == torch.device("cuda", 1)
    assert out[1].device.type == "cpu" and out[1].tolist() == [5, 6]
