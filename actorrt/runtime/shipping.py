"""Classes and functions as bytes for other processes: cloudpickle, file names kept.

cloudpickle (3.x) renames the file of every code object it pickles by value (a class or
function defined in the driver's script) to ``<dynamic-code>``, so that the bytes do not
depend on where the code was defined. A method that raises on a worker then shows
``File "<dynamic-code>", line 12, in step`` in its remote traceback, with no source line:
the user cannot tell which file it was. Here code objects keep their file name, so the
traceback names the script and line, and shows the source line where that file can be
read (a local worker reads the driver's files). The bytes stay the same for the same
definition in the same file, which the cache keys built on them need.
"""

from __future__ import annotations

import io
import types
from collections.abc import Callable
from typing import Any

import cloudpickle

__all__ = ["dumps", "keep_file_name"]


def dumps(obj: Any) -> bytes:
    """``cloudpickle.dumps(obj)``, with the file names of code pickled by value kept.

    Args:
        obj: A class or function (anything cloudpickle takes).

    Returns:
        Bytes for ``cloudpickle.loads`` (or ``pickle.loads``) in a process with actorrt.
    """
    buffer = io.BytesIO()
    _CodeKeepingPickler(buffer).dump(obj)
    return buffer.getvalue()


def keep_file_name(pickler: cloudpickle.Pickler, code: types.CodeType) -> Any:
    """The reduction of ``code`` by a cloudpickle ``pickler``, with its file name kept.

    For a pickler's ``reducer_override`` to return for a code object; the payload
    pipeline's pickler uses it too, so that a function passed in a call's arguments (a
    lambda of the script) names its file in tracebacks as well.
    """
    rebuild, args = pickler.dispatch_table[types.CodeType](code)
    return _with_filename, (rebuild, args, code.co_filename)


class _CodeKeepingPickler(cloudpickle.Pickler):  # type: ignore[misc]  # cloudpickle is untyped
    def reducer_override(self, obj: Any) -> Any:
        if type(obj) is types.CodeType:
            return keep_file_name(self, obj)
        return super().reducer_override(obj)


def _with_filename(
    rebuild: Callable[..., types.CodeType], args: tuple[Any, ...], filename: str
) -> types.CodeType:
    """Unpickles a code object: cloudpickle's rebuild, then its own file name back."""
    return rebuild(*args).replace(co_filename=filename)
