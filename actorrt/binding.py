"""Checking call arguments against a signature at the call site, as a local call would.

``.remote()`` of actor methods, constructors and remote functions checks its arguments
here, so that a call that would not bind fails where it is made, with Python's own
message, instead of on a worker.
"""

from __future__ import annotations

import inspect
import sys
from typing import Any

__all__ = ["Binder", "Params", "params_of", "signature_of"]

_P = inspect.Parameter
_KINDS = (
    _P.POSITIONAL_ONLY,
    _P.POSITIONAL_OR_KEYWORD,
    _P.VAR_POSITIONAL,
    _P.KEYWORD_ONLY,
    _P.VAR_KEYWORD,
)

Params = tuple[tuple[str, int], ...]
"""A signature: ``(name, kind index * 2 + has_default)`` per parameter."""


class _Default:
    """Stands for a default value in messages: handles carry no defaults, only their presence."""

    def __repr__(self) -> str:
        return "..."


_DEFAULT = _Default()


class Binder:
    """Checks that call arguments bind to one signature, in a few comparisons.

    It runs on every ``.remote()``, so it keeps what binding needs precomputed;
    :meth:`inspect.Signature.bind` runs only on a failure, to word the error.
    """

    __slots__ = ("params", "min_pos", "max_pos", "pos_names", "keywords", "varkw", "required_kw")

    def __init__(self, params: Params) -> None:
        self.params = params
        pos_names: list[str | None] = []  # by position; None where there is no keyword form
        self.keywords: dict[str, int] = {}  # name -> its position (maxsize: keyword-only)
        required_kw = []
        self.min_pos = 0
        varargs = self.varkw = False
        for name, code in params:
            kind, has_default = _KINDS[code >> 1], code & 1
            if kind in (_P.POSITIONAL_ONLY, _P.POSITIONAL_OR_KEYWORD):
                if kind is _P.POSITIONAL_OR_KEYWORD:
                    self.keywords[name] = len(pos_names)
                pos_names.append(name if kind is _P.POSITIONAL_OR_KEYWORD else None)
                if not has_default:
                    self.min_pos = len(pos_names)
            elif kind is _P.VAR_POSITIONAL:
                varargs = True
            elif kind is _P.KEYWORD_ONLY:
                self.keywords[name] = sys.maxsize
                if not has_default:
                    required_kw.append(name)
            else:
                self.varkw = True
        self.pos_names = tuple(pos_names)
        self.max_pos = sys.maxsize if varargs else len(pos_names)
        self.required_kw = tuple(required_kw)

    def binds(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
        """True if ``f(*args, **kwargs)`` would bind (Python's rules, without defaults)."""
        n = len(args)
        if n > self.max_pos:
            return False
        if not kwargs:  # the common call
            return n >= self.min_pos and not self.required_kw
        for key in kwargs:
            at = self.keywords.get(key)
            if at is None:
                if not self.varkw:
                    return False
            elif at < n:  # given by position too
                return False
        # required positionals not given by position must come by keyword
        if any(self.pos_names[i] not in kwargs for i in range(n, self.min_pos)):
            return False
        return all(k in kwargs for k in self.required_kw)

    def fail(self, what: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Raises the ``TypeError`` a local call would, naming ``what``; after :meth:`binds`.

        Raises:
            TypeError: Python's own message, and the signature.
        """
        sig = inspect.Signature(
            [
                _P(name, _KINDS[code >> 1], default=_DEFAULT if code & 1 else _P.empty)
                for name, code in self.params
            ]
        )
        try:
            sig.bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"{what}: {exc} (the signature is {sig})") from None
        # bind() accepts what binds() refused: trust Python, let the call go


def params_of(sig: inspect.Signature) -> Params:
    """The signature as :data:`Params`."""
    return tuple(
        (p.name, _KINDS.index(p.kind) * 2 + (p.default is not p.empty))
        for p in sig.parameters.values()
    )


def signature_of(fn: Any, drop_self: bool) -> inspect.Signature | None:
    """``fn``'s signature (without its first parameter if ``drop_self``); None if it has none."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):  # some builtins have none: their calls go unchecked
        return None
    params = list(sig.parameters.values())
    if drop_self and params and params[0].kind in _KINDS[:2]:
        return sig.replace(parameters=params[1:])
    return sig
