"""map_tensors: the walk over nested values that plain payloads take (runtime/payload.py)."""

from collections import OrderedDict, namedtuple

import torch

from actorrt.tensor_tree import map_tensors

Pair = namedtuple("Pair", "a b")


def test_every_tensor_is_mapped_and_containers_keep_their_type():
    value = {"x": [torch.ones(2), (torch.zeros(1), 3)], "p": Pair(torch.ones(1), "s")}
    value["o"] = OrderedDict(k=torch.ones(3))
    out = map_tensors(value, lambda t: t + 1)
    assert torch.equal(out["x"][0], torch.full((2,), 2.0))
    assert torch.equal(out["x"][1][0], torch.ones(1)) and out["x"][1][1] == 3
    assert isinstance(out["p"], Pair) and out["p"].b == "s"
    assert torch.equal(out["p"].a, torch.full((1,), 2.0))
    assert isinstance(out["o"], OrderedDict) and torch.equal(out["o"]["k"], torch.full((3,), 2.0))
    assert torch.equal(value["x"][0], torch.ones(2))  # the input is not changed


def test_unchanged_values_are_returned_as_they_are():
    value = {"x": [torch.ones(2), "s"], "n": 1}
    assert map_tensors(value, lambda t: t) is value


def test_the_walk_keeps_nothing_it_was_given_without_a_collection():
    """Was: a closure calling itself, a reference cycle that held ``fn`` (streams.py's
    gathers the CUDA tensors of each reply) until the next garbage collection."""
    import gc
    import weakref

    class Gather(list):
        def __call__(self, t):
            self.append(t)
            return t

    gather = Gather()
    value = {"t": torch.ones(3)}
    gone = weakref.ref(value["t"])
    gc.disable()
    try:
        map_tensors(value, gather)
        del value, gather
        assert gone() is None
    finally:
        gc.enable()
