"""The ``actorrt`` command: ``actorrt worker``, ``actorrt plan`` and ``actorrt describe``.

Each subcommand lives in the module that owns its job; this file only wires argparse
to them, importing lazily so ``actorrt --help`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

__all__ = ["main"]

# subcommand -> module that provides ``add_arguments(parser)`` and ``run(args) -> int``
_SUBCOMMANDS = {
    "worker": ("actorrt.cluster.worker_cli", "join a cluster as a worker process"),
    "plan": ("actorrt.placement.plan_cli", "print (or draw) the placement plan for a cluster file"),
    "describe": (
        "actorrt.placement.describe_cli",
        "print this machine as a [[nodes]] block of a cluster file",
    ),
}


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``actorrt`` command line; returns the process exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="actorrt", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    # Only the chosen subcommand's module is imported (torch import is slow).
    chosen = argv[0] if argv and argv[0] in _SUBCOMMANDS else None
    for name, (module_name, help_text) in _SUBCOMMANDS.items():
        p = sub.add_parser(name, help=help_text)
        if name == chosen:
            module = importlib.import_module(module_name)
            module.add_arguments(p)
            p.set_defaults(_run=module.run)
    args = parser.parse_args(argv)
    return int(args._run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
