"""actorrt's logging: the ``actorrt`` logger, its level, and a handler when none is set.

Every module logs under ``logging.getLogger("actorrt")`` or a child of it (``actorrt.driver``,
``actorrt.rendezvous``, ``actorrt.worker``, ...). :func:`configure` runs in ``start()`` on
the driver and in every worker; the level comes from ``start(log_level=...)`` (or
``actorrt worker --log-level``), else ``ACTORRT_LOG_LEVEL``, else the level the user gave
the ``actorrt`` logger, else ``WARNING``: quiet unless something is wrong.

The root logger is never touched. A handler (on ``sys.stderr``) is added to the
``actorrt`` logger only when no handler would see its records: a program that set up
logging itself (``logging.basicConfig``, its own handlers) gets actorrt's records there.
This module imports nothing heavy: ``import actorrt`` must stay free of torch.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import TYPE_CHECKING, TextIO

__all__ = ["ENV_VAR", "LOGGER_NAME", "configure", "get_logger", "level_name", "parse_level"]

LOGGER_NAME = "actorrt"
ENV_VAR = "ACTORRT_LOG_LEVEL"
DEFAULT_LEVEL = logging.WARNING

_NAMES = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "warn": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
}
_FORMAT = "%(asctime)s actorrt %(levelname)s: %(message)s"


def get_logger(name: str | None = None) -> logging.Logger:
    """The ``actorrt`` logger, or its child ``actorrt.<name>``.

    Args:
        name: The child's name (``"driver"`` gives ``actorrt.driver``); None: the parent.

    Returns:
        The logger.
    """
    return logging.getLogger(LOGGER_NAME if not name else f"{LOGGER_NAME}.{name}")


def parse_level(value: str | int, what: str = "log_level") -> int:
    """A logging level from a name (``"info"``, any case) or a number.

    Args:
        value: ``debug``, ``info``, ``warning``, ``error``, ``critical``, or an int level.
        what: How the value was given, for the error message.

    Returns:
        The numeric level.

    Raises:
        ValueError: ``value`` names no level.
    """
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, str):
        text = value.strip()
        if text.isdigit():
            return int(text)
        level = _NAMES.get(text.lower())
        if level is not None:
            return level
    raise ValueError(
        f"{what}={value!r} is not a log level: use debug, info, warning, error or critical."
    )


if TYPE_CHECKING:
    _TextHandler = logging.StreamHandler[TextIO]
else:  # StreamHandler takes a type argument at run time only from Python 3.11
    _TextHandler = logging.StreamHandler


class _StderrHandler(_TextHandler):
    """Writes to whatever ``sys.stderr`` is at each record, not to the one at creation.

    A worker replaces ``sys.stderr`` to send its output to the driver
    (:mod:`actorrt.runtime.output`); its log records should travel the same way.
    """

    def __init__(self) -> None:
        logging.Handler.__init__(self)  # StreamHandler's __init__ would pin a stream

    @property
    def stream(self) -> TextIO:  # type: ignore[override]
        return sys.stderr


def configure(level: str | int | None = None, *, what: str = "log_level") -> int:
    """Sets the ``actorrt`` logger's level and gives it a handler if it has none.

    Args:
        level: The level to use; None: ``ACTORRT_LOG_LEVEL`` if set, else the level already
            set on the ``actorrt`` logger, else ``WARNING``.
        what: How ``level`` was given, for the error message.

    Returns:
        The effective level of the ``actorrt`` logger.

    Raises:
        ValueError: ``level`` or ``ACTORRT_LOG_LEVEL`` names no level.
    """
    logger = get_logger()
    env = os.environ.get(ENV_VAR, "").strip()
    if level is not None:
        logger.setLevel(parse_level(level, what))
    elif env:
        logger.setLevel(parse_level(env, ENV_VAR))
    elif logger.level == logging.NOTSET:
        # The user set no level: quiet by default, whatever the root logger's level.
        logger.setLevel(DEFAULT_LEVEL)
    ours = any(isinstance(h, _StderrHandler) for h in logger.handlers)
    if not ours and not logger.hasHandlers():
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter(_FORMAT, datefmt="%H:%M:%S"))
        logger.addHandler(handler)
    return logger.getEffectiveLevel()


def level_name(level: int) -> str:
    """How a level is passed on to workers in ``ACTORRT_LOG_LEVEL`` (parse_level reads it).

    Args:
        level: A numeric level.

    Returns:
        Its name (``"INFO"``) for the standard levels, else the number as text.
    """
    name = logging.getLevelName(level)
    return name if name.lower() in _NAMES else str(level)
