"""`joulie`: run roles (`--role=manager,agent,...`) or use a tool subcommand."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from joulie import __version__
from joulie.api.text_table import aligned
from joulie.cli.arg_types import seconds
from joulie.cli.errors import EXIT_INTERRUPTED, os_error_line
from joulie.cli.help import use_everywhere
from joulie.core.policies import PARAMETERS, POLICIES, Parameter, PolicyType, Reads
from joulie.process.roles import ROLES, RoleSpec, UnknownRoleError, load_settings, parse_roles
from joulie.process.settings import ProcessSettings
from joulie.settings import Loaded, Source, describe_value

# Heavier modules (the CRD generator, logging, the runtime) are imported by the subcommands that
# use them, so a quick `joulie plan` or `joulie config` does not pay for them.

EXIT_CONFIG = 2
PLAN_TIMEOUT_S = 15.0
"""How long `joulie plan --live` waits for the API server by default."""
EXIT_CLUSTER = 1
"""A one-shot command could not use the cluster: unreachable, TLS, refused. (A kubeconfig that
cannot be used is a configuration error, EXIT_CONFIG.)"""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="joulie",
        description="Kubernetes-native energy management. Run one or more roles in one process, "
        "or use a tool subcommand. Roles are configured through environment variables "
        "(see `joulie config --role ROLE`).",
    )
    parser.add_argument("--version", action="version", version=f"joulie {__version__}")
    parser.add_argument(
        "--role",
        metavar="ROLES",
        help=f"comma-separated roles to run in this process: {', '.join(ROLES)}",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    crds = sub.add_parser("crds", help="print the CustomResourceDefinitions as YAML")
    crds.add_argument("--dir", type=Path, help="write one file per CRD into this directory instead")

    config = sub.add_parser(
        "config", help="print a role's effective settings and where each value came from"
    )
    config.add_argument(
        "--role",
        dest="config_role",
        metavar="ROLES",
        required=True,
        help=f"comma-separated roles: {', '.join(ROLES)}",
    )
    config.add_argument(
        "--output", "-o", choices=("table", "json"), default="table", help="what to print"
    )

    plan = sub.add_parser(
        "plan",
        help="print what the policy would do for a cluster inventory, without writing anything",
        description="Defaults come from the manager's environment variables (POLICY_TYPE, "
        "STATIC_HP_FRAC, QUEUE_*); the flags override them. A flag that the chosen policy "
        "(or mode) does not read is refused.",
    )
    source = plan.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--inventory",
        type=Path,
        metavar="FILE_OR_NAME",
        help="a cluster inventory file, or an embedded one as `joulie simulate` takes it "
        "(default, exp01, exp01-5k, exp02, exp02-5k, exp03, exp03-5k)",
    )
    source.add_argument(
        "--live",
        action="store_true",
        help="plan the cluster in KUBECONFIG (or in-cluster) as it is now, and show the nodes "
        "whose profile would change",
    )
    plan.add_argument(
        "--policy",
        choices=[p.value for p in PolicyType],
        help="the policy to plan with (default: POLICY_TYPE, else static_partition)",
    )
    for parameter in _PLAN_FLAGS:
        variable = parameter.name.upper()
        plan.add_argument(
            parameter.flag or "",
            dest=parameter.name,
            type=parameter.type,
            metavar="N" if parameter.type is int else "NUMBER",
            help=f"{parameter.doc.rstrip('.')} (default: {variable}, else {parameter.default:g})",
        )
    plan.add_argument(
        "--perf-pods",
        type=int,
        metavar="N",
        help=f"{_demand_readers()} with --inventory: running + pending performance pods "
        "(default: 0)",
    )
    plan.add_argument(
        "--output", "-o", choices=("table", "json"), default="table", help="what to print"
    )
    plan.add_argument(
        "--timeout",
        type=seconds,
        metavar="SECONDS",
        help="--live: give up when the API server has not answered (or a list has kept "
        f"failing) for this long (default: {PLAN_TIMEOUT_S:g})",
    )
    plan.add_argument(
        "--kubeconfig", metavar="FILE", help="--live: kubeconfig file (default: KUBECONFIG)"
    )
    from joulie.cli.lifecycle import add_parser as add_lifecycle
    from joulie.cli.simulate_args import add_parser as add_simulate
    from joulie.cli.status.args import add_parser as add_status

    add_status(sub)
    add_simulate(sub)
    add_lifecycle(sub)
    use_everywhere(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Exit status: 0 done, 1 the cluster could not be used or a run failed, 2 bad options,
    settings or files, 130 interrupted."""
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        return _dispatch(parser, args)
    except BrokenPipeError:
        raise  # the entry point ends quietly, as Unix tools do
    except OSError as exc:
        print(os_error_line(exc), file=sys.stderr)
        return EXIT_CONFIG
    except KeyboardInterrupt:
        # Ctrl-C: one line instead of the traceback of wherever the work happened to be.
        print("\njoulie: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def _dispatch(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    if args.role is not None and args.command is not None:
        print(
            f"joulie: --role runs roles and takes no subcommand (got {args.command!r}); "
            f"run `joulie --role={args.role}` or `joulie {args.command} ...` on its own",
            file=sys.stderr,
        )
        return EXIT_CONFIG
    if args.command == "crds":
        return _crds(args.dir)
    if args.command == "config":
        return _config(args.config_role, args.output)
    if args.command == "plan":
        return _plan(args)
    if args.command == "status":
        from joulie.cli.status.command import run as status

        return status(args)
    if args.command == "simulate":
        from joulie.cli.simulate import run as simulate

        return simulate(args)
    if args.command == "lifecycle":
        from joulie.cli.lifecycle import run as lifecycle

        return lifecycle(args)
    if args.role is not None:
        return _run_roles(args.role)
    parser.print_help(sys.stderr)
    return EXIT_CONFIG


def _crds(directory: Path | None) -> int:
    import yaml

    from joulie.api.crd import ALL_CRDS, crd_file_name, crd_manifest

    manifests = [(crd_file_name(info), crd_manifest(info)) for info in ALL_CRDS]
    if directory is None:
        sys.stdout.write(yaml.safe_dump_all([m for _, m in manifests], sort_keys=False))
        return 0
    directory.mkdir(parents=True, exist_ok=True)
    for name, manifest in manifests:
        (directory / name).write_text(render_yaml(manifest))
    return 0


def render_yaml(document: dict[str, Any]) -> str:
    import yaml

    header = "# Generated by `joulie crds` from joulie/api; do not edit by hand.\n"
    return header + yaml.safe_dump(document, sort_keys=False, width=100)


def _report_problems(loaded: list[Loaded[Any]]) -> bool:
    problems = [p for item in loaded for p in item.problems]
    if not problems:
        return False
    count = f"{len(problems)} problem{'s' if len(problems) > 1 else ''}"
    lines = [f"joulie: invalid configuration ({count}):", *(f"  {p}" for p in problems)]
    print("\n".join(lines), file=sys.stderr)
    return True


def _load(roles_text: str) -> tuple[list[RoleSpec], list[Loaded[Any]]] | None:
    """The roles named and their settings from the environment; None (after saying why) for an
    unknown role."""
    names = [n.strip() for n in roles_text.split(",") if n.strip()]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        # A process runs each role once; a repeat is a typo that would otherwise pass unseen.
        print(
            f"joulie: role {', '.join(map(repr, repeated))} named more than once in "
            f"{roles_text!r}; name each role once",
            file=sys.stderr,
        )
        return None
    try:
        specs = parse_roles(roles_text)
    except UnknownRoleError as exc:
        print(f"joulie: {exc}", file=sys.stderr)
        return None
    return specs, load_settings(specs, os.environ)


def _config(roles_text: str, output: str) -> int:
    found = _load(roles_text)
    if found is None:
        return EXIT_CONFIG
    _, loaded = found
    rows = []
    for item in loaded:
        settings = item.settings
        for name in type(settings).model_fields:
            env = settings.env_name(name)
            rows.append(
                {
                    "role": settings.role,
                    "variable": env,
                    "value": settings.display(name),
                    "source": item.sources[env],
                }
            )
    if output == "json":
        print(json.dumps(rows, indent=2))
    else:
        columns = ("role", "variable", "value", "source")
        table = [list(columns), *([r[k] for k in columns] for r in rows)]
        print("\n".join(aligned(table)))
    for item in loaded:
        for warning in item.warnings:
            print(f"joulie: warning: {warning}", file=sys.stderr)
    if not _report_problems(loaded):
        return 0
    if any(p.variable == "NODE_NAME" and not p.value for item in loaded for p in item.problems):
        # Off the cluster (a laptop) NODE_NAME is naturally unset: the DaemonSet sets it from
        # the pod's node. The table above is still what the role would run with.
        print(
            "joulie: the agent needs NODE_NAME, which its DaemonSet sets from the pod's node; "
            f"to check the rest here: NODE_NAME=node-1 joulie config --role {roles_text}",
            file=sys.stderr,
        )
    return EXIT_CONFIG


def _plan(args: argparse.Namespace) -> int:
    from joulie.api.inventory import InventoryError, load_inventory
    from joulie.cli.plan import (
        family_gpu_caps,
        inventory_nodes,
        inventory_views,
        load_catalog,
        make_plan,
        render,
        unrecognised_models,
    )
    from joulie.hardware.catalog import CatalogError
    from joulie.manager.settings import ManagerSettings

    loaded = ManagerSettings.from_env(os.environ)
    if _report_problems([loaded]):
        return EXIT_CONFIG
    settings = loaded.settings
    from_env = loaded.sources[ManagerSettings.env_name("policy_type")] == Source.ENVIRONMENT
    refused = _plan_flag_problem(args, settings.policy_type, from_env)
    if refused:
        print(f"joulie: {refused}", file=sys.stderr)
        return EXIT_CONFIG
    # The command line overrides the environment; both plans then read the settings as the
    # controller manager does (a flag's value is judged as its variable would be).
    flags = {ManagerSettings.env_name(p.name): p for p in _PLAN_FLAGS}
    overrides = {
        variable: str(getattr(args, p.name))
        for variable, p in flags.items()
        if getattr(args, p.name) is not None
    }
    if args.policy:
        overrides["POLICY_TYPE"] = args.policy
    overridden = ManagerSettings.from_env({**os.environ, **overrides})
    for problem in overridden.problems:
        if problem.variable in overrides and problem.variable in flags:
            flag = flags[problem.variable].flag
            print(
                f"joulie: {flag}={problem.value}: {problem.detail} (accepted: {problem.accepted})",
                file=sys.stderr,
            )
            return EXIT_CONFIG
    plan_settings = overridden.settings
    if args.live:
        import asyncio

        from joulie.cli.plan import live
        from joulie.kube.connection import ClusterError
        from joulie.process.logs import configure_logging
        from joulie.process.settings import LogFormat, LogLevel

        # Standard output carries the plan; the informers' log lines go to standard error.
        configure_logging(LogFormat.AUTO, LogLevel.WARNING, stream=sys.stderr)
        # A list that fails ends the command with one line saying why (below); the informers'
        # own "retrying" warnings would only repeat it.
        logging.getLogger("joulie.informer").setLevel(logging.ERROR)

        timeout = PLAN_TIMEOUT_S if args.timeout is None else args.timeout
        try:
            print(asyncio.run(live(plan_settings, args.output, timeout, args.kubeconfig)))
        except ClusterError as exc:
            print(f"joulie: {exc}", file=sys.stderr)
            return EXIT_CONFIG if exc.config else EXIT_CLUSTER
        return 0
    try:
        if args.inventory.exists():
            inventory = load_inventory(args.inventory)
        else:
            # Not a file: an embedded inventory by name, as `joulie simulate` takes it (the
            # message lists them for an unknown name).
            from joulie.sim.scenario import load_named_inventory

            inventory = load_named_inventory(str(args.inventory))
        catalog = load_catalog(os.environ.get("HARDWARE_CATALOG_PATH"))
    except (InventoryError, CatalogError) as exc:
        print(f"joulie: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    label_keys = plan_settings.gpu_product_label_keys
    for warning in unrecognised_models(inventory, catalog, label_keys):
        print(f"joulie: warning: {args.inventory}: {warning}", file=sys.stderr)
    nodes = inventory_nodes(inventory, catalog, label_keys)
    result = make_plan(nodes, plan_settings, args.perf_pods)
    gpu_caps = family_gpu_caps(inventory_views(inventory, catalog, label_keys), catalog)
    print(render(nodes, result, args.output, gpu_caps, plan_settings.policy_type.value))
    return 0


_PLAN_FLAGS: tuple[Parameter, ...] = tuple(p for p in PARAMETERS if p.flag)
"""The policy parameters `joulie plan` takes as flags (each policy declares its own)."""


def _demand_readers() -> str:
    return " or ".join(kind.value for kind, p in POLICIES.items() if Reads.DEMAND in p.reads)


def _plan_flag_problem(
    args: argparse.Namespace, env_policy: PolicyType, from_env: bool
) -> str | None:
    """Why a flag given to `joulie plan` would have no effect (None when all apply): a flag the
    chosen policy or mode does not read would otherwise be ignored without a word."""
    if args.policy:
        policy, chosen_by = PolicyType(args.policy), "chosen by --policy"
    else:
        policy = env_policy
        chosen_by = "set by POLICY_TYPE" if from_env else "the default; choose one with --policy"
    for parameter in _PLAN_FLAGS:
        if getattr(args, parameter.name) is None or parameter in POLICIES[policy].parameters:
            continue
        owners = [kind.value for kind, p in POLICIES.items() if parameter in p.parameters]
        return (
            f"{parameter.flag} applies only to the {' or '.join(owners)} policy, not to "
            f"{policy.value} ({chosen_by})"
        )
    if args.perf_pods is not None:
        if Reads.DEMAND not in POLICIES[policy].reads:
            return (
                f"--perf-pods applies only to the {_demand_readers()} policy, not to "
                f"{policy.value} ({chosen_by})"
            )
        if args.live:
            return "--perf-pods does not apply with --live, which counts the cluster's own pods"
    if args.timeout is not None and not args.live:
        return "--timeout applies only with --live (an --inventory plan waits for nothing)"
    if args.kubeconfig is not None and not args.live:
        return "--kubeconfig applies only with --live (an --inventory plan reads no cluster)"
    return None


def _run_roles(roles_text: str) -> int:
    found = _load(roles_text)
    if found is None:
        return EXIT_CONFIG
    specs, loaded = found
    if _report_problems(loaded):
        return EXIT_CONFIG
    import structlog

    from joulie.process.logs import configure_logging

    process = loaded[0].settings
    assert isinstance(process, ProcessSettings)
    configure_logging(process.log_format, process.log_level)
    log = structlog.get_logger("joulie")
    for item in loaded:
        for warning in item.warnings:
            log.warning("configuration", detail=warning)

    missing = [s.name for s in specs if s.implementation is None]
    if missing:
        log.error(
            "role not available in this version",
            roles=missing,
            detail="the configuration is valid, but this build does not implement these roles "
            "yet; see README.md, section Status",
        )
        return 1

    from joulie.process.runtime import run

    try:
        roles = [spec.build(item.settings) for spec, item in zip(specs, loaded[1:], strict=True)]
    except NotImplementedError as exc:
        log.error("role not available in this version", detail=str(exc))
        return 1
    return run(roles, process)


EXIT_BROKEN_PIPE = 128 + 13
"""What a shell reports for a tool killed by SIGPIPE: the reader of our output went away."""


def entrypoint() -> None:
    try:
        code = main()
        # Flushed here, inside the try: a closed pipe found by the interpreter's own flush at
        # exit would print an "Exception ignored" message instead.
        sys.stdout.flush()
    except BrokenPipeError:
        # `joulie plan ... | head` closed the pipe early: end quietly, as Unix tools do. Python
        # flushes stdout once more at exit; pointed at devnull, that flush cannot fail again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        sys.exit(EXIT_BROKEN_PIPE)
    sys.exit(code)


__all__ = ["describe_value", "entrypoint", "main"]
