"""The one payload pipeline: what a call's arguments and a reply become on the wire.

Every value that crosses between processes (constructor arguments, call arguments,
replies) is packed here into ``(blob, side)``: ``blob`` is cloudpickle bytes of the value
with every tensor and RRef taken out, and ``side`` is the list of what was taken out,
which torch RPC's own pickler sends out of band (tensors with their device maps, RRefs
with their reference counting).

Why not let torch RPC pickle the value itself: torch unpickles a request on its RPC
thread *before* actorrt's code runs, so a value that pickles here but not there (an
instance of a class defined in the driver script, a module the callee lacks) would fail
with an unclear message and leave a gap in the caller's sequence numbers, wedging the
actor (the history: docs/performance.md). Packed, the wire form holds only bytes,
tensors and RRefs, which always unpickle; the value is unpacked by actorrt on the
actor's thread, where a failure is that one call's error. The tensors torch gets are
strided ones of torch's own classes: a sparse or MKL-DNN tensor travels as its strided
parts and a user's subclass as its class (by cloudpickle) and its data
(:func:`_sendable_form`, :func:`_subclass_form`), since torch would abort the sender on
the former and fail the latter on the receiver (by reference). cloudpickle also carries
classes of ``__main__`` (and classes defined inside functions) by value, so instances of
them travel as Ray users expect.

Plain values (numbers, strings, bytes, None, tensors, and small lists, tuples and dicts
of them) skip cloudpickle: they travel as they are, since torch unpickles builtins and
tensors anywhere. Making a cloudpickle pickler costs more than the rest of a small call's
packing, and most calls carry only such values.

Each tensor passes through the peer's ``road`` on the way out: staging to host memory
for a peer without a device map, keeping tiny tensors off cuda_gdr, swapping a large
CPU tensor for a shared-memory handle (see :mod:`actorrt.runtime.shm`).
"""

from __future__ import annotations

import io
import pickle
import threading
from collections.abc import Callable
from types import CodeType
from typing import Any

import cloudpickle
import torch
from torch.distributed.rpc import PyRRef

from actorrt.runtime import rref_keeper
from actorrt.runtime.shipping import keep_file_name
from actorrt.tensor_tree import map_tensors

__all__ = [
    "ATOMS",
    "Aside",
    "ReplyHolds",
    "RoadFor",
    "Wire",
    "aside",
    "holds_in_reply",
    "pack",
    "call_pins",
    "pack_args",
    "pack_for",
    "pack_or_measure",
    "packing",
    "reply_holds",
    "snapshot",
    "unpack",
]

Wire = tuple[bytes | None, list[Any]]
"""A packed value: cloudpickle bytes and the tensors/RRefs torch sends alongside, or
``(None, [value])`` for a plain value, which torch sends as it is."""

ATOMS = frozenset({int, float, bool, str, bytes, type(None)})
"""The types of plain atoms: they travel as they are, with nothing to pickle or count."""
_ATOMS = ATOMS
# How deep (the (args, kwargs) tuple counts) and wide the containers of a plain value are.
_PLAIN_DEPTH = 4
_PLAIN_WIDTH = 32


_NOT_PLAIN, _PLAIN, _PLAIN_WITH_TENSORS = 0, 1, 2


def _plain(value: Any, depth: int = 0) -> int:
    """Whether ``value`` is plain, and whether tensors are inside (one walk for both)."""
    kind = type(value)
    if kind in _ATOMS:
        return _PLAIN
    if kind is torch.Tensor:
        # One torch RPC cannot send as it is goes through the pickler, which sends its
        # parts or says why not (_sendable_form).
        if value.layout is not _STRIDED or value.is_meta or value.is_nested or value.__dict__:
            return _NOT_PLAIN  # (torch's pickler would drop attributes set on it)
        return _PLAIN_WITH_TENSORS
    if depth == _PLAIN_DEPTH or kind not in (tuple, list, dict) or len(value) > _PLAIN_WIDTH:
        return _NOT_PLAIN
    if kind is dict:
        for key in value:
            if type(key) not in _ATOMS:
                return _NOT_PLAIN
        value = value.values()
    found = _PLAIN
    for item in value:
        if type(item) in _ATOMS:  # most items: no call for them
            continue
        inner = _plain(item, depth + 1)
        if inner == _NOT_PLAIN:
            return _NOT_PLAIN
        if inner > found:
            found = inner
    return found


def snapshot(value: Any) -> Any:
    """A plain value whose lists and dicts are its own: copies of the caller's.

    A plain value travels unpickled, and is pickled only when its message goes out: in a
    batch (``outbox``, ``batches``), or when torch serializes a reply, after the caller
    or the method went on. A list or dict it shares with them could change before that
    (``buffer.append(x)`` right after ``.remote(buffer)``), and the receiver would get
    the later one; Ray and torch pickle at the call. Tensors are shared still, as torch
    RPC sends them (their storage is read as the message goes out: see docs).
    """
    kind = type(value)
    if kind is dict:
        out = value.copy()
        for key, item in out.items():
            if type(item) in _NESTED:  # same keys: replacing values while iterating is safe
                out[key] = snapshot(item)
        return out
    if kind is list:
        out = value.copy()
        for i, item in enumerate(out):
            if type(item) in _NESTED:
                out[i] = snapshot(item)
        return out
    if kind is tuple:
        for item in value:
            if type(item) in _NESTED:
                return tuple([snapshot(x) if type(x) in _NESTED else x for x in value])
    return value  # an atom, a tensor, a tuple with no list or dict inside


_NESTED = frozenset({dict, list, tuple})


# Per thread: the side list of the unpickling under way, and whether a pack is under way.
_local = threading.local()


class Aside:
    """A value torch RPC's pickler carries beside the bytes, as it carries tensors.

    The receiver rebuilds it once, as the message arrives, however often the packed
    value is unpacked after: for what must exist once per copy sent (a ref that holds
    its object, and lets it go when it goes). Pickle it inside the value as
    ``(aside, (Aside(reduced),))``; ``reduced`` is what rebuilds it, as ``__reduce__``
    returns it.
    """

    __slots__ = ("reduced",)

    def __init__(self, reduced: tuple[Callable[..., Any], tuple[Any, ...]]) -> None:
        self.reduced = reduced

    def __reduce__(self) -> tuple[Callable[..., Any], tuple[Any, ...]]:
        return self.reduced


def aside(value: Any) -> Any:
    """Unpickles an :class:`Aside`'s place in a value: what was rebuilt from it."""
    return value


def _from_side(index: int) -> Any:
    item = _local.side[index]
    kind = type(item)
    if kind is Aside:  # unpacked where it was packed (no message between): rebuilt once
        built = item.reduced[0](*item.reduced[1])
        _local.side[index] = built
        return built
    if kind is rref_keeper.Arriving:  # an RRef that came in a message (rref_keeper.Carried)
        return item.rref()
    # An RRef unpacked where it was packed (no message between) is still wrapped.
    return item.rref if kind is rref_keeper.Carried else item


class _Pickler(cloudpickle.Pickler):  # type: ignore[misc]  # cloudpickle is untyped (Any)
    """cloudpickle, with tensors and RRefs set aside for torch RPC's pickler.

    A code object pickled by value (a lambda passed as an argument) keeps its file name
    (:func:`~actorrt.runtime.shipping.keep_file_name`).
    """

    def __init__(self, file: io.BytesIO, road: Callable[[torch.Tensor], Any] | None) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.side: list[Any] = []
        self._road = road

    def reducer_override(self, obj: Any) -> Any:
        # Called for every object but the builtin atoms and containers, so plain data costs
        # nothing extra here.
        if isinstance(obj, torch.Tensor):
            if type(obj) is not torch.Tensor or obj.__dict__:
                form = _subclass_form(obj)  # class and attributes by cloudpickle, data aside
                if form is not None:
                    return form
            if obj.layout is not _STRIDED or obj.is_meta or obj.is_nested:
                return _sendable_form(obj)  # its parts are pickled (and set aside) in turn
            self.side.append(obj if self._road is None else self._road(obj))
            return _from_side, (len(self.side) - 1,)
        if type(obj) is rref_keeper.Carried or type(obj) is Aside:  # torch RPC carries them
            self.side.append(obj)
            return _from_side, (len(self.side) - 1,)
        if isinstance(obj, PyRRef):
            if obj.is_owner():  # the receiver's torch has nothing to confirm
                self.side.append(obj)
            else:
                # Held here until the receiver accepted it (from its pickling on, per
                # fork), and there from its arrival on, so that torch's C++ never drops
                # its last reference (see rref_keeper).
                self.side.append(rref_keeper.Carried(obj))
            return _from_side, (len(self.side) - 1,)
        if type(obj) is CodeType:
            return keep_file_name(self, obj)
        return _cloudpickle_reduce(self, obj)


_STRIDED = torch.strided
# Sparse layouts with compressed indices: (compressed indices, plain indices) getters.
_COMPRESSED = {
    torch.sparse_csr: ("crow_indices", "col_indices"),
    torch.sparse_bsr: ("crow_indices", "col_indices"),
    torch.sparse_csc: ("ccol_indices", "row_indices"),
    torch.sparse_bsc: ("ccol_indices", "row_indices"),
}


def _sendable_form(tensor: torch.Tensor) -> tuple[Callable[..., torch.Tensor], tuple[Any, ...]]:
    """A tensor torch RPC cannot send as it is, as a reduction over plain tensors.

    torch's serialization handles strided tensors alone, whatever the layout it lets
    through: a CSC, BSR or BSC sparse tensor or an MKL-DNN one aborts the sending process
    inside TensorPipe ("Cannot access storage of ..."), a CSR one fails as a reply, and a
    meta tensor is refused only inside the RPC agent, after the call was numbered. So a
    sparse or MKL-DNN tensor travels as its parts (strided tensors, each taking the peer's
    road like any other) and is rebuilt on arrival; a meta or nested tensor fails its own
    call, at its call site, naming what to send instead.

    Raises:
        TypeError: ``tensor`` has no data (meta) or is nested.
    """
    if tensor.is_meta:
        raise TypeError(
            f"a meta tensor (shape {tuple(tensor.shape)}, {tensor.dtype}) has no data to "
            "send: send its shape and dtype, or a tensor on the CPU or a GPU"
        )
    if tensor.is_nested:
        raise TypeError(
            "a nested tensor cannot travel through torch RPC: send t.unbind() (a list of "
            "tensors) or t.to_padded_tensor(0) instead"
        )
    layout, grad = tensor.layout, tensor.requires_grad
    tensor = tensor.detach()
    if layout is torch.sparse_coo:
        coo = (tensor._indices(), tensor._values(), tensor.is_coalesced())
        return _sparse_coo, (coo, tuple(tensor.shape), grad)
    getters = _COMPRESSED.get(layout)
    if getters is not None:
        compressed, plain = (getattr(tensor, name)() for name in getters)
        parts = (compressed, plain, tensor.values(), layout)
        return _sparse_compressed, (parts, tuple(tensor.shape), grad)
    if layout is torch._mkldnn:  # type: ignore[attr-defined]  # private, but a real layout
        return _mkldnn, (tensor.to_dense(), grad)
    raise TypeError(
        f"a tensor of layout {layout} cannot travel through torch RPC: send t.to_dense()"
    )


def _subclass_form(
    tensor: torch.Tensor,
) -> tuple[Callable[..., torch.Tensor], tuple[Any, ...]] | None:
    """A tensor of a user's subclass, or one with attributes: its class, attributes, data.

    torch's pickler names the class by reference and the receiver's torch unpickles it
    before actorrt's code runs: a class of the driver's script (or of a module the
    receiver lacks) failed there, the call's number never reached the mailbox, and every
    later call from this process to the actor waited for good. It also drops the
    attributes of a plain tensor (``t.tag = ...``), which pickle keeps. Here the class
    and the ``__dict__`` go through cloudpickle, unpickled on the actor's thread (a
    class of ``__main__`` by value), and the data travels as a plain tensor.

    Returns:
        None for what torch's pickler sends as it is: torch's own subclasses
        (``nn.Parameter``...), which every process imports, and wrapper subclasses of
        importable modules.

    Raises:
        TypeError: The class overrides ``__torch_dispatch__`` (a wrapper subclass, whose
            data is not its own storage) and cloudpickle would carry it by value.
    """
    cls = type(tensor)
    if cls is not torch.Tensor and (
        cls.__module__ == "torch" or cls.__module__.startswith("torch.")
    ):
        return None
    if cls.__torch_dispatch__ is not torch._C._disabled_torch_dispatch_impl:
        if cls.__module__ == "__main__" or "<locals>" in cls.__qualname__:
            raise TypeError(
                f"a tensor of {cls.__qualname__}, a subclass with __torch_dispatch__ defined "
                "in the script, cannot travel: define the class in a module that every "
                "process imports, or send the tensors it wraps"
            )
        return None
    state = dict(tensor.__dict__)
    plain = tensor.detach().as_subclass(torch.Tensor)
    return _subclass, (cls, plain, state, tensor.requires_grad)


def _subclass(
    cls: type[torch.Tensor], plain: torch.Tensor, state: dict[str, Any], grad: bool
) -> torch.Tensor:
    rebuilt = plain.as_subclass(cls)
    rebuilt.__dict__.update(state)
    return rebuilt.requires_grad_(grad)


def _sparse_coo(parts: tuple[Any, ...], shape: tuple[int, ...], grad: bool) -> torch.Tensor:
    indices, values, coalesced = parts
    # The parts came from a valid tensor: checking them again would only cost (and warn).
    rebuilt = torch.sparse_coo_tensor(
        indices, values, shape, is_coalesced=coalesced, check_invariants=False
    )
    return rebuilt.requires_grad_(grad)


def _sparse_compressed(parts: tuple[Any, ...], shape: tuple[int, ...], grad: bool) -> torch.Tensor:
    compressed, plain, values, layout = parts
    rebuilt = torch.sparse_compressed_tensor(
        compressed, plain, values, shape, layout=layout, check_invariants=False
    )
    return rebuilt.requires_grad_(grad)


def _mkldnn(dense: torch.Tensor, grad: bool) -> torch.Tensor:
    return dense.to_mkldnn().requires_grad_(grad)


# Called as a plain function: super() per object cost a measurable share of packing
# values made of many small objects.
_cloudpickle_reduce = cloudpickle.Pickler.reducer_override


def pack(value: Any, road: Callable[[torch.Tensor], Any] | None = None) -> Wire:
    """Packs ``value`` for the wire; ``road`` rewrites each tensor on the way out.

    Raises:
        Exception: Whatever pickling raised (a lock, an open file, a ctypes pointer, a
            value nested too deeply); the caller turns it into its own error.
    """
    plain = _plain(value)
    if plain == _PLAIN:
        return _unpickled(value, None)
    if plain == _PLAIN_WITH_TENSORS:
        return _unpickled(value, road)
    return _pickle(value, road)


def _unpickled(value: Any, road: Callable[[torch.Tensor], Any] | None) -> Wire:
    """The wire of a plain value: its containers copied now, its tensors on ``road``."""
    return None, [snapshot(value if road is None else map_tensors(value, road))]


def _pickle(value: Any, road: Callable[[torch.Tensor], Any] | None) -> Wire:
    buffer = io.BytesIO()
    pickler = _Pickler(buffer, road)
    outer = getattr(_local, "packing", False)
    pins = getattr(_local, "pins", None)
    holds = getattr(_local, "holds", None)
    if outer:  # a value packed while packing another is no call's arguments, nor reply
        _local.pins = _local.holds = None
    _local.packing = True
    try:
        pickler.dump(value)
    finally:
        _local.packing = outer
        _local.pins = pins
        _local.holds = holds
    return buffer.getvalue(), pickler.side


def _tensor_bytes(value: Any) -> int:
    """The bytes of the tensors inside a plain value (see :func:`_plain`)."""
    if type(value) is torch.Tensor:
        return int(value.nbytes)
    if type(value) is dict:
        value = value.values()
    elif type(value) not in (tuple, list):
        return 0
    return sum(_tensor_bytes(item) for item in value)


def pack_or_measure(value: Any, peer: str, road_for: RoadFor, keep_from: int) -> Wire | int:
    """:func:`pack_for` of ``value``, or its size when that is at least ``keep_from`` bytes.

    The size is its tensors' bytes plus its pickled bytes, measured before any tensor
    takes the peer's road, so a value that is then kept (not sent) cost no copy.

    Raises:
        Exception: What :func:`pack` raises.
    """
    if type(value) is tuple and len(value) == 2 and type(value[1]) in _ATOMS:
        return None, [value]  # a reply (status, atom): nothing to measure
    plain = _plain(value)
    if plain == _PLAIN:
        return _unpickled(value, None)
    if plain == _PLAIN_WITH_TENSORS:
        size = _tensor_bytes(value)
        if size >= keep_from:
            return size
        return _unpickled(value, road_for(peer))
    blob, side = _pickle(value, None)
    size = len(blob or b"") + sum(int(t.nbytes) for t in side if isinstance(t, torch.Tensor))
    if size >= keep_from:
        return size
    road = road_for(peer)
    if road is not None:  # the road is per tensor: taking it after pickling is the same
        side = [road(t) if isinstance(t, torch.Tensor) else t for t in side]
    return blob, side


RoadFor = Callable[[str], Callable[[torch.Tensor], Any] | None]
"""``road_for(peer)``: the road of each tensor sent to ``peer`` (None: as it is)."""


def pack_for(value: Any, peer: str, road_for: RoadFor) -> Wire:
    """:func:`pack` of ``value`` for ``peer``, asking ``road_for(peer)`` only when needed.

    Most replies are plain values, and finding a peer's road costs more than packing one.

    Raises:
        Exception: What :func:`pack` raises.
    """
    if (
        type(value) is tuple
        and len(value) == 2
        and type(value[0]) in _ATOMS
        and type(value[1]) in _ATOMS
    ):
        return None, [value]  # e.g. a reply (status, atom): the commonest value of all
    if _plain(value) == _PLAIN:
        return _unpickled(value, None)
    return pack(value, road_for(peer))


def pack_args(
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    peer: str,
    road_for: RoadFor,
    pins: list[Any] | None = None,
) -> Wire:
    """:func:`pack_for` of a call's ``(args, kwargs)``, atoms checked in one loop.

    Args:
        args: The call's positional arguments.
        kwargs: Its keyword arguments.
        peer: The process it goes to.
        road_for: The road of each tensor sent to a peer.
        pins: Given, what the sender must keep until the call's reply: the refs inside
            the arguments append themselves (:func:`call_pins`), and travel borrowed
            for the call, without a lease of their own.

    Raises:
        Exception: What :func:`pack` raises.
    """
    if len(args) <= _PLAIN_WIDTH and len(kwargs) <= _PLAIN_WIDTH:
        for item in args:
            if type(item) not in _ATOMS:
                break
        else:
            for item in kwargs.values():
                if type(item) not in _ATOMS:
                    break
            else:
                return None, [(args, kwargs)]
    outer = getattr(_local, "pins", None)
    _local.pins = pins
    try:
        return pack_for((args, kwargs), peer, road_for)
    finally:
        _local.pins = outer


def call_pins() -> list[Any] | None:
    """What a call's sender keeps until its reply, while its arguments are packed; else None.

    A ref packed inside them appends itself: it travels borrowed for the call.
    """
    return getattr(_local, "pins", None) if getattr(_local, "packing", False) else None


class ReplyHolds:
    """The holds a reply's refs ask of its sender, gathered while it is packed.

    Attributes:
        own: The ids of this process's objects whose refs go in it, once per copy: the
            receiver holds each directly, counted here as the reply goes.
        handed: ``(ref, owner, object id)`` of each ref of another process's object in
            it: the receiver holds each directly too, and this process keeps ``ref``
            (and so its own hold) until the owner heard so.
        measuring: The value is only measured (``actorrt.put``), never sent: a ref whose
            call has not answered is not lent for it (it is lent when the value is
            fetched).
    """

    __slots__ = ("own", "handed", "measuring")

    def __init__(self, measuring: bool = False) -> None:
        self.own: list[str] = []
        self.handed: list[tuple[Any, str, str]] = []
        self.measuring = measuring

    def clear(self) -> None:
        """Forgets them all: the pack they were gathered in was not sent."""
        self.own.clear()
        self.handed.clear()


class holds_in_reply:  # noqa: N801  # used as a function: ``with holds_in_reply() as holds``
    """Around the packing of a reply: the :class:`ReplyHolds` that :func:`reply_holds` fills.

    The caller clears it for a pack it does not send (a result measured, then kept). A
    class, not ``contextlib.contextmanager``: every reply enters it, and this costs a
    third as much (0.4 against 1.2 us here).
    """

    __slots__ = ("_holds", "_outer")

    def __init__(self, measuring: bool = False) -> None:
        self._holds = ReplyHolds(measuring)

    def __enter__(self) -> ReplyHolds:
        self._outer = getattr(_local, "holds", None)
        _local.holds = self._holds
        return self._holds

    def __exit__(self, *exc: object) -> None:
        _local.holds = self._outer


def reply_holds() -> ReplyHolds | None:
    """While a reply is packed, the holds its refs ask of this process; else None.

    Filled while :func:`holds_in_reply` is on. A ref of an object of this process
    travels held directly by the reply's receiver (this process counts that hold as
    it sends the reply), with no lease; so does a ref of another process's object,
    handed over (see :class:`ReplyHolds`).
    """
    return getattr(_local, "holds", None) if getattr(_local, "packing", False) else None


def packing() -> bool:
    """True while this thread packs a value for a call: RRefs inside travel by torch RPC.

    An actor handle asks this when it is pickled: outside a pack, its RRef could not
    travel (torch pickles RRefs only inside its own RPC messages).
    """
    return getattr(_local, "packing", False)


def unpack(wire: Wire) -> Any:
    """The value packed by :func:`pack` (on any process).

    Raises:
        Exception: Whatever unpickling raised (e.g. a module this process cannot import).
    """
    blob, side = wire
    if blob is None:
        return side[0]
    outer = getattr(_local, "side", None)  # a value unpacked while unpacking another
    _local.side = side
    try:
        return pickle.loads(blob)
    finally:
        _local.side = outer
