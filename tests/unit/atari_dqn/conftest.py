"""Shared setup for the DQN example's unit tests (no processes are started)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

# `examples` is a folder of the repository, not an installed package: make it importable
# however pytest is launched (`pytest`, `python -m pytest`, from any folder).
_ROOT = str(Path(__file__).resolve().parents[3])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)


@pytest.fixture(autouse=True)
def _one_thread():
    # Tiny networks; extra intra-op threads only fight the other tests for 2 cores.
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)
