"""``actorrt.start()`` refuses bad arguments before it starts anything (no process, no port).

Every case raises in the argument checks, before the check for a running cluster, so
the test needs none and starts none.
"""

from __future__ import annotations

import pytest

import actorrt
from actorrt.runtime.runtime import current_or_none


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"transport": "tcp"}, "transport='tcp': choose one of auto, cpu, cuda"),
        ({"local_cuda_devices": "0,x"}, "entry 'x' is not a GPU index"),
        ({"local_cuda_devices": [1, 1]}, "lists GPU 1 twice"),
        ({"local_cuda_devices": [0.5]}, "entry '0.5' is not a GPU index"),
        ({"num_workers": 0}, "num_workers=0 must be an int >= 1"),
        ({"timeout": 0}, "timeout=0 must be a number of seconds > 0"),
        ({"rank": 1}, "rank=1: the process calling actorrt.start() is the driver"),
        ({"world_size": 2}, "world_size is for multi-node clusters"),
        ({"log_to_driver": "yes"}, "log_to_driver='yes' must be True or False"),
    ],
)
def test_bad_arguments_fail_start_with_the_fix(kwargs: dict[str, object], message: str) -> None:
    before = current_or_none()  # another test file of this process may run a cluster
    with pytest.raises(ValueError) as info:
        actorrt.start(**kwargs)  # type: ignore[arg-type]
    assert message in str(info.value)
    assert current_or_none() is before
