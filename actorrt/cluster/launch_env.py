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
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["LaunchEnv", "from_environ"]


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
