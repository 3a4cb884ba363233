"""``tumbler torture``: the fault-injection harness as a command (tumbler.cli finds it by name).

Exit status: 0 when no promised property was violated (and, with ``--strict``, every fault
bit); 1 otherwise; 64 usage error; 69 a backend's servers could not be started or its server
could not be reached; 78 a bad ``--url``; 70 a bug in the harness. A tumbler error met on
``--url`` exits with its ``exit_status`` (77 when the server refuses the URL's credentials).
"""

from __future__ import annotations

import os
import random
import sys
from pathlib import Path

import click

import tumbler
from tumbler.backends import URL_VARIABLE, descriptor_for
from tumbler.errors import TumblerError

from .backends import BackendSpec, SetupError, default_deployment, deployments, spec_for_url
from .faults import ALL_FAULTS, FAULT_HELP
from .harness import Options, TortureRun, backend_specs, run_torture
from .report import print_report, write_json, write_markdown
from .resource import FENCING_MODES
from .worker import PRIMITIVES

__all__ = ["exit_status", "main", "torture"]

EX_OK = 0
EX_VIOLATION = 1
EX_USAGE = 64
EX_UNAVAILABLE = 69
EX_CONFIG = 78


def _fault_list(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    known = {*ALL_FAULTS, "default", "all"}
    unknown = [
        name
        for name in names
        if name not in known and not all(kind in ALL_FAULTS for kind in name.split("+"))
    ]
    if unknown or not names:
        raise click.BadParameter(
            f"unknown fault {', '.join(unknown) or '(none given)'}; choose from "
            f"{', '.join(ALL_FAULTS)}, or default, all",
            param_hint="'--faults'",
        )
    return names


def _primitive_list(texts: tuple[str, ...]) -> tuple[str, ...]:
    names = [name.strip() for text in texts for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in (*PRIMITIVES, "all")]
    if unknown:
        raise click.BadParameter(
            f"unknown primitive {', '.join(unknown)}; choose from {', '.join(PRIMITIVES)}, all",
            param_hint="'--primitive'",
        )
    chosen: list[str] = []
    for name in names or ["lock"]:
        for primitive in PRIMITIVES if name == "all" else (name,):
            if primitive not in chosen:
                chosen.append(primitive)
    return tuple(chosen)


def _faults_help() -> str:
    return "; ".join(f"{name}: {text}" for name, text in FAULT_HELP.items())


@click.command(
    epilog="\b\nExit status: 0 no promised property violated; 1 violations (or, with --strict,\n"
    "a fault that never bit); 64 usage; 69 servers unavailable; 78 bad URL.",
)
@click.option(
    "--url",
    metavar="URL",
    default=None,
    help="Torture an existing server: only faults on the clients (kill, pause) and, for a URL "
    "that names one network server, network faults through a local proxy. Default: $TUMBLER_URL "
    "when no --backend is given. The workers get it from the harness, never on their command line.",
)
@click.option(
    "--backend",
    "backends",
    metavar="NAME",
    multiple=True,
    help="Start throwaway servers for the deployment NAME so server faults apply, or all "
    "(every deployment present); an unknown NAME lists them. Repeatable. Default: the default "
    "backend's (unless --url or $TUMBLER_URL is given).",
)
@click.option(
    "--workers",
    type=click.IntRange(2, 64),
    default=4,
    show_default=True,
    help="Worker processes contending for the lock.",
)
@click.option(
    "--seconds",
    type=click.FloatRange(1, 86_400),
    default=20.0,
    show_default=True,
    help="Seconds of faults per backend and fault.",
)
@click.option(
    "--ttl",
    type=click.FloatRange(0.2, 60),
    default=1.0,
    show_default=True,
    help="Lease of the workers' lock, in seconds.",
)
@click.option(
    "--think",
    type=click.FloatRange(0.001, 10),
    default=0.02,
    show_default=True,
    help="Seconds a holder waits between its read and its write.",
)
@click.option(
    "--faults",
    "faults_text",
    default="default",
    show_default=True,
    metavar="LIST",
    help=f"Comma-separated faults, one round each: default (each backend's own), all, or "
    f"some of: {_faults_help()}. Join kinds with + for one round injecting them in turn "
    "(net-cut+net-drop).",
)
@click.option(
    "--primitive",
    "primitive_texts",
    metavar="LIST",
    multiple=True,
    help="The primitives, one round each per fault: lock (the default), fair (a lock with "
    "fair=True), semaphore (of --permits), rwlock (3 in 4 acquires take the read side), "
    "election (each acquire a campaign, the leader the holder), multi (each acquire a "
    "multi-lock of 2 or 3 of 4 names, in a random order), or all. "
    "Repeatable or comma-separated.",
)
@click.option(
    "--permits",
    type=click.IntRange(2, 64),
    default=3,
    show_default=True,
    help="Permits of the semaphore.",
)
@click.option(
    "--lock-delay",
    type=click.FloatRange(0, 60),
    default=0.0,
    show_default=True,
    help="The locks' lock_delay in seconds: a grant lost other than by a release keeps the "
    "lock from everyone this long after its lease (with --fencing off, the control run of "
    "what a delay longer than the pauses protects). The backends must keep one.",
)
@click.option(
    "--min-faults",
    type=click.IntRange(0, 1_000_000),
    default=0,
    show_default=True,
    help="A soak: each deployment goes on past --seconds until each of its fault kinds was "
    "injected this often, summed over the kind's rounds (one per primitive), within "
    "--round-limit per round.",
)
@click.option(
    "--min-grants",
    type=click.IntRange(0, 100_000_000),
    default=0,
    show_default=True,
    help="A soak: each deployment goes on past --seconds until its workers were granted their "
    "locks this often, summed over all its rounds, within --round-limit per round.",
)
@click.option(
    "--round-limit",
    type=click.FloatRange(1, 7 * 86_400),
    default=3600.0,
    show_default=True,
    help="Seconds a round may go on for --min-faults and --min-grants; the report says when a "
    "round stopped there.",
)
@click.option(
    "--jobs",
    type=click.IntRange(1, 16),
    default=1,
    show_default=True,
    help="Torture this many backends side by side (a long soak on a machine with the cores).",
)
@click.option(
    "--fencing",
    type=click.Choice(FENCING_MODES),
    default="on",
    show_default=True,
    help="The resource's check: on (reads and writes), writes, off (a control run: "
    "violations expected).",
)
@click.option(
    "--seed", type=int, default=None, help="Seed of every random choice (default: random)."
)
@click.option(
    "--json",
    "json_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write the full report (every count, fault and violation) as JSON.",
)
@click.option(
    "--markdown",
    "markdown_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write the report as Markdown (between the report markers, if the file has them).",
)
@click.option(
    "--workdir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where servers and histories go (default: a temporary directory).",
)
@click.option("--keep", is_flag=True, help="Keep every round's histories, not only failed ones.")
@click.option("--strict", is_flag=True, help="Exit 1 also when a fault never bit.")
def torture(
    url: str | None,
    backends: tuple[str, ...],
    workers: int,
    seconds: float,
    ttl: float,
    think: float,
    faults_text: str,
    primitive_texts: tuple[str, ...],
    permits: int,
    lock_delay: float,
    min_faults: int,
    min_grants: int,
    round_limit: float,
    jobs: int,
    fencing: str,
    seed: int | None,
    json_path: Path | None,
    markdown_path: Path | None,
    workdir: Path | None,
    keep: bool,
    strict: bool,
) -> int:
    """Prove mutual exclusion under crashes, pauses, server failures and partitions.

    Worker processes (half of them blocking, half asyncio) take the lock (or the semaphore,
    the read/write lock, the fair lock) and do a read-modify-write on a shared counter in a
    separate process that checks fencing tokens; the harness kills and pauses holders, kills
    and restarts servers and breaks the network meanwhile, records everything, and checks the
    history: no two accepted holders overlap, tokens strictly increase, no update is lost,
    every grant is accounted for, the lock is granted again after each fault. One round per
    backend, fault and primitive; a report table at the end.
    """
    faults = _fault_list(faults_text)
    primitives = _primitive_list(primitive_texts)
    url_hint = "'--url'"
    if url is None and not backends:
        # as the other commands do; but an explicit --backend asks for throwaway servers
        # only, and never also tortures whatever server the environment points at
        url = os.environ.get(URL_VARIABLE) or None
        url_hint = f"${URL_VARIABLE}"
    known = deployments()
    names = list(backends) or ([] if url else [default_deployment()])
    unknown = [name for name in names if name != "all" and name not in known]
    if unknown:
        raise click.BadParameter(
            f"unknown backend {', '.join(unknown)}; choose from {', '.join(known)}, all",
            param_hint="'--backend'",
        )
    specs: list[BackendSpec] = backend_specs(names)
    if url is not None:
        try:
            with tumbler.connect(url) as locks:
                if locks.capabilities.scope == "process":
                    raise click.BadParameter(
                        f"{locks.url}: its locks live inside one process; the workers are "
                        "separate processes",
                        param_hint=url_hint,
                    )
        except TumblerError as error:
            click.echo(f"tumbler: {error}", err=True)
            return error.exit_status
        specs.append(spec_for_url(url))
    if "all" not in names:
        for spec in specs:
            reason = spec.unavailable()
            if reason is not None:
                click.echo(f"tumbler: cannot torture {spec.name}: {reason}", err=True)
                return EX_UNAVAILABLE
    if lock_delay:
        without = [
            spec.name
            for spec in specs
            if spec.unavailable() is None
            and not descriptor_for(spec.scheme).capabilities.lock_delay
        ]
        if without:
            raise click.BadParameter(
                f"{', '.join(without)} keep no lock-delay (capabilities.lock_delay)",
                param_hint="'--lock-delay'",
            )
    if seed is None:
        seed = random.SystemRandom().randrange(1_000_000)
    options = Options(
        workers=workers,
        seconds=seconds,
        ttl=ttl,
        think=think,
        fencing=fencing,
        seed=seed,
        keep=keep,
        workdir=workdir,
        primitives=primitives,
        permits=permits,
        lock_delay=lock_delay,
        min_faults=min_faults,
        min_grants=min_grants,
        round_limit=round_limit,
    )

    from rich.console import Console

    console = Console(markup=False, emoji=False, highlight=False)
    if not console.is_terminal:
        console.width = max(console.width, 160)  # a pipe has no width: do not wrap cells
    console.print(f"tumbler torture: seed {seed}")

    def log(message: str) -> None:
        click.echo(message, err=True)

    try:
        run = run_torture(specs, faults, options, log=log, jobs=jobs)
    except SetupError as error:
        click.echo(f"tumbler: {error}", err=True)
        return EX_UNAVAILABLE
    print_report(run, console)
    if json_path is not None:
        write_json(run, json_path)
    if markdown_path is not None:
        write_markdown(run, markdown_path)
    return exit_status(run, strict=strict)


def exit_status(run: TortureRun, *, strict: bool = False) -> int:
    """1 if a promised property was violated (or, ``strict``, a fault never bit), else 0."""
    if not run.ok:
        return EX_VIOLATION
    if strict and any(r.fault != "none" and not r.exercised for r in run.rounds):
        return EX_VIOLATION
    return EX_OK


def main(argv: list[str] | None = None) -> int:
    """Run ``torture`` on its own (before it is registered in ``tumbler``)."""
    try:
        result = torture.main(args=argv, prog_name="tumbler torture", standalone_mode=False)
    except click.UsageError as error:
        click.echo(f"tumbler: {error.format_message()}", err=True)
        return EX_USAGE
    except click.ClickException as error:
        click.echo(f"tumbler: {error.format_message()}", err=True)
        return EX_USAGE
    return result if isinstance(result, int) else EX_OK


if __name__ == "__main__":
    sys.exit(main())
