"""``actorrt describe``: this machine as a ``[[nodes]]`` block of a cluster file."""

from __future__ import annotations

import argparse
import json
import sys

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``describe`` subcommand's arguments."""
    parser.description = (
        "Print this machine (host, container, GPUs, NVLink, InfiniBand adapters) as a "
        "[[nodes]] block for a cluster file, to preview placement with `actorrt plan`."
    )
    parser.add_argument(
        "--processes", type=int, default=1, metavar="N", help="processes on this node (default 1)"
    )
    parser.add_argument(
        "--json", action="store_true", help="print the raw node description as JSON instead"
    )
    # Other trees than the machine's own, as for `actorrt doctor`: the tests' fake ones.
    parser.add_argument("--proc-root", default="/proc", metavar="DIR", help=argparse.SUPPRESS)
    parser.add_argument("--sys-root", default="/sys", metavar="DIR", help=argparse.SUPPRESS)


def run(args: argparse.Namespace) -> int:
    """Describe this node and print it; returns the exit status."""
    from actorrt.placement.clusterfile import node_table
    from actorrt.placement.discovery import describe_node

    if args.processes < 1:
        print("actorrt describe: --processes must be >= 1", file=sys.stderr)
        return 2
    node = describe_node(proc_root=args.proc_root, sys_root=args.sys_root)
    if args.json:
        json.dump(node.to_dict(), sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    if not node.gpus:
        print("# no GPU visible on this machine: gpus is empty", file=sys.stdout)
    sys.stdout.write(node_table(node, processes=args.processes))
    return 0
