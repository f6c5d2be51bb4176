"""The shared-memory tensor road: round trips and segment lifetime, in one process.

The receiver side (``_attach``) maps the sender's memfd through ``/proc/<pid>/fd``, which
works within one process too, so the lifetime rules are checked here without RPC.
"""

import gc
import os
import pickle
import weakref

import pytest
import torch

from actorrt.runtime import shm

pytestmark = pytest.mark.skipif(not shm.enabled(), reason="no memfd / procfs on this system")


def _send(t):
    handle = shm._put(t)
    assert isinstance(handle, shm.ShmTensor)
    return handle, pickle.loads(pickle.dumps(handle))


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32, torch.bfloat16, torch.int64])
def test_round_trip_keeps_values_shape_dtype(dtype):
    t = (torch.arange(3 << 18) % 251).to(dtype).reshape(3, -1)
    _, got = _send(t)
    assert got.dtype == dtype and got.shape == t.shape
    assert torch.equal(got, t)


@pytest.mark.parametrize("threads", [1, 3])
def test_large_copy_split_over_threads_keeps_every_byte(monkeypatch, threads):
    # 97 MiB + 5 bytes: uneven shares, a head longer than the others, an odd tail
    monkeypatch.setattr(shm, "_COPY_THREADS", threads)
    # different bytes per case: a reused segment must not hide bytes left uncopied
    t = ((torch.arange((97 << 20) + 5, dtype=torch.int64) + threads) % 253).to(torch.uint8)
    _, got = _send(t)
    assert torch.equal(got, t)


def test_non_contiguous_tensor_arrives_as_its_values():
    t = torch.arange(1 << 20, dtype=torch.float32).reshape(1024, 1024).t()
    _, got = _send(t)
    assert torch.equal(got, t)


def test_receiver_never_sees_a_segment_reused_while_it_holds_the_tensor():
    size = 1 << 21
    first = torch.full((size,), 7, dtype=torch.uint8)
    h1, held = _send(first)
    # The receiver still holds `held`: the next send of the same size must use another
    # segment, and `held` must keep the first values.
    h2, second = _send(torch.full((size,), 9, dtype=torch.uint8))
    assert h2.fd != h1.fd
    assert int(held.min()) == 7 and int(held.max()) == 7
    assert int(second.min()) == 9
    # A view keeps the segment lent too.
    view = held[10:20]
    del held
    gc.collect()
    h3, third = _send(torch.full((size,), 3, dtype=torch.uint8))
    assert h3.fd not in (h1.fd, h2.fd)
    assert int(view.min()) == 7 and int(view.max()) == 7
    # Once every reference is gone the segment goes back to the pool and is reused.
    del view, second, third
    gc.collect()
    h4, fourth = _send(torch.full((size,), 5, dtype=torch.uint8))
    assert h4.fd in (h1.fd, h2.fd, h3.fd)
    assert int(fourth.min()) == 5 and int(fourth.max()) == 5


def test_stale_handle_is_refused_not_read():
    size = 1 << 21
    h1, got = _send(torch.zeros(size, dtype=torch.uint8))
    blob = pickle.dumps(h1)
    del got
    gc.collect()
    h2, again = _send(torch.ones(size, dtype=torch.uint8))
    assert h2.fd == h1.fd and h2.generation != h1.generation
    with pytest.raises(RuntimeError, match="reused"):
        pickle.loads(blob)
    assert int(again.min()) == 1


def test_a_conjugate_view_arrives_as_its_values():
    """Was: the road copied a conj view's bytes, which are the unconjugated values, and
    the receiver got the tensor before ``conj()``."""
    t = torch.randn(1 << 18, dtype=torch.complex64)
    handle = shm.swap_one(t.conj())
    assert isinstance(handle, shm.ShmTensor)
    got = pickle.loads(pickle.dumps(handle))
    assert not got.is_conj() and torch.equal(got, t.conj())


def test_swap_one_leaves_small_grad_and_non_contiguous_layouts_alone():
    small = torch.zeros(16)
    assert shm.swap_one(small) is small
    big = torch.zeros(shm.THRESHOLD // 4 + 1)
    grad = big.clone().requires_grad_()
    assert shm.swap_one(grad) is grad
    sparse = torch.zeros(2, shm.THRESHOLD).to_sparse()
    assert shm.swap_one(sparse) is sparse
    handle = shm.swap_one(big)
    assert isinstance(handle, shm.ShmTensor)
    assert torch.equal(pickle.loads(pickle.dumps(handle)), big)


def test_mappings_of_ended_processes_are_dropped_and_the_rest_kept():
    import mmap
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait(timeout=30)  # ended and reaped: its pid names no process now
    dead, alive = (child.pid, 3, 1), (os.getpid(), 3, 2)
    try:
        shm._maps[dead] = mmap.mmap(-1, 4096)
        shm._maps[alive] = mmap.mmap(-1, 4096)
        assert shm.forget_dead() >= 1
        assert dead not in shm._maps and alive in shm._maps
        shm.forget_all()
        assert not shm._maps
    finally:
        shm._maps.pop(dead, None)
        shm._maps.pop(alive, None)


def test_a_sealed_tensor_is_read_in_place_copy_on_write_and_not_once_unsealed():
    t = torch.arange(1 << 20, dtype=torch.float32)
    copy, handle = shm.seal(t, "obj1")
    t.add_(1)  # the object is the copy made at the seal, as Ray's put copies
    first = shm.open_sealed(pickle.loads(pickle.dumps(handle)))  # as its location carries it
    assert first is not None and first.shape == t.shape and first.dtype == t.dtype
    assert torch.equal(first, torch.arange(1 << 20, dtype=torch.float32))
    first.add_(5)  # a reader's write stays in its own pages, and so does the owner's
    copy[2] = -1
    assert float(copy[0]) == 0.0 and float(first[2]) == 7.0
    assert float(shm.open_sealed(handle)[0]) == 0.0 and float(shm.open_sealed(handle)[2]) == 2.0
    shm.unseal(handle)
    assert shm.open_sealed(handle) is None  # freed: the reader asks the owner instead
    assert float(first[1]) == 6.0 and float(copy[1]) == 1.0  # tensors still mapped keep it


def test_a_freed_objects_memfd_is_used_again_only_once_nothing_maps_it():
    shm.drop_free_sealed()
    first_copy, first = shm.seal(torch.ones(1 << 20, dtype=torch.uint8), "first")
    reader = shm.open_sealed(first)
    shm.unseal(first)
    del first_copy
    gc.collect()
    # the reader still maps it: a new object gets another memfd, and the reader's is intact
    second_copy, second = shm.seal(torch.zeros(1 << 20, dtype=torch.uint8), "second")
    assert second.fd != first.fd and int(reader.sum()) == 1 << 20
    del reader
    gc.collect()
    third_copy, third = shm.seal(torch.full((1 << 20,), 2, dtype=torch.uint8), "third")
    assert (third.fd, third.inode) == (first.fd, first.inode)  # unmapped: used again
    assert shm.open_sealed(first) is None  # the old handle finds another object's tag
    assert int(shm.open_sealed(third).sum()) == 2 << 20
    assert int(shm.open_sealed(second).sum()) == 0
    # another host, or a tag that does not match
    assert shm.open_sealed(third._replace(where=("another boot", 1, 1))) is None
    assert shm.open_sealed(third._replace(tag=b"thir")) is None
    for handle in (second, third):
        shm.unseal(handle)
    shm.drop_free_sealed()


def test_a_state_dict_is_sealed_into_one_memfd_and_read_back_whole():
    net = torch.nn.Sequential(torch.nn.Linear(512, 600), torch.nn.Linear(600, 3))
    state = net.state_dict()  # an OrderedDict with _metadata, below THRESHOLD each
    value = {
        "state": state,
        "step": 7,
        "parts": [torch.arange(10, dtype=torch.float64), (torch.ones(3, 4).t(), "x")],
        "bytes": torch.full((1 << 20,), 5, dtype=torch.uint8),
    }
    copy, handle = shm.seal(value, "dict")
    try:
        got = shm.open_sealed(pickle.loads(pickle.dumps(handle)))
        for v in (copy, got):
            assert type(v["state"]) is type(state) and v["state"]._metadata == state._metadata
            assert list(v["state"]) == list(state)
            assert all(torch.equal(v["state"][k], state[k]) for k in state)
            assert v["step"] == 7 and v["parts"][1][1] == "x"
            assert torch.equal(v["parts"][0], value["parts"][0])  # float64 after uint8s
            assert torch.equal(v["parts"][1][0], value["parts"][1][0])  # was not contiguous
            assert int(v["bytes"].sum()) == 5 << 20
        got["state"]["0.weight"].zero_()  # a reader's write: its own pages only
        assert torch.equal(copy["state"]["0.weight"], state["0.weight"])
    finally:
        shm.unseal(handle)


def test_only_cpu_tensors_in_plain_containers_are_sealed_within_the_budget(monkeypatch):
    shm.drop_free_sealed()
    big = torch.ones(shm.THRESHOLD, dtype=torch.uint8)

    class Box:
        t = big

    assert shm.seal(torch.ones(16), "small") is None
    assert shm.seal([torch.ones(16)] * 3, "small ones") is None
    assert shm.seal(torch.ones(shm.THRESHOLD // 4, requires_grad=True), "grad") is None
    assert shm.seal([big, Box()], "an object") is None
    assert shm.seal(torch.ones(shm.THRESHOLD, dtype=torch.complex64).conj(), "conj") is None
    assert shm.seal({(1, 2): big}, "a tuple key") is None
    many = {str(i): big[:1] for i in range(2000)}  # its layout would be too long to carry
    assert shm.seal({**many, "big": big}, "many") is None
    before = shm._sealed_bytes
    monkeypatch.setattr(shm, "POOL_LIMIT", before + shm.THRESHOLD - 1)
    assert shm.seal(big, "over") is None and shm._sealed_bytes == before
    monkeypatch.setattr(shm, "POOL_LIMIT", before + shm.THRESHOLD)
    _, handle = shm.seal([big], "fits")
    assert shm._sealed_bytes == before + shm.THRESHOLD
    shm.unseal(handle)
    shm.drop_free_sealed()
    assert shm._sealed_bytes == before


def test_sealing_keeps_no_reference_to_the_value_put():
    """Was: the layout's walk was a closure calling itself, a reference cycle that held
    the tensors put until the next garbage collection (an owner putting 100 MB in a loop
    grew by 100 MB a put)."""
    value = {"t": torch.ones(shm.THRESHOLD, dtype=torch.uint8)}
    gone = weakref.ref(value["t"])
    gc.disable()
    try:
        copy, handle = shm.seal(value, "cycle")
        del value
        assert gone() is None
    finally:
        gc.enable()
        shm.unseal(handle)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.bfloat16, torch.bool, torch.complex64])
def test_a_value_sealed_into_a_new_or_a_used_memfd_reads_back_whole(dtype):
    """A new memfd is written through the file (pwrite), one used again through the
    mapping: both give every tensor at its offset, of any dtype, contiguous or not."""
    shm.drop_free_sealed()
    g = torch.Generator().manual_seed(7)
    a = (torch.rand(3, 1 << 18, generator=g) * 100).to(dtype)
    value = {"a": a, "b": a.t(), "c": [a[1], 5]}  # a transposed view: not contiguous
    inodes = []
    for tag in ("new", "used"):  # the second goes into the first's memfd, freed
        copy, handle = shm.seal(value, tag)
        read = shm.open_sealed(handle)
        assert read is not None and read["c"][1] == 5
        for got in (copy, read):
            assert got["a"].dtype == dtype and torch.equal(got["a"], a)
            assert torch.equal(got["b"], a.t()) and torch.equal(got["c"][0], a[1])
        inodes.append(handle.inode)
        del copy, read, got
        gc.collect()
        shm.unseal(handle)
    assert inodes[0] == inodes[1] and len(shm._sealed_free) == 1  # the memfd was used again
    shm.drop_free_sealed()


def test_a_put_that_gets_no_memfd_is_kept_unsealed_not_failed(monkeypatch):
    """Was: a process out of file descriptors (EMFILE) made actorrt.put raise."""
    shm.drop_free_sealed()

    def no_memfd(capacity):
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(shm, "_Segment", no_memfd)
    assert shm.seal(torch.ones(shm.THRESHOLD, dtype=torch.uint8), "emfile") is None
    assert shm._sealed_bytes == 0  # the budget it reserved is given back
