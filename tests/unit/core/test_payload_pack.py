"""The payload pipeline in one process: both roads, tensors set aside, the road per tensor."""

import dataclasses
import pickle
import subprocess
import sys

import pytest
import torch

from actorrt.runtime.payload import pack, pack_args, pack_for, unpack


@dataclasses.dataclass
class Sample:
    obs: torch.Tensor
    reward: float


def _over_the_wire(wire):
    # torch's RPC pickler sends the blob and the side list; plain pickle stands in for it
    return pickle.loads(pickle.dumps(wire))


def test_plain_values_skip_cloudpickle_and_objects_take_it():
    plain = ((1, "a", None, {"k": [torch.ones(2), 2.5]}), {"flag": True})
    blob, side = pack(plain)
    assert blob is None and len(side) == 1
    got = unpack((blob, side))
    # Its lists and dicts are copies, made at the call (it is pickled later, if at all);
    # its tensors travel as they are, as torch RPC sends them.
    assert got is not plain and got[0][3] is not plain[0][3]
    assert got[0][3]["k"] is not plain[0][3]["k"] and got[1] is not plain[1]
    assert got[0][3]["k"][0] is plain[0][3]["k"][0] and got[0][3]["k"][1] == 2.5
    assert got[0][:3] == (1, "a", None) and got[1] == {"flag": True}
    blob, side = pack(((Sample(torch.ones(2), 1.0),), {}))
    assert isinstance(blob, bytes) and len(side) == 1 and torch.equal(side[0], torch.ones(2))


def test_every_tensor_takes_the_road_on_both_roads():
    seen = []

    def road(t):
        seen.append(t)
        return t + 1

    for value in ({"x": torch.zeros(2)}, Sample(torch.zeros(2), 0.0)):
        seen.clear()
        back = unpack(_over_the_wire(pack(value, road)))
        got = back["x"] if isinstance(back, dict) else back.obs
        assert torch.equal(got, torch.ones(2)) and len(seen) == 1


def test_a_tensor_referenced_twice_is_sent_once():
    t = torch.arange(3.0)
    blob, side = pack([Sample(t, 0.0), t])
    assert len(side) == 1
    a, b = unpack(_over_the_wire((blob, side)))
    assert a.obs is b


def test_deep_and_wide_containers_take_cloudpickle():
    deep = [[[[[1]]]]]
    wide = list(range(100))
    assert pack(deep)[0] is not None and unpack(pack(deep)) == deep
    assert pack(wide)[0] is not None and unpack(pack(wide)) == wide


def test_what_cannot_be_pickled_raises_at_pack():
    import threading

    with pytest.raises(TypeError):
        pack(threading.Lock())


def test_a_class_of_a_script_unpacks_in_another_process(tmp_path):
    script = tmp_path / "script.py"
    script.write_text(
        "import pickle, sys\n"
        "from actorrt.runtime.payload import pack\n"
        "class Point:\n"
        "    def __init__(self, x):\n"
        "        self.x = x\n"
        "sys.stdout.buffer.write(pickle.dumps(pack(Point(3))))\n"
    )
    made = subprocess.run([sys.executable, str(script)], capture_output=True, timeout=120)
    assert made.returncode == 0, made.stderr.decode()[-2000:]
    point = unpack(pickle.loads(made.stdout))
    assert type(point).__name__ == "Point" and point.x == 3


def _no_road(peer):
    raise AssertionError(f"asked for the road to {peer} for a value without tensors")


def test_a_call_of_atoms_is_packed_without_asking_for_the_road():
    args, kwargs = (1, "a", None, 2.5, b"x"), {"flag": True}
    assert pack_args(args, kwargs, "worker1", _no_road) == (None, [(args, kwargs)])
    nested = ((1, [2, {"k": "v"}]), {})  # plain, though not atoms: one walk, still no road
    assert pack_args(*nested, "worker1", _no_road) == (None, [nested])
    for reply in ((0, 5), (1, ("what", "summary", "text", None)), (2, "gone")):
        assert pack_for(reply, "worker1", _no_road) == (None, [reply])


def test_a_call_or_reply_with_a_tensor_takes_the_peers_road():
    asked = []

    def road_for(peer):
        asked.append(peer)
        return lambda t: t + 1

    blob, side = pack_args((torch.zeros(2),), {}, "worker1", road_for)
    assert blob is None and asked == ["worker1"]
    assert torch.equal(side[0][0][0], torch.ones(2))
    blob, side = pack_for((0, Sample(torch.zeros(2), 0.0)), "worker2", road_for)
    assert isinstance(blob, bytes) and asked == ["worker1", "worker2"]
    assert torch.equal(unpack(_over_the_wire((blob, side)))[1].obs, torch.ones(2))
    for pair in ((Sample(torch.zeros(2), 0.0), 1), (object(), "x")):  # not plain: cloudpickle
        assert pack_for(pair, "worker4", road_for)[0] is not None
    too_wide = tuple(range(40))  # past the plain width: cloudpickle, as pack() does
    assert pack_args(too_wide, {}, "worker3", road_for)[0] is not None


def _layouts():
    eye = torch.eye(4)
    uncoalesced = torch.sparse_coo_tensor(
        torch.tensor([[0, 0], [1, 1]]), torch.ones(2), (3, 3), check_invariants=True
    )
    return {
        "coo": eye.to_sparse(),
        "coo, uncoalesced": uncoalesced,
        "coo, requires_grad": torch.eye(3, requires_grad=True).to_sparse(),
        "csr": eye.to_sparse_csr(),
        "csc": eye.to_sparse_csc(),
        "bsr": eye.to_sparse_bsr((2, 2)),
        "bsc": eye.to_sparse_bsc((2, 2)),
        "mkldnn": torch.arange(4.0).to_mkldnn(),
    }


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta:UserWarning")
def test_sparse_and_mkldnn_tensors_go_to_torch_as_strided_parts():
    """torch's RPC serialization handles strided tensors alone: a CSC, BSR, BSC or
    MKL-DNN tensor in its side list aborted the sending process, a CSR one failed as a
    reply, and measuring a COO one for a reply raised (tests/integration/test_payload.py
    sends them between processes)."""
    seen = []

    def road(t):
        seen.append(t.layout)
        return t

    for what, t in _layouts().items():
        shapes = ((t, lambda b: b), ([t, t], lambda b: b[0]), ({"t": t, "n": 1}, lambda b: b["t"]))
        for value, take in shapes:
            seen.clear()
            blob, side = pack(value, road)
            assert all(isinstance(x, torch.Tensor) and x.layout == torch.strided for x in side)
            assert seen and set(seen) == {torch.strided}, what  # each part took the road
            back = unpack(_over_the_wire((blob, side)))
            got = take(back)
            assert got.layout == t.layout and got.requires_grad == t.requires_grad, what
            assert torch.equal(got.to_dense(), t.to_dense()), what
            if isinstance(back, list):
                assert back[0] is back[1], what  # one tensor, sent once
    coo = unpack(pack(_layouts()["coo, uncoalesced"]))
    assert not coo.is_coalesced()  # its duplicate entries stay as they were


def test_meta_and_nested_tensors_are_refused_at_pack_naming_what_to_send():
    with pytest.raises(TypeError, match="has no data to send"):
        pack({"t": torch.empty(2, device="meta")})
    nested = torch.nested.nested_tensor([torch.ones(2), torch.ones(3)], layout=torch.jagged)
    with pytest.raises(TypeError, match="unbind"):
        pack([nested])


class _Sub(torch.Tensor):
    pass


def test_attributes_and_subclasses_travel_with_the_data_set_aside():
    """torch's RPC pickler dropped attributes set on a tensor (pickle keeps them) and
    named a subclass by reference, for the receiver's torch to import."""
    tagged = torch.arange(3.0)
    tagged.tag = "kept"
    sub = torch.ones(2).as_subclass(_Sub)
    sub.step = 7
    blob, side = pack({"tagged": tagged, "sub": sub, "again": tagged})
    assert blob is not None and len(side) == 2
    assert all(type(t) is torch.Tensor and not t.__dict__ for t in side)  # plain data only
    back = unpack(_over_the_wire((blob, side)))
    assert back["tagged"].tag == "kept" and torch.equal(back["tagged"], tagged)
    assert back["again"] is back["tagged"]
    assert type(back["sub"]) is _Sub and back["sub"].step == 7
    assert pack(torch.ones(2))[0] is None  # a tensor without attributes stays plain
