"""Same-host zero-copy for large CPU tensors: a pool of reusable shared-memory segments.

TensorPipe moves a large CPU tensor between two processes of one host by copying it
into memory the receiver has just allocated, which page-faults page by page (far below
memcpy speed; figures in docs/performance.md). Here the caller copies the tensor once into a
segment of its own pool (memfd memory that stays mapped and faulted in, so the copy
runs at memcpy speed), and the message carries only a small handle; the receiver maps
the segment (once per segment) and gets a tensor over it without copying.

Lifetime: a segment is lent to one tensor at a time. Byte 0 of its header is a "busy"
flag the sender sets when it fills the segment; the receiver clears it when the last
reference to the tensor it built is gone (a ``weakref.finalize`` on the buffer under
the tensor's storage). The sender only reuses a segment whose flag is clear, so a
receiver never sees memory refilled under it; a header generation number, checked on
attach, turns any violation into an error instead of wrong data. A segment whose
receiver died stays busy (the pool then grows up to its limit, then falls back to
TensorPipe).

Objects made by ``actorrt.put`` of large CPU tensors (one, or a state dict) take a
second form of this road (:func:`seal`): the owner copies the tensors once into a memfd
of its own, kept as long as the object, and the object's location carries a handle to it
(:class:`Sealed`). A process of the same host reads the object by mapping that memfd
copy-on-write (:func:`open_sealed`), with no request to the owner and no copy; one of
another host, or one that cannot map it, fetches it from the owner as before. The
memfd's inode and the object's id in its header, checked on every mapping, tell a handle
whose memfd was closed, or holds another object now, from a live one.

Whether a peer can map our segments is learned once per peer by a probe call
(same host, same PID namespace, same user: it opens ``/proc/<our pid>/fd/<fd>``);
until the probe answers, calls go the ordinary way.

Environment: ``ACTORRT_SHM=0`` turns this off; ``ACTORRT_SHM_THRESHOLD`` (bytes,
default 1 MiB) is the smallest tensor that takes this road, and the fewest tensor bytes
a put is sealed with; ``ACTORRT_SHM_POOL_BYTES`` (default 2 GiB) caps each process's
pool, and apart from it the memfds of its sealed objects; ``ACTORRT_SHM_COPY_THREADS``
(default: cores, at most 4) is how many threads share a large copy into the pool. It
is also off when ``ACTORRT_TP_TRANSPORTS`` forces transports without ``shm`` (e.g.
TCP-only runs).
"""

from __future__ import annotations

import collections
import copy
import ctypes
import fcntl
import math
import mmap
import os
import pickle
import secrets
import struct
import threading
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple

import numpy as np
import torch

__all__ = [
    "Sealed",
    "ShmTensor",
    "drop_free_sealed",
    "enabled",
    "forget_all",
    "forget_dead",
    "open_sealed",
    "peer_ok",
    "rpc_probe",
    "seal",
    "swap_one",
    "unseal",
]

_HEADER = 4096  # flag at byte 0, generation (u64) at byte 8; data is page aligned
_MIN_SEGMENT = 1 << 20


def _env_enabled() -> bool:
    if os.environ.get("ACTORRT_SHM", "1").strip() in ("0", "false", "no", "off"):
        return False
    forced = os.environ.get("ACTORRT_TP_TRANSPORTS", "").strip()
    if forced and "shm" not in [t.strip() for t in forced.split(",")]:
        return False
    return hasattr(os, "memfd_create") and os.path.isdir(f"/proc/{os.getpid()}/fd")


THRESHOLD = max(1, int(os.environ.get("ACTORRT_SHM_THRESHOLD", str(1 << 20))))
POOL_LIMIT = int(os.environ.get("ACTORRT_SHM_POOL_BYTES", str(2 << 30)))


def enabled() -> bool:
    """Whether this process may use the shared-memory road (read from the environment)."""
    return _env_enabled()


class _Segment:
    __slots__ = ("fd", "capacity", "mm", "data", "address", "generation", "filled")

    def __init__(self, capacity: int) -> None:
        self.fd = os.memfd_create("actorrt-shm", os.MFD_CLOEXEC)
        os.ftruncate(self.fd, _HEADER + capacity)
        self.capacity = capacity
        self.mm = mmap.mmap(self.fd, _HEADER + capacity)
        arr = np.frombuffer(self.mm, dtype=np.uint8, count=capacity, offset=_HEADER)
        self.data = torch.from_numpy(arr)
        self.address = self.data.data_ptr()
        self.generation = 0
        self.filled = False  # whether it was written to yet (see _fill)


def _capacity(nbytes: int) -> int:
    """The segment size that holds ``nbytes``: a power of two, at least 1 MiB."""
    return max(_MIN_SEGMENT, 1 << (nbytes - 1).bit_length())


class _Pool:
    """This process's segments, lent to one outgoing tensor at a time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._segments: list[_Segment] = []
        self._bytes = 0

    def acquire(self, nbytes: int) -> _Segment | None:
        capacity = _capacity(nbytes)
        with self._lock:
            for seg in self._segments:
                if seg.capacity == capacity and seg.mm[0] == 0:
                    break
            else:
                if self._bytes + capacity > POOL_LIMIT:
                    return None
                seg = _Segment(capacity)
                self._segments.append(seg)
                self._bytes += capacity
            seg.generation += 1
            struct.pack_into("<Q", seg.mm, 8, seg.generation)
            seg.mm[0] = 1
            return seg


_pool = _Pool()


_Fields = tuple[int, int, int, int, torch.dtype, tuple[int, ...]]
"""What :func:`_attach` maps a tensor from: pid, fd, capacity, generation, dtype, shape."""


class ShmTensor:
    """What travels instead of a large CPU tensor; unpickles as a tensor over shared memory."""

    __slots__ = ("pid", "fd", "capacity", "generation", "dtype", "shape")

    def __init__(self, seg: _Segment, tensor: torch.Tensor) -> None:
        self.pid = os.getpid()
        self.fd = seg.fd
        self.capacity = seg.capacity
        self.generation = seg.generation
        self.dtype = tensor.dtype
        self.shape = tuple(tensor.shape)

    def __reduce__(self) -> tuple[Callable[..., torch.Tensor], _Fields]:
        return (
            _attach,
            (self.pid, self.fd, self.capacity, self.generation, self.dtype, self.shape),
        )


def _put(t: torch.Tensor) -> torch.Tensor | ShmTensor:
    nbytes = t.nbytes
    seg = _pool.acquire(nbytes)
    if seg is None:
        return t
    try:
        _fill(seg, t)
    except BaseException:
        seg.mm[0] = 0
        raise
    seg.filled = True
    return ShmTensor(seg, t)


def _fill(seg: _Segment, t: torch.Tensor, offset: int = 0) -> None:
    """Copies ``t``'s values into ``seg``, ``offset`` bytes after its first data byte.

    A new segment is written with ``pwrite``: the kernel then makes its pages as it
    copies, about twice as fast here as faulting each one in through our mapping
    (figures in docs/performance.md). Into pages that exist, a plain copy is faster.
    """
    if not seg.filled and t.is_contiguous() and _written(seg, t, offset):
        return
    if t.is_contiguous():
        _copy(seg.address + offset, t.data_ptr(), t.nbytes)
    else:
        seg.data[offset : offset + t.nbytes].view(t.dtype).view(t.shape).copy_(t)


def _written(seg: _Segment, t: torch.Tensor, offset: int) -> bool:
    """Writes contiguous ``t`` into ``seg`` through its file; False if numpy cannot view it."""
    try:
        view = memoryview(t.reshape(-1).view(torch.uint8).numpy().data)
    except (RuntimeError, TypeError, ValueError):
        return False
    at = _HEADER + offset
    while len(view):
        done = os.pwrite(seg.fd, view, at)
        view, at = view[done:], at + done
    return True


# Large copies are split over a few threads, each one plain memcpy with the GIL released: one
# thread does not saturate memory bandwidth (figures: docs/performance.md). Not torch's
# copy_: it splits over OpenMP threads, which spin and stall badly when cores are busy.
_CHUNK = 32 << 20  # the smallest share worth a thread
_COPY_THREADS = max(1, int(os.environ.get("ACTORRT_SHM_COPY_THREADS", min(4, os.cpu_count() or 1))))
_copiers: ThreadPoolExecutor | None = None
_copiers_lock = threading.Lock()


def _copy(dst: int, src: int, nbytes: int) -> None:
    global _copiers
    parts = min(_COPY_THREADS, nbytes // _CHUNK)
    if parts <= 1:
        ctypes.memmove(dst, src, nbytes)
        return
    with _copiers_lock:
        if _copiers is None:
            _copiers = ThreadPoolExecutor(_COPY_THREADS - 1, thread_name_prefix="actorrt-copy")
    step = (nbytes // parts) & ~4095  # page-aligned shares; the first takes the rest
    head = nbytes - step * (parts - 1)
    helpers = [
        _copiers.submit(ctypes.memmove, dst + head + i * step, src + head + i * step, step)
        for i in range(parts - 1)
    ]
    ctypes.memmove(dst, src, head)
    for helper in helpers:
        helper.result()


def _large_cpu(t: torch.Tensor) -> bool:
    return (
        t.device.type == "cpu"
        and t.layout == torch.strided
        and not t.requires_grad
        and not t.is_quantized
        and t.nbytes >= THRESHOLD
    )


def swap_one(t: torch.Tensor) -> torch.Tensor | ShmTensor:
    """A handle over a shared-memory copy of ``t`` when it is a large CPU tensor, else ``t``.

    Only for a peer that :func:`peer_ok` approved.
    """
    if _large_cpu(t):
        if t.is_conj() or t.is_neg():  # a lazy view: its bytes are not its values
            t = t.resolve_conj().resolve_neg()
        return _put(t)
    return t


# -- sealed objects: a memfd per object, read in place by the processes of its host ---
#
# Fresh shared pages cost far more than the copy into them (zeroed and faulted in one by
# one: figures in docs/performance.md), so a freed object's memfd is used again, as the
# pool's segments are, once nothing maps it any more. Who maps it is counted by the
# kernel: every mapping (the owner's own value included) holds a shared ``flock`` on an
# open file of its own, dropped with the mapping's last tensor or with its process, and
# the owner takes a memfd again only when an exclusive ``flock`` succeeds.

_TAG = slice(16, 16 + 64)  # the object's id, in a sealed memfd's header
_sealed_bytes = 0  # capacity of every memfd made here for sealed objects, free or not
_sealed_lock = threading.Lock()
_sealed_free: list[_Segment] = []  # memfds of freed objects, to be used again
_sealed_live: dict[int, _Segment] = {}  # by fd: the memfds of live objects
_where: tuple[str, int, int] | None = None


def _host() -> tuple[str, int, int]:
    """This host (boot id), PID namespace and network namespace.

    Within one PID namespace a ``(pid, fd)`` pair means the same memfd. The network
    namespace is there for the plan's sake: processes in another one are placed as
    another host (and tested as one, ``ip netns``), so they fetch as another host does.
    """
    global _where
    if _where is None:
        try:
            with open("/proc/sys/kernel/random/boot_id") as boot:
                host = boot.read().strip()
        except OSError:
            host = ""
        pid_ns, net_ns = (os.stat(f"/proc/self/ns/{ns}").st_ino for ns in ("pid", "net"))
        _where = (host, pid_ns, net_ns)
    return _where


class Sealed(NamedTuple):
    """Where a sealed object's bytes lie: what its location carries (plain data)."""

    where: tuple[str, int, int]  # the owner's host (boot id), PID and network namespaces
    pid: int
    fd: int
    inode: int  # of the memfd: a reused fd number names another one
    nbytes: int
    tag: bytes  # the object's id, also in the memfd's header: a memfd used again differs
    layout: Any  # the value, each tensor in it a _Slot


class _Slot(NamedTuple):
    """Where one tensor of a sealed value lies in its memfd."""

    offset: int  # from the first data byte; a multiple of _ALIGN
    dtype: torch.dtype
    shape: tuple[int, ...]


_ALIGN = 64  # each tensor's offset: any dtype's alignment, and a cache line
_ATOMS = (str, bytes, int, float, bool, type(None))
_MAX_LAYOUT_ITEMS = 4096  # tensors and atoms of a value sealed, at most
_MAX_LAYOUT_BYTES = 16 << 10  # its layout pickled, at most: every copy of its ref carries it


class _Unsealable(Exception):
    """Raised while laying out a value that is not tensors in dicts, lists and tuples."""


def _layout(value: Any) -> tuple[Any, list[tuple[torch.Tensor, int]], int]:
    """``value``, each tensor a :class:`_Slot`; each tensor and its offset; their bytes.

    Raises:
        _Unsealable: Something in it is not a dict, list, tuple, atom or a CPU tensor
            that can be copied as bytes, or it holds too many items.
    """
    tensors: list[tuple[torch.Tensor, int]] = []
    # A plain recursive function, not a closure: a closure that calls itself is a
    # reference cycle, which kept the tensors put until the next garbage collection.
    counts = [0, 0]
    layout = _lay(value, tensors, counts)
    return layout, tensors, counts[0]


def _lay(x: Any, tensors: list[tuple[torch.Tensor, int]], counts: list[int]) -> Any:
    """:func:`_layout` of ``x``; ``counts`` is [bytes laid out so far, items seen]."""
    counts[1] += 1
    if counts[1] > _MAX_LAYOUT_ITEMS:
        raise _Unsealable
    if type(x) is torch.Tensor:
        if x.device.type != "cpu" or x.layout != torch.strided or x.requires_grad:
            raise _Unsealable
        if x.is_quantized or x.is_conj() or x.is_neg():  # bits its bytes do not hold
            raise _Unsealable
        offset = -(-counts[0] // _ALIGN) * _ALIGN
        counts[0] = offset + x.nbytes
        tensors.append((x, offset))
        return _Slot(offset, x.dtype, tuple(x.shape))
    if type(x) in _ATOMS:
        return x
    if type(x) in (dict, collections.OrderedDict):
        out = copy.copy(x)  # an OrderedDict keeps its attributes (a state dict's _metadata)
        out.clear()
        for k, v in x.items():
            if type(k) not in _ATOMS:
                raise _Unsealable
            out[k] = _lay(v, tensors, counts)
        return out
    if type(x) in (list, tuple):
        return type(x)(_lay(v, tensors, counts) for v in x)
    raise _Unsealable


def _rebuild(layout: Any, data: torch.Tensor) -> Any:
    """The value ``layout`` lays out, its tensors views of ``data`` (the memfd's bytes)."""
    if type(layout) is _Slot:
        nbytes = math.prod(layout.shape) * layout.dtype.itemsize
        flat = data[layout.offset : layout.offset + nbytes]
        return flat.view(layout.dtype).view(layout.shape)
    if type(layout) in (dict, collections.OrderedDict):
        out = copy.copy(layout)
        for k, v in layout.items():
            out[k] = _rebuild(v, data)
        return out
    if type(layout) in (list, tuple):
        return type(layout)(_rebuild(v, data) for v in layout)
    return layout


def _unmapped(seg: _Segment) -> bool:
    """Whether no process maps ``seg`` (it holds no shared lock); if so, it is ours."""
    try:
        fcntl.flock(seg.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    return True


def _segment_for(nbytes: int, tag: bytes) -> _Segment | None:
    """A memfd for a new sealed object, tagged ``tag``: a free one nothing maps, or new."""
    global _sealed_bytes
    capacity = _capacity(nbytes)
    with _sealed_lock:
        for seg in _sealed_free:
            if seg.capacity == capacity and _unmapped(seg):
                _sealed_free.remove(seg)
                # Tagged while no reader can lock it: a reader of the object it held
                # before finds the new tag and fetches from the owner instead.
                _write_tag(seg, tag)
                fcntl.flock(seg.fd, fcntl.LOCK_UN)
                return seg
        while _sealed_bytes + capacity > POOL_LIMIT and _sealed_free:
            _drop(_sealed_free.pop(0))
        if _sealed_bytes + capacity > POOL_LIMIT:
            return None
        _sealed_bytes += capacity
    try:
        seg = _Segment(capacity)
    except BaseException:
        with _sealed_lock:
            _sealed_bytes -= capacity
        raise
    _write_tag(seg, tag)
    return seg


def _padded(tag: bytes) -> bytes:
    """``tag`` as the header holds it: the whole field, zeros after it."""
    return tag.ljust(_TAG.stop - _TAG.start, b"\0")


def _write_tag(seg: _Segment, tag: bytes) -> None:
    seg.mm[_TAG] = _padded(tag)


def _drop(seg: _Segment) -> None:
    """Under the lock: closes a free memfd for good."""
    global _sealed_bytes
    _sealed_bytes -= seg.capacity
    os.close(seg.fd)


def seal(value: Any, tag: str) -> tuple[Any, Sealed] | None:
    """Copies ``value``'s tensors into one memfd: the copy (mapped as readers map it), a handle.

    ``value`` is a CPU tensor, or dicts, lists and tuples of CPU tensors and atoms (a
    state dict), whose tensors add up to at least :data:`THRESHOLD` bytes. None for
    anything else, when sealed objects already hold ``ACTORRT_SHM_POOL_BYTES``, or when
    no memfd can be made (out of file descriptors): the object is then fetched from its
    owner as before. Give the handle back with :func:`unseal` when the object goes.
    """
    try:
        layout, tensors, nbytes = _layout(value)
    except _Unsealable:
        return None
    if nbytes < THRESHOLD or len(pickle.dumps(layout)) > _MAX_LAYOUT_BYTES:
        return None
    mark = tag.encode()[: _TAG.stop - _TAG.start]
    try:
        seg = _segment_for(nbytes, mark)
    except OSError:  # no memfd to be had (EMFILE, ENOMEM): kept as it is instead
        return None
    if seg is None:
        return None
    try:
        for t, offset in tensors:
            _fill(seg, t, offset)
        seg.filled = True
        inode = os.fstat(seg.fd).st_ino
        handle = Sealed(_host(), os.getpid(), seg.fd, inode, nbytes, mark, layout)
        copy = open_sealed(handle)  # the owner's own value is one more mapping
    except BaseException:
        with _sealed_lock:
            _sealed_free.append(seg)
        raise
    if copy is None:  # it cannot map its own memfd (no /proc?): kept as it is instead
        with _sealed_lock:
            _sealed_free.append(seg)
        return None
    with _sealed_lock:
        _sealed_live[seg.fd] = seg
    return copy, handle


def unseal(handle: Sealed) -> None:
    """At the owner, as the object goes: its memfd is free to be used again.

    Again only once no process maps it (the owner's own tensors of it included).
    """
    with _sealed_lock:
        seg = _sealed_live.pop(handle.fd, None)
        if seg is not None:
            _write_tag(seg, b"")  # a late reader of it asks the owner, who says it is gone
            _sealed_free.append(seg)


def drop_free_sealed() -> None:
    """Closes the free memfds of sealed objects (the cluster ended)."""
    with _sealed_lock:
        while _sealed_free:
            _drop(_sealed_free.pop())


def open_sealed(handle: Sealed) -> Any:
    """The sealed value, its tensors mapped copy-on-write; None if it cannot be mapped here.

    Writing to its tensors changes this process's pages only. None (fetch it from the owner
    instead) on another host, without access to the owner's ``/proc``, or when the
    handle's memfd no longer holds its object (freed: the owner then answers why).
    """
    if handle.where != _host():
        return None
    try:
        local = os.open(f"/proc/{handle.pid}/fd/{handle.fd}", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        info = os.fstat(local)
        if info.st_ino != handle.inode or info.st_size < _HEADER + handle.nbytes:
            raise OSError("another file")
        fcntl.flock(local, fcntl.LOCK_SH | fcntl.LOCK_NB)  # held while it is mapped here
        mm = mmap.mmap(
            local,
            _HEADER + handle.nbytes,
            flags=mmap.MAP_PRIVATE,
            prot=mmap.PROT_READ | mmap.PROT_WRITE,
        )
        if mm[_TAG] != _padded(handle.tag):
            raise OSError("another object")
    except (OSError, ValueError):
        os.close(local)
        return None
    arr = np.frombuffer(mm, dtype=np.uint8, count=handle.nbytes, offset=_HEADER)
    weakref.finalize(arr, os.close, local)  # its lock goes with the last tensor of it
    return _rebuild(handle.layout, torch.from_numpy(arr))


# -- which peers can map our segments ------------------------------------------------

_peers: dict[str, bool | None] = {}  # None: probe in flight
_UNKNOWN = object()
_probe_seg: _Segment | None = None
_probe_lock = threading.Lock()


def peer_ok(peer: str) -> bool:
    """Whether ``peer`` proved it can map our segments (the first ask starts a probe)."""
    state = _peers.get(peer, _UNKNOWN)
    if state is _UNKNOWN:
        _start_probe(peer)
        return False
    return bool(state)


def _start_probe(peer: str) -> None:
    global _probe_seg
    import torch.distributed.rpc as rpc

    with _probe_lock:
        if peer in _peers:
            return
        _peers[peer] = None
        if _probe_seg is None:
            _probe_seg = _Segment(_MIN_SEGMENT)
            _probe_seg.mm[16:32] = secrets.token_bytes(16)
        seg = _probe_seg
    try:
        fut = rpc.rpc_async(peer, rpc_probe, args=(os.getpid(), seg.fd, bytes(seg.mm[16:32])))
    except Exception:
        _peers[peer] = False
        return

    def done(f: torch.futures.Future[bool]) -> None:
        try:
            _peers[peer] = bool(f.value())
        except Exception:
            _peers[peer] = False

    fut.add_done_callback(done)


def rpc_probe(pid: int, fd: int, magic: bytes) -> bool:
    """Runs on the peer: can it open and read the caller's probe segment?"""
    try:
        mm = _map(pid, fd, _MIN_SEGMENT)
    except OSError:
        return False
    return bytes(mm[16:32]) == magic


# -- the receiving side --------------------------------------------------------------

_maps: dict[tuple[int, int, int], mmap.mmap] = {}
_maps_lock = threading.Lock()


def _map(pid: int, fd: int, capacity: int) -> mmap.mmap:
    path = f"/proc/{pid}/fd/{fd}"
    ino = os.stat(path).st_ino  # (pid, fd) may name another memfd after a restart
    key = (pid, fd, ino)
    mm = _maps.get(key)
    if mm is None:
        with _maps_lock:
            mm = _maps.get(key)
            if mm is None:
                local = os.open(path, os.O_RDWR)
                try:
                    mm = mmap.mmap(local, _HEADER + capacity)
                finally:
                    os.close(local)
                _maps[key] = mm
    return mm


def _gone(pid: int) -> bool:
    """Whether process ``pid`` has ended (a zombie has: its memory is gone with it)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            state = stat.read().rpartition(b")")[2].split()[0]
    except (OSError, IndexError):
        return True
    return state in (b"Z", b"X")


def forget_dead() -> int:
    """Drops the mappings of segments whose process ended (a peer died, or was replaced).

    A mapping keeps its segment's pages (up to a peer's whole pool) for as long as it is
    held; tensors still using one keep it mapped until they go.

    Returns:
        How many mappings it dropped.
    """
    with _maps_lock:
        dead = [key for key in _maps if _gone(key[0])]
        for key in dead:
            del _maps[key]
    return len(dead)


def forget_all() -> None:
    """Drops every mapping of a peer's segment (the cluster ended)."""
    with _maps_lock:
        _maps.clear()


def _release(mm: mmap.mmap) -> None:
    try:
        mm[0] = 0
    except ValueError:  # mapping closed at interpreter teardown
        pass


def _attach(
    pid: int, fd: int, capacity: int, generation: int, dtype: torch.dtype, shape: tuple[int, ...]
) -> torch.Tensor:
    mm = _map(pid, fd, capacity)
    if struct.unpack_from("<Q", mm, 8)[0] != generation or mm[0] != 1:
        raise RuntimeError(
            "actorrt shared-memory tensor: the segment was reused before this message was "
            "read (a lifetime bug in actorrt.runtime.shm; set ACTORRT_SHM=0 to work around)."
        )
    nbytes = int(np.prod(shape, dtype=np.int64)) * torch.empty((), dtype=dtype).element_size()
    arr = np.frombuffer(mm, dtype=np.uint8, count=nbytes, offset=_HEADER)
    weakref.finalize(arr, _release, mm)
    return torch.from_numpy(arr).view(dtype).view(shape)
