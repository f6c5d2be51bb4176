"""The quick road of a request: what torch's unpickler reads as the call, or left to torch."""

from __future__ import annotations

import pytest
import torch
import torch.distributed.rpc as rpc
from torch.distributed.rpc.internal import PythonUDF, _internal_rpc_pickler

from actorrt.runtime import quick_rpc
from actorrt.runtime.host import rpc_call, rpc_ping
from actorrt.runtime.payload import pack


class Custom:
    pass


def test_this_torch_has_what_the_quick_road_uses():
    # Without it every call still works, through torch's public rpc_async, only slower:
    # a torch upgrade that renames these private names must be noticed here.
    assert quick_rpc.quick(), (
        "torch lacks _invoke_rpc_python_udf / _internal_rpc_pickler; update "
        "actorrt/runtime/quick_rpc.py for this torch"
    )


def _unpickled_by_torch(blob):
    # What the callee does with a request's bytes (its tensor table empty)
    return _internal_rpc_pickler.deserialize(blob, [])


def test_a_request_without_tensors_unpickles_on_torchs_side_as_the_call_it_is():
    wire = pack(((1, "a", [2.5, None]), {"k": b"x" * 300_000}))  # bytes past 64 KiB too
    args = ("0" * 32, "driver-abc", 7, "ping", wire)
    request = _unpickled_by_torch(quick_rpc._pickled(rpc_call, args))
    assert type(request) is PythonUDF
    assert request == PythonUDF(rpc_call, args, {})
    assert request.func is rpc_call  # the async_execution wrapper torch looks for


def test_objects_shared_inside_the_arguments_stay_shared():
    # The arguments' pickle numbers its memo from 0 after the two names: it must not
    # refer to them, nor they to it.
    shared = [1, 2]
    blob = quick_rpc._pickled(rpc_ping, ((shared, shared, "s", "s"),))
    (value,) = _unpickled_by_torch(blob).args
    assert value == (shared, shared, "s", "s") and value[0] is value[1]


def test_a_function_that_its_name_does_not_find_takes_torchs_pickler():
    def nested():
        return None

    def impostor():
        return None

    impostor.__module__, impostor.__qualname__ = __name__, "Custom"  # names a class here

    assert quick_rpc._pickled(nested, ()) is None
    assert quick_rpc._pickled(lambda: None, ()) is None
    assert quick_rpc._pickled(impostor, ()) is None


@pytest.mark.parametrize(
    "value",
    [torch.ones(2), torch.nn.Parameter(torch.ones(2)), {"deep": [(torch.zeros(1),)]}],
    ids=["tensor", "parameter", "nested"],
)
def test_a_request_holding_a_tensor_is_left_to_torchs_pickler(value):
    args = (pack(((value,), {})),)
    assert quick_rpc._pickled(rpc_ping, args) is None
    _, tensors = _internal_rpc_pickler.serialize(PythonUDF(rpc_ping, args, {}))
    assert tensors  # torch sets the tensor aside, which the quick road cannot do


def test_rrefs_are_left_to_torchs_pickler():
    # Pickling an RRef forks it (torch's reference counting): only torch may do it.
    for kind in (rpc.PyRRef, rpc.RRef):
        with pytest.raises(quick_rpc._HasTensors):
            quick_rpc._table()[kind](object())


def test_a_reducer_registered_with_torch_takes_torchs_pickler_for_its_class_only(monkeypatch):
    assert quick_rpc._pickled(rpc_ping, (Custom(),)) is not None  # plain pickling, till:
    monkeypatch.setitem(_internal_rpc_pickler._class_reducer_dict, Custom, lambda obj: (Custom, ()))
    assert quick_rpc._pickled(rpc_ping, ([Custom()],)) is None
    # Other requests keep the quick road (importing torch.distributed.nn registers two)
    assert _unpickled_by_torch(quick_rpc._pickled(rpc_ping, (1,))) == PythonUDF(rpc_ping, (1,), {})


def test_a_running_profiler_takes_torchs_own_rpc_async(monkeypatch):
    sent = []
    monkeypatch.setattr(quick_rpc, "_profiler_enabled", lambda: True)
    monkeypatch.setattr(rpc, "rpc_async", lambda *a, **kw: sent.append((a, kw)) or "public")
    assert quick_rpc.rpc_async("worker1", rpc_ping, (1,)) == "public"
    assert sent == [(("worker1", rpc_ping), {"args": (1,), "timeout": 0})]


def test_a_destination_it_cannot_reach_raises_like_torchs_rpc_async():
    # Without RPC running here, or (when a cluster runs in this process) an unknown name.
    with pytest.raises(RuntimeError):
        quick_rpc.rpc_async("no-such-worker", rpc_ping, (1,))


def test_the_threads_pickler_leaves_nothing_behind_for_the_next_request():
    # A thread keeps one pickler between requests: a request refused half-way (a tensor),
    # a large one, and the objects the previous one memoised must not show in the next.
    args = ("0" * 32, "driver-abc", 7, "ping", pack(((1, "s", [2.5]), {})))
    first = quick_rpc._pickled(rpc_call, args)
    assert quick_rpc._pickled(rpc_ping, ("x", [1, torch.ones(2)])) is None
    assert quick_rpc._pickled(rpc_ping, (b"y" * 300_000,)) is not None
    again = quick_rpc._pickled(rpc_call, args)
    assert again == first
    assert _unpickled_by_torch(again) == PythonUDF(rpc_call, args, {})
