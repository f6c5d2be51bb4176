"""``actorrt plan CLUSTER_FILE``: print (or draw) what the planner does with a cluster.

It calls the very function ``actorrt.start()`` calls (``ClusterSpec.plan``), so on a
file written by ``actorrt.dump_cluster()`` it prints the running cluster's plan, and with
``--labels`` what another layout would do on the same machines. ``--explain`` adds why
each process got its transports and channels and each pair its transport, as the
planner recorded it when it chose them.
"""

from __future__ import annotations

import argparse
import json
import sys

from actorrt.errors import PlacementError
from actorrt.placement.plan import TRANSPORT_MODES

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``plan`` subcommand's arguments."""
    parser.add_argument("cluster_file", help="TOML cluster file (see docs/placement.md)")
    parser.add_argument(
        "--labels",
        metavar="LAYOUT.toml",
        help="plan this layout ([labels], [talks], [plan] strategy) instead of the file's",
    )
    parser.add_argument(
        "--json", action="store_true", help="print the plan as JSON instead of tables"
    )
    parser.add_argument(
        "--draw",
        metavar="FILE",
        help="draw the topology with actors placed (FILE ends in .png, .svg or .pdf)",
    )
    parser.add_argument(
        "--explain",
        action="store_true",
        help="also say why each process got its transports/channels and each pair its "
        "transport (with --json: an 'explain' key)",
    )
    parser.add_argument(
        "--transport", choices=TRANSPORT_MODES, help="override the file's transport mode"
    )
    parser.add_argument(
        "--strategy", help="override the file's strategy (pack, spread, nearest, nearest:LABEL)"
    )
    parser.add_argument(
        "--max-matrix",
        type=int,
        default=40,
        metavar="N",
        help="print the transport matrix up to N processes, a summary beyond (default 40)",
    )


def run(args: argparse.Namespace) -> int:
    """Plan the cluster file and print it; returns the exit status (2 on a bad plan)."""
    from actorrt.placement.clusterfile import load_cluster
    from actorrt.placement.layout import load_layout
    from actorrt.placement.render import (
        check_draw_path,
        draw_topology,
        explain_dict,
        explain_text,
        placement_table,
        transport_matrix,
    )

    if args.max_matrix < 0:
        print(f"actorrt plan: --max-matrix {args.max_matrix} must be >= 0", file=sys.stderr)
        return 2
    try:
        if args.draw:
            check_draw_path(args.draw)  # before planning: a typo in the path fails at once
        cluster = load_cluster(args.cluster_file)
        layout = load_layout(args.labels) if args.labels else None
        plan = cluster.plan(transport=args.transport, strategy=args.strategy, layout=layout)
        if args.draw:
            draw_topology(cluster.processes, plan, args.draw)
    except PlacementError as e:
        print(f"actorrt plan: {e}", file=sys.stderr)
        return 2
    if args.json:
        data = plan.to_dict()
        if args.explain:
            # A key of its own: without --explain the output stays exactly Plan.to_dict().
            data["explain"] = explain_dict(plan)
        json.dump(data, sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    print(
        f"{args.cluster_file}: {len(plan.processes)} processes, transport={plan.transport}, "
        f"strategy={plan.strategy}"
    )
    print()
    print(placement_table(plan))
    print()
    print(transport_matrix(plan, max_processes=args.max_matrix))
    envs = {tuple(sorted(p.env.items())) for p in plan.processes if p.env}
    if envs:
        print()
        for env in sorted(envs):
            who = [p.name for p in plan.processes if tuple(sorted(p.env.items())) == env]
            shown = ", ".join(who[:6]) + (f", ... ({len(who)})" if len(who) > 6 else "")
            print(f"env for {shown}: " + " ".join(f"{k}={v}" for k, v in env))
    guarded = [p.name for p in plan.processes if p.guard_tiny_cuda]
    if guarded:
        print(
            f"cuda_gdr possible ({len(guarded)} processes): CUDA tensors < 32 B are staged via CPU"
        )
    if args.explain:
        print()
        print(explain_text(plan))
    if args.draw:
        print(f"\ndrawing written to {args.draw}")
    return 0
