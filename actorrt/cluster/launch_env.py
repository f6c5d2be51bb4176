"""Reading a worker's place in the cluster from torchrun's or SLURM's environment.

The driver is its own process, rank 0, started by hand (or by the batch script); the
launcher starts only workers. So a launched process with launcher rank ``r`` of ``n``
becomes actorrt rank ``r + 1`` of ``n + 1``.

The driver's rendezvous address is, first found wins:

1. ``ACTORRT_INIT_METHOD`` (``tcp://HOST:PORT``);
2. ``MASTER_ADDR`` with ``ACTORRT_PORT``, else ``MASTER_PORT + 1``: torchrun's own agent
   store already listens on ``MASTER_PORT`` (static rendezvous), so actorrt takes the
   next port on the same host.

SLURM sets no ``MASTER_ADDR``: export ``ACTORRT_INIT_METHOD`` (or ``MASTER_ADDR``) in the
batch script.

It also holds the checks of what a user writes to say where a process belongs, which the
worker command and ``actorrt.start()`` share: :func:`parse_tcp_init_method` and
:func:`check_cuda_device_map`. Both run before anything connects, so a typo fails at once
with a message that shows the form, not after every rank has joined. This module
imports neither torch nor the runtime, so the command line stays fast.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass

from actorrt.errors import PlacementError
from actorrt.placement.device_flags import parse_cuda_device_map
from actorrt.placement.transports import FORK_SAFE_ENV

__all__ = [
    "CUDA_DEVICE_MAP_FORM",
    "LaunchEnv",
    "check_cuda_device_map",
    "from_environ",
    "heartbeat_interval",
    "init_method_from_environ",
    "parse_tcp_init_method",
    "set_fork_safety",
]

#: How a DI-engine style device map is written, in the words of the flags' help.
CUDA_DEVICE_MAP_FORM = "<peer rank>_<local gpu>_<peer gpu>,..."

_INIT_FORM = (
    "it must look like 'tcp://HOST:PORT' (e.g. tcp://10.0.0.1:29500, tcp://[fe80::1]:29500)"
)


@dataclass(frozen=True)
class LaunchEnv:
    """A worker's place as its launcher gave it, already shifted past the driver.

    Attributes:
        launcher: ``"torchrun"`` or ``"slurm"``.
        rank: actorrt rank (launcher rank + 1).
        world_size: actorrt world size (launcher world size + 1, for the driver).
        local_rank: Index of the process on its node (picks its GPU), if known.
        init_method: ``tcp://HOST:PORT`` of the driver, if the environment says it.
    """

    launcher: str
    rank: int
    world_size: int
    local_rank: int | None
    init_method: str | None


def _int(environ: Mapping[str, str], name: str) -> int | None:
    value = environ.get(name, "").strip()
    if not value:
        return None
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{name}={value!r} in the environment is not an integer.") from None


def init_method_from_environ(environ: Mapping[str, str]) -> str | None:
    """The driver's ``tcp://HOST:PORT`` from ``ACTORRT_INIT_METHOD`` or ``MASTER_ADDR``."""
    explicit = environ.get("ACTORRT_INIT_METHOD", "").strip()
    if explicit:
        return explicit
    addr = environ.get("MASTER_ADDR", "").strip()
    if not addr:
        return None
    port = _int(environ, "ACTORRT_PORT")
    if port is None:
        master_port = _int(environ, "MASTER_PORT")
        if master_port is None:
            return None
        port = master_port + 1
    host = f"[{addr}]" if ":" in addr else addr
    return f"tcp://{host}:{port}"


# (launcher, its rank, world size and local rank variables), in the order they are tried
_LAUNCHERS = (
    ("torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"),
    ("slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"),
)


def from_environ(environ: Mapping[str, str]) -> LaunchEnv | None:
    """The launch environment of torchrun (first) or SLURM, None if neither is there."""
    for launcher, rank_var, world_var, local_var in _LAUNCHERS:
        rank, world = _int(environ, rank_var), _int(environ, world_var)
        if rank is not None and world is not None:
            return LaunchEnv(
                launcher=launcher,
                rank=rank + 1,
                world_size=world + 1,
                local_rank=_int(environ, local_var),
                init_method=init_method_from_environ(environ),
            )
    return None


def parse_tcp_init_method(init_method: str, name: str = "init_method") -> tuple[str, int]:
    """Splits ``tcp://HOST:PORT`` into host and port, saying which part is wrong if any.

    Args:
        init_method: The address of rank 0's rendezvous, as the user wrote it.
        name: How the user gave it (``init_method``, ``--init-method``, a variable), for
            the message.

    Returns:
        ``(host, port)``; an IPv6 host comes without its brackets.

    Raises:
        ValueError: Naming the wrong part (scheme, host, port) and showing the form.
    """
    text = str(init_method).strip()
    shown = f"{name}={init_method!r}"
    scheme, sep, rest = text.partition("://")
    if not sep:
        raise ValueError(f"{shown} has no scheme; {_INIT_FORM}.")
    if scheme.lower() != "tcp":
        raise ValueError(
            f"{shown}: the scheme is {scheme!r}, but actorrt meets over TCP only; {_INIT_FORM}."
        )
    netloc = re.split(r"[/?#]", rest, maxsplit=1)[0]
    tail = rest[len(netloc) :]
    if tail not in ("", "/") or "@" in netloc:
        raise ValueError(f"{shown}: nothing may come before HOST or after PORT; {_INIT_FORM}.")
    if netloc.startswith("["):
        host, closed, after = netloc[1:].partition("]")
        if not closed or (after and not after.startswith(":")):
            raise ValueError(f"{shown}: the bracketed IPv6 HOST is malformed; {_INIT_FORM}.")
        port_text = after[1:]
    elif netloc.count(":") > 1:
        raise ValueError(f"{shown}: an IPv6 HOST goes in brackets; {_INIT_FORM}.")
    else:
        host, _, port_text = netloc.partition(":")
    if not host:
        raise ValueError(f"{shown} names no HOST (rank 0's address); {_INIT_FORM}.")
    if not port_text:
        raise ValueError(f"{shown} names no PORT; {_INIT_FORM}.")
    if not port_text.isdigit():
        raise ValueError(
            f"{shown}: PORT {port_text!r} is not a port number (1..65535); {_INIT_FORM}."
        )
    port = int(port_text)
    if port == 0:
        raise ValueError(
            f"{shown}: PORT 0 (any free port) is one the workers cannot know, pick one in "
            f"1..65535; {_INIT_FORM}."
        )
    if port > 65535:
        raise ValueError(f"{shown}: PORT {port} is out of range, a port is 1..65535; {_INIT_FORM}.")
    return host, port


def check_cuda_device_map(
    text: str | None, *, rank: int, world_size: int, name: str = "--cuda-device-map"
) -> None:
    """Checks one process's DI-engine style device map where it is given.

    ``"1_0_1,2_0_2"`` maps this process's GPU 0 to GPU 1 of rank 1 and to GPU 2 of rank 2
    (what ``actorrt worker --cuda-device-map`` and ``actorrt.start(cuda_device_map=)``
    take). Rank 0 applies every process's map when it plans, after all have joined;
    checking here fails a typo before anything connects.

    Args:
        text: The map as written (None or empty: nothing to check).
        rank: This process's rank (a map to itself is refused).
        world_size: Processes in the cluster, driver included (peer ranks are below it).
        name: How the user gave it (``--cuda-device-map``, ``cuda_device_map``).

    Raises:
        ValueError: Naming the entry that is malformed, names a rank outside the
            cluster or this process, or maps two GPUs onto one.
    """
    if text is None:
        return
    if not isinstance(text, str):
        raise ValueError(f"{name}={text!r} must be a string like '1_0_1,2_0_2'.")
    try:
        mapping = parse_cuda_device_map(text, name)
    except PlacementError as exc:
        raise ValueError(f"{exc}; the whole map is {CUDA_DEVICE_MAP_FORM}") from None
    for peer in mapping:
        if peer >= world_size:
            raise ValueError(
                f"{name}: <peer rank> {peer} is not in the cluster (world size "
                f"{world_size}: ranks 0..{world_size - 1}, rank 0 being the driver)"
            )
        if peer == rank:
            raise ValueError(
                f"{name}: <peer rank> {peer} is this process's own rank; a device map is "
                "between two processes"
            )


def set_fork_safety(env: MutableMapping[str, str]) -> None:
    """Sets ``IBV_FORK_SAFE`` / ``RDMAV_FORK_SAFE`` in ``env`` unless given.

    Every process that may fork (the driver, the zygote, each worker) sets them before
    torch loads ibverbs: a fork() after RDMA set-up corrupts memory without them.
    """
    for name, value in FORK_SAFE_ENV.items():
        env.setdefault(name, value)


def heartbeat_interval(heartbeat_timeout: float) -> float:
    """How often the driver pings its workers, and a worker checks that it was pinged."""
    return min(1.0, heartbeat_timeout / 4)
