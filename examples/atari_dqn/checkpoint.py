"""Checkpoint files: the learner's state plus where the run stood, written atomically."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

__all__ = ["load_checkpoint", "save_checkpoint"]

_FORMAT = 1


def save_checkpoint(
    path: str | os.PathLike, learner_state: dict[str, Any], frames: int, env_id: str
) -> Path:
    """Writes ``{"learner": learner_state, "frames": ..., "env_id": ...}`` to ``path``.

    Written to a temporary file and renamed, so a crash mid-write never leaves a truncated
    checkpoint where ``--resume`` would find it.

    Args:
        path: Destination (parent folders are created).
        learner_state: ``Learner.checkpoint_state()`` (CPU tensors).
        frames: Global frames collected when the state was taken.
        env_id: The environment the network was trained on (checked on resume).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    torch.save(
        {"format": _FORMAT, "learner": learner_state, "frames": int(frames), "env_id": env_id},
        tmp,
    )
    os.replace(tmp, path)
    return path


def load_checkpoint(path: str | os.PathLike, env_id: str | None = None) -> dict[str, Any]:
    """Reads a checkpoint written by :func:`save_checkpoint`.

    Args:
        path: The file.
        env_id: If given, the checkpoint must be for this environment.

    Raises:
        FileNotFoundError: No such file.
        ValueError: Not a checkpoint of this example, or one for another environment.
    """
    # weights_only=True: the file holds only tensors and plain containers of numbers and
    # strings, so the safe unpickler suffices (no code runs from a checkpoint).
    data = torch.load(Path(path), map_location="cpu", weights_only=True)
    if not isinstance(data, dict) or data.get("format") != _FORMAT:
        raise ValueError(f"{path} is not an examples.atari_dqn checkpoint")
    if env_id is not None and data["env_id"] != env_id:
        raise ValueError(
            f"{path} was trained on {data['env_id']!r}, not {env_id!r}; pass --env "
            f"{data['env_id']} or start without --resume"
        )
    return data
