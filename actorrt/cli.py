"""The ``actorrt`` command: ``worker``, ``plan``, ``describe`` and ``doctor``.

Each subcommand lives in the module that owns its job; this file only wires argparse
to them, importing lazily so ``actorrt --help`` stays fast: only the chosen subcommand's
module is imported, and ``actorrt/__init__.py`` imports nothing heavy until a public name
is used, so torch is imported only by the subcommands that need it (``worker``, and
``doctor`` once it has found a GPU to ask CUDA about).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from actorrt._version import __version__

__all__ = ["SUBCOMMANDS", "build_parser", "main"]

#: subcommand -> (module providing ``add_arguments(parser)`` and ``run(args) -> int``, help)
SUBCOMMANDS = {
    "worker": ("actorrt.cluster.worker_cli", "join a cluster as a worker process"),
    "plan": ("actorrt.placement.plan_cli", "print (or draw) the placement plan for a cluster file"),
    "describe": (
        "actorrt.placement.describe_cli",
        "print this machine as a [[nodes]] block of a cluster file",
    ),
    "doctor": (
        "actorrt.placement.doctor_cli",
        "check this machine for TensorPipe traps, with the fixes",
    ),
}

_DESCRIPTION = (
    "Command line of actorrt, Ray-style actors on torch.distributed.rpc (whose Python API "
    "is actorrt.start and @actorrt.actor). Run `actorrt COMMAND --help` for its options."
)


def build_parser(argv: Sequence[str]) -> argparse.ArgumentParser:
    """The ``actorrt`` parser; only the subcommand named by ``argv[0]`` gets its flags.

    Args:
        argv: The command line without the program name (decides which module to import).

    Returns:
        The parser, with ``_run`` set as a default of the chosen subcommand.
    """
    parser = argparse.ArgumentParser(prog="actorrt", description=_DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"actorrt {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    chosen = argv[0] if argv and argv[0] in SUBCOMMANDS else None
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if name == chosen:
            module = importlib.import_module(module_name)
            module.add_arguments(p)
            p.set_defaults(_run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``actorrt`` command line.

    Args:
        argv: Arguments without the program name (default: ``sys.argv[1:]``).

    Returns:
        The process exit status (``--help``, ``--version`` and usage errors exit through
        argparse's ``SystemExit``: 0 and 2).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser(argv).parse_args(argv)
    try:
        return int(args._run(args) or 0)
    except BrokenPipeError:
        # The reader went away (`actorrt plan ... | head`): not an error of ours. Point
        # stdout at /dev/null so the interpreter's final flush does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
