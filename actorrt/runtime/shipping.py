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

__all__ = ["CodeKeepingPickler", "dumps"]


def dumps(obj: Any) -> bytes:
    """``cloudpickle.dumps(obj)``, with the file names of code pickled by value kept.

    Args:
        obj: A class or function (anything cloudpickle takes).

    Returns:
        Bytes for ``cloudpickle.loads`` (or ``pickle.loads``) in a process with actorrt.
    """
    buffer = io.BytesIO()
    CodeKeepingPickler(buffer).dump(obj)
    return buffer.getvalue()


class CodeKeepingPickler(cloudpickle.Pickler):  # type: ignore[misc]  # cloudpickle is untyped
    """A cloudpickle pickler whose code objects pickled by value keep their file name.

    Also the base of the payload pipeline's pickler, so that a function passed in a
    call's arguments (a lambda of the script) names its file in tracebacks too.
    """

    def reducer_override(self, obj: Any) -> Any:
        """The reduction of ``obj``: cloudpickle's, with a code object's file name kept."""
        if type(obj) is types.CodeType:
            rebuild, args = self.dispatch_table[types.CodeType](obj)
            return _with_filename, (rebuild, args, obj.co_filename)
        return super().reducer_override(obj)


def _with_filename(
    rebuild: Callable[..., types.CodeType], args: tuple[Any, ...], filename: str
) -> types.CodeType:
    """Unpickles a code object: cloudpickle's rebuild, then its own file name back."""
    return rebuild(*args).replace(co_filename=filename)
