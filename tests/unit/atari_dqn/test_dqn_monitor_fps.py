"""The progress line's frames/s: over a window of polls, not the last second alone."""

from collections import deque
from types import SimpleNamespace

from examples.atari_dqn.monitor import _FPS_WINDOW_S, Monitor


def test_fps_is_taken_over_the_window_so_bursty_pushes_do_not_read_zero():
    m = SimpleNamespace(window=deque([(0.0, 0)]))
    fps = [Monitor._fps(m, t, frames) for t, frames in [(1, 4096), (2, 4096), (3, 8192)]]
    assert fps[1] == 4096 / 2  # no frame since the last poll, yet frames flow
    assert fps[2] == 8192 / 3
    late = _FPS_WINDOW_S + 5  # polls older than the window are dropped
    assert Monitor._fps(m, late, 8192) == 0.0  # nothing came for 12 s: it says so
    assert list(m.window) == [(3, 8192), (late, 8192)]
