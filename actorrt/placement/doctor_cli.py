"""``actorrt doctor``: check this machine for what breaks TensorPipe, with the fixes."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``doctor`` subcommand's arguments."""
    parser.description = (
        "Check this machine for what breaks TensorPipe (torch RPC): containers sharing "
        "the boot id, InfiniBand ports, GPUDirect RDMA, CUDA peer access, fork safety, "
        "/dev/shm, transparent huge pages and the interface TensorPipe listens on. One "
        "line per finding (OK, INFO, WARN, FAIL) with its fix; exit status 1 if any FAIL."
    )
    parser.add_argument("--json", action="store_true", help="print the findings as JSON")
    # Other roots than the machine's own: a mounted image, or the fake trees of the tests.
    parser.add_argument("--proc-root", default="/proc", metavar="DIR", help=argparse.SUPPRESS)
    parser.add_argument("--sys-root", default="/sys", metavar="DIR", help=argparse.SUPPRESS)
    parser.add_argument("--fs-root", default="/", metavar="DIR", help=argparse.SUPPRESS)


def run(args: argparse.Namespace) -> int:
    """Run the checks and print them; returns 1 when any finding is a FAIL, else 0."""
    from actorrt.placement.doctor import STATUSES, Machine, exit_status, report, run_checks

    machine = Machine(
        proc_root=Path(args.proc_root), sys_root=Path(args.sys_root), fs_root=Path(args.fs_root)
    )
    findings = run_checks(machine)
    if args.json:
        json.dump(report(findings, machine), sys.stdout, indent=1)
        sys.stdout.write("\n")
        return exit_status(findings)
    print(f"actorrt doctor: {machine.host()}")
    for f in findings:
        print(f.line())
    counts = report(findings, machine)["counts"]
    print("summary: " + ", ".join(f"{counts[s]} {s}" for s in STATUSES))
    return exit_status(findings)
