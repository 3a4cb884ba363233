"""The ``tumbler`` command: run a command under a lock, inspect locks, force-release them, demo.

A thin layer over the public blocking API (``tumbler.connect``): options are parsed here, and
``run``'s command is supervised by :mod:`tumbler._supervisor`, imported for ``run`` only
(``status`` and ``release`` start without it, and without subprocess). Every failure ends with one
line on stderr, ``tumbler: <message>``, and an exit status from sysexits(3), a tumbler error's
being its class's ``exit_status`` (tumbler.errors)::

    0    success (``run``: the command's own status is passed through)
    64   usage error: bad arguments, bad lock name, bad TTL or wait
    69   the backend is unavailable
    70   an internal error: a tumbler error that means a bug
    75   the lock is busy: not acquired in time, or its line of waiters is full
    77   the backend refused access
    78   configuration error: bad or unknown backend URL, missing extra, unusable backend
         (``memory://``, whose locks live inside one process, included)
    79   the lock was lost while the command ran (the command was stopped)
    126  ``run``: the command cannot be executed; 127: the command was not found
    129, 130, 143  ``run``: SIGHUP, SIGINT, SIGTERM while waiting for the lock
"""

from __future__ import annotations

import contextlib
import importlib
import math
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import click

import tumbler
from tumbler import HolderInfo, LockState, _logs, backends
from tumbler import _core as core
from tumbler._url import parse_url
from tumbler.errors import (
    EX_CANNOT_EXECUTE,
    EX_CONFIG,
    EX_LOCK_LOST,
    EX_NOPERM,
    EX_NOT_FOUND,
    EX_SIGNAL_BASE,
    EX_SOFTWARE,
    EX_TEMPFAIL,
    EX_UNAVAILABLE,
    EX_USAGE,
    ConfigurationError,
    TumblerError,
    install_command,
)

__all__ = [
    "EX_CANNOT_EXECUTE",
    "EX_CONFIG",
    "EX_FAILURE",
    "EX_LOCK_LOST",
    "EX_NOPERM",
    "EX_NOT_FOUND",
    "EX_OK",
    "EX_SIGNAL_BASE",
    "EX_SOFTWARE",
    "EX_TEMPFAIL",
    "EX_UNAVAILABLE",
    "EX_USAGE",
    "cli",
    "exit_code_for",
    "main",
]

# -- exit statuses: an error's is its own (``exit_status``, in tumbler.errors); these are the rest

EX_OK = 0
#: the demo's locked run came out wrong, a demo worker failed, or a confirmation was declined
EX_FAILURE = 1

EXIT_STATUS_HELP = """\b
Exit status:
  0    success (run: the command's own status)
  64   usage error (bad arguments, lock name, TTL)
  69   backend unavailable
  70   internal error (a bug)
  75   lock busy: not acquired in time, or its line of waiters is full
  77   permission denied by the backend
  78   configuration error (bad/unknown URL, missing extra,
       a backend whose locks live inside one process)
  79   lock lost while the command ran (it was stopped)
  126  command not executable, 127 command not found
  130  SIGINT, 143 SIGTERM, 129 SIGHUP while waiting for the lock"""


def exit_code_for(error: TumblerError) -> int:
    """The exit status for a tumbler error: its class's ``exit_status`` (70, EX_SOFTWARE, for
    one that means a bug)."""
    return error.exit_status


def _one_line(text: str) -> str:
    return " ".join(text.split())


#: What a terminal acts on instead of showing: C0 controls, DEL and C1 controls (ESC and CSI
#: begin escape sequences: cursor moves, window titles, hyperlinks), lone surrogates (not even
#: encodable), and bidirectional marks, overrides and isolates and the line and paragraph
#: separators, which reorder or break the text around them. (Patterns, not compiled ones: re
#: compiles them at their first use, which a command that prints nothing never pays for.)
_UNPRINTABLE = (
    r"[\x00-\x1f\x7f-\x9f\ud800-\udfff\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
    r"\u2028\u2029]"
)


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def _printable(text: str) -> str:
    """``text`` made safe for a terminal: what a terminal would act on is shown as an escape.

    Holder descriptions, and the lock names ``status`` lists, are written by whichever client
    took the lock (a backend does not check them), so they may carry escape sequences meant for
    the operator's terminal. Everything the CLI prints for humans goes through here.
    """
    return re.sub(_UNPRINTABLE, _escape, text)


#: The same less the C0 controls, which ``json.dumps`` escapes itself inside strings (outside
#: them, its indentation's newlines are the only ones)
_UNPRINTABLE_IN_JSON = (
    r"[\x7f-\x9f\ud800-\udfff\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]"
)


def _json_escape(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def _json_text(document: Any, *, indent: int | None = 2) -> str:
    """``document`` as JSON (indented, or on one line with ``indent=None``) in which no
    character a terminal acts on appears raw.

    ``json.dumps`` escapes C0 controls only; DEL, C1 controls, lone surrogates and
    bidirectional controls are escaped here too (``\\uXXXX`` is valid anywhere in a JSON
    string, and these characters occur only inside strings).
    """
    import json  # only status --json needs it

    text = json.dumps(document, indent=indent, ensure_ascii=False)
    return re.sub(_UNPRINTABLE_IN_JSON, _json_escape, text)


def _complain(message: str) -> None:
    click.echo(f"tumbler: {_printable(_one_line(message))}", err=True)


# -- parameter types -----------------------------------------------------------------------------


if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from tumbler.backends import BackendDescriptor
    from tumbler.demo import RunResult

    _FloatType = click.ParamType[float, Any]  # generic only in recent click
else:
    _FloatType = click.ParamType


class Seconds(_FloatType):
    """A finite number of seconds: ``positive`` ones for leases, non-negative for waits.

    At most a year: the library's longest lease and timeout (and far longer ones would
    overflow the timer of --kill-after). The library's finer rules (a lease of at least
    10 ms) are checked by the commands before they connect.
    """

    name = "seconds"

    def __init__(self, *, positive: bool) -> None:
        self.positive = positive

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        try:
            seconds = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number of seconds", param, ctx)
        if not math.isfinite(seconds):
            self.fail(f"{value!r} is not a finite number of seconds", param, ctx)
        if self.positive and seconds <= 0:
            self.fail(f"{value!r} must be more than 0 seconds", param, ctx)
        if seconds < 0:
            self.fail(f"{value!r} must not be negative", param, ctx)
        if seconds > core.MAX_TIMEOUT:
            self.fail(f"{value!r} is more than a year ({core.MAX_TIMEOUT:.0f} s)", param, ctx)
        return seconds


LEASE = Seconds(positive=True)
DURATION = Seconds(positive=False)

F = TypeVar("F", bound=Callable[..., Any])


def url_option(help_text: str | None = None) -> Callable[[F], F]:
    return click.option(
        "--url",
        metavar="URL",
        default=None,
        help=help_text
        or "Backend URL, e.g. sqlite:///var/lib/app/locks.db. "
        "Default: $TUMBLER_URL, else an SQLite file in your cache directory.",
    )


def _connect(url: str | None, command: str, holder: str | None = None) -> tumbler.Locks:
    """Connect for ``command``, refusing a backend whose locks live inside one process.

    ``run``, ``status`` and ``release`` are about locks that other processes take: on a
    backend of scope "process" (``memory://``), ``run`` would exclude nobody, and ``status``
    and ``release`` would see only this process's own (none).
    """
    locks = tumbler.connect(url, holder=holder)
    if locks.capabilities.scope == "process":
        locks.close()
        raise ConfigurationError(
            f"this backend's locks live inside one process, so 'tumbler {command}' would "
            f"see no other process's locks: use {_by_scope('host', 'network')}",
            backend=locks.url,
        )
    return locks


def _check_name(name: str) -> None:
    """Refuse a bad lock name before connecting, which could create the SQLite file: bad input
    leaves nothing behind."""
    core.validate_name(name)


# -- the backends, named from their descriptors ----------------------------------------------------
#
# Help texts and messages that name backends are made from the built-in backends' descriptors
# when they are shown, so that a backend added later is named without an edit here.

#: whom a backend's locks exclude, by the scope its capabilities declare
_EXCLUDES = {
    "host": "processes of one machine",
    "network": "processes on any machine",
    "process": "threads and tasks of one process",
}


def _descriptors() -> list[BackendDescriptor]:
    return backends.builtin_descriptors()


def _either(items: Sequence[str]) -> str:
    """``a``, ``a or b``, ``a, b or c``."""
    return " or ".join([", ".join(items[:-1]), items[-1]] if len(items) > 1 else items)


def _by_scope(*scopes: str) -> str:
    """The backends of ``scopes``, each by its first scheme, grouped by whom they exclude:
    ``sqlite:// (processes of one machine); etcd://, ... or zookeeper:// (processes on any
    machine)``."""
    groups = []
    for scope in scopes:
        schemes = [f"{d.schemes[0]}://" for d in _descriptors() if d.capabilities.scope == scope]
        if schemes:
            groups.append(f"{_either(schemes)} ({_EXCLUDES.get(scope, scope)})")
    return "; ".join(groups)


def _names(wanted: Callable[[BackendDescriptor], bool]) -> str:
    return ", ".join(d.name for d in _descriptors() if wanted(d))


#: the fields a help text may hold, filled when it is shown
_HELP_FIELDS: dict[str, Callable[[], str]] = {
    "{excludes}": lambda: _by_scope(*_EXCLUDES),
    "{session_backends}": lambda: _names(lambda d: d.capabilities.session_liveness),
    "{preparing_backends}": lambda: _names(lambda d: d.prepare is not None),
}


def _filled(text: str) -> str:
    for field, make in _HELP_FIELDS.items():
        if field in text:
            text = text.replace(field, make())
    return text


def _backends_help() -> str:
    """The list of backends in ``tumbler --help``: each one's name, summary and URL form."""
    lines = [
        "\b",
        "Backends (--url URL, else $TUMBLER_URL, else an SQLite file in your cache directory):",
    ]
    for descriptor in _descriptors():
        url_form = descriptor.url_form or f"{descriptor.schemes[0]}://..."
        lines.append(f"  {descriptor.name}: {descriptor.summary}".rstrip(": "))
        lines.append(f"    {url_form}")
        also = [f"{s}://" for s in descriptor.schemes if not url_form.startswith(f"{s}://")]
        notes = [f"also {', '.join(also)}"] if also else []
        if descriptor.extra is not None:
            notes.append(install_command(descriptor.extra))
        if notes:
            lines.append(f"    ({'; '.join(notes)})")
    return "\n".join(lines)


class _Described(click.Command):
    """A command whose help names backends: its ``{fields}`` (``_HELP_FIELDS``) are filled from
    the descriptors when the help is shown, and only then."""

    @property
    def help(self) -> str | None:
        return None if self._help is None else _filled(self._help)

    @help.setter
    def help(self, text: str | None) -> None:
        self._help = text


# -- the command group ---------------------------------------------------------------------------


class _Commands(click.Group):
    """The command group: commands defined here, and commands imported when they are asked for.

    ``lazy_commands`` maps a command's name to ``"module:attribute"``, the click command that
    its module defines. The module is imported only when click looks the command up: to run
    it, to show its help, or to list every command with its short help (``tumbler --help``).
    So ``tumbler run`` starts without the torture harness, which it never uses and which takes
    longer to import than the rest of the CLI.
    """

    def __init__(
        self, *args: Any, lazy_commands: dict[str, str] | None = None, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.lazy_commands = dict(lazy_commands or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy_commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = self.lazy_commands.get(cmd_name)
        if target is None:
            return super().get_command(ctx, cmd_name)
        module_name, _, attribute = target.partition(":")
        command: click.Command = getattr(importlib.import_module(module_name), attribute)
        return command

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        formatter.write_paragraph()
        with formatter.indentation():
            formatter.write_text(_backends_help())
        super().format_epilog(ctx, formatter)


@click.group(
    cls=_Commands,
    # the harness lives in its own package (tumbler.torture); this is its one link to the CLI
    lazy_commands={"torture": "tumbler.torture.cli:torture"},
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    epilog=EXIT_STATUS_HELP,
)
@click.version_option(tumbler.__version__, "-V", "--version", message="%(prog)s %(version)s")
@click.option(
    "-v", "--verbose", is_flag=True, help="Log the library's warnings (renewal retries, ...)."
)
@click.pass_context
def cli(ctx: click.Context, verbose: bool) -> None:
    """Distributed locks from the shell: run commands under a lock, inspect and release locks."""
    ctx.with_resource(_library_logging(verbose))


@contextlib.contextmanager
def _library_logging(verbose: bool) -> Iterator[None]:
    """Route the library's log records to stderr: warnings only with --verbose.

    Without a handler Python's last-resort handler would print every warning (a lost hold is
    logged by the library and reported here too): one line per failure is the rule. Without
    --verbose the handler is set up only if the library logs at all: a command that runs
    without a hitch does not import the logging package.
    """
    undo: list[Callable[[], None]] = []

    def set_up() -> None:
        import logging

        logger = logging.getLogger("tumbler")
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("tumbler: %(levelname)s: %(message)s"))
        handler.setLevel(logging.DEBUG if verbose else logging.ERROR)
        old_level = logger.level
        logger.addHandler(handler)
        if verbose:
            logger.setLevel(logging.DEBUG)

        def take_back() -> None:
            logger.removeHandler(handler)
            logger.setLevel(old_level)

        undo.append(take_back)

    if verbose:
        set_up()
    else:
        undo.append(_logs.when_used(set_up))
    try:
        yield
    finally:
        for step in reversed(undo):
            step()


# -- run -----------------------------------------------------------------------------------------


class _RunCommand(_Described):
    """``run``: everything after ``--`` is the command, taken verbatim."""

    COMMAND_KEY = "tumbler.command"

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if "--" in args:
            split = args.index("--")
            ctx.meta[self.COMMAND_KEY] = args[split + 1 :]
            args = args[:split]
        else:
            ctx.meta[self.COMMAND_KEY] = None
            if not any(arg in ctx.help_option_names for arg in args):
                raise click.UsageError(
                    "missing '--' before the command: tumbler run NAME [OPTIONS] -- CMD [ARGS]...",
                    ctx,
                )
        return super().parse_args(ctx, args)

    def collect_usage_pieces(self, ctx: click.Context) -> list[str]:
        return [*super().collect_usage_pieces(ctx), "-- CMD [ARGS]..."]


@cli.command(cls=_RunCommand, epilog=EXIT_STATUS_HELP)
@click.argument("name")
@click.option(
    "--ttl",
    type=LEASE,
    default=30.0,
    show_default=True,
    help="Lease in seconds. Renewed while the command runs; if this process dies, "
    "others can have the lock this long after the last renewal.",
)
@click.option(
    "--wait",
    type=DURATION,
    default=None,
    help="Seconds to wait for the lock. Default: for ever; 0 tries once.",
)
@click.option("--no-wait", is_flag=True, help="Try once: the same as --wait 0.")
@click.option(
    "-q",
    "--quiet",
    is_flag=True,
    help="Say nothing while waiting (by default, a wait of over a second says whom it waits "
    "for, on stderr, and again every 10 s).",
)
@click.option(
    "--kill-after",
    type=DURATION,
    default=None,
    help="If the lock cannot be kept, seconds between SIGTERM and SIGKILL to the command "
    "and the processes it started: at most a third of --ttl, since the SIGKILL comes before "
    "the lease can run out.  [default: 5, or a quarter of --ttl if less]",
)
@click.option(
    "--elect",
    is_flag=True,
    help="Run CMD as the leader of the election NAME: candidates lead one at a time, in the "
    "order they came, each term's $TUMBLER_TOKEN greater than the last. For a singleton "
    "worker: start one on every host, with a restart policy.",
)
@click.option(
    "--value",
    metavar="TEXT",
    default=None,
    help="With --elect, what the others read of this leader (tumbler status NAME): an "
    "address, say.  [default: this host, pid and program]",
)
@click.option(
    "--wait-descendants/--no-wait-descendants",
    default=True,
    help="Keep the lock until every process CMD started has exited, also those it left "
    "running in the background (the default; Linux only), or release it as soon as CMD "
    "itself exits.",
)
@url_option(
    "Backend URL, e.g. redis://HOST:6379/0 or sqlite:///var/lib/app/locks.db. "
    "Default: $TUMBLER_URL, else an SQLite file in your cache directory."
)
@click.pass_context
def run(
    ctx: click.Context,
    name: str,
    ttl: float,
    wait: float | None,
    no_wait: bool,
    quiet: bool,
    kill_after: float | None,
    elect: bool,
    value: str | None,
    wait_descendants: bool,
    url: str | None,
) -> int:
    """Run a command while holding the lock NAME: a distributed flock(1), or with --elect
    a leader election.

    Waits for the lock, runs CMD in its own process group, keeps the lease renewed, and
    exits with CMD's status. The lock is released once CMD and every process it started have
    exited: tumbler adopts (and reaps) what CMD leaves running in the background, as flock(1)
    keeps its lock while any of them holds the lock file open (a daemon CMD starts keeps it
    for as long as the daemon runs). --no-wait-descendants releases it when CMD itself
    exits. If the lock cannot be kept (no renewal got through and the lease could run out
    before CMD stops, or an operator force-released it), CMD's process group and every
    process it started get SIGTERM, then SIGKILL after --kill-after seconds, soon enough that
    the SIGKILL comes before the lease can run out, and tumbler exits with status 79.
    SIGINT, SIGTERM and SIGHUP are
    passed on to them while the lock is held; while waiting, they end the wait (exit status
    128 + the signal's number).

    CMD's environment is tumbler's, with the grant: $TUMBLER_LOCK (the lock's name) and
    $TUMBLER_TOKEN (its fencing token, to hand the resource the command writes to, which
    refuses a token lower than one it has seen); and $TUMBLER_URL loses its credentials (user
    and password): the command does not need them, and everything it starts would inherit
    them.

    Whom a lock excludes depends on the backend: {excludes}. A backend whose locks live
    inside one process is refused here.

    \b
    A cron job installed on many hosts, to run on one at a time (credentials
    in $TUMBLER_URL: a command line is visible to every user):
      TUMBLER_URL=redis://:PASSWORD@locks.internal:6379/0 \\
        tumbler run --no-wait nightly-report -- ./report.sh
    Jobs of one machine that must not overlap:
      tumbler run --url sqlite:///var/lib/app/locks.db backup -- ./backup.sh
    One scheduler for the whole fleet, the others standing by (under systemd's
    Restart=always, each takes over in turn when the leader dies or its lease is lost):
      tumbler run --elect --value "$(hostname):8080" scheduler -- ./scheduler
    """
    command: list[str] | None = ctx.meta[_RunCommand.COMMAND_KEY]
    if not command:
        raise click.UsageError("no command given after '--'", ctx)
    if no_wait:
        if wait not in (None, 0):
            raise click.UsageError("--no-wait and --wait are contradictory", ctx)
        wait = 0.0
    if value is not None and not elect:
        raise click.UsageError("--value is the leader's: it needs --elect", ctx)
    from tumbler import _supervisor  # only run needs it

    holder = _supervisor.holder_for(command)
    return _supervisor.run_locked(
        lambda: _connect(url, "run", holder),
        name,
        command,
        ttl=ttl,
        wait=wait,
        kill_after=kill_after,
        wait_descendants=wait_descendants,
        complain=_complain,
        report_wait=not quiet,
        leader=(holder if value is None else value) if elect else None,
    )


# -- status --------------------------------------------------------------------------------------


def _holder_json(holder: HolderInfo) -> dict[str, Any]:
    # A grant that lives with its holder's session has no countdown: its expires_in is the
    # session timeout, which a script must not read as the seconds left.
    return {
        "holder": holder.holder,
        "token": holder.token,
        "mode": "shared" if holder.shared else "exclusive",
        "expires_in": None if holder.session else round(holder.expires_in, 3),
        "session": holder.session,
        "session_timeout": round(holder.expires_in, 3) if holder.session else None,
    }


def _state_json(state: LockState) -> dict[str, Any]:
    return {
        "name": state.name,
        "locked": state.locked,
        "holders": [_holder_json(holder) for holder in state.holders],
        "waiters": state.waiters,
        "limit": state.limit,
        "malformed": state.malformed,
        "lapsed": [_holder_json(holder) for holder in state.lapsed],
    }


def _lease_text(holder: HolderInfo) -> str:
    """How long the grant lasts, as the status table shows it."""
    if holder.session:
        return f"with session (timeout {holder.expires_in:g} s)"
    return f"{holder.expires_in:.1f} s left"


# rich is imported where a table is printed: `tumbler run`, the hot path, never needs it.


def _console() -> Console:
    from rich.console import Console

    console = Console(markup=False, emoji=False, highlight=False)
    if not console.is_terminal:
        console.width = max(console.width, 120)  # a pipe has no width: do not wrap cells
    return console


def _table(*columns: str, right: Sequence[str] = ()) -> Table:
    from rich import box
    from rich.table import Table

    table = Table(box=box.SIMPLE_HEAD)
    for column in columns:
        table.add_column(column, justify="right" if column in right else "left")
    return table


def _held_text(seconds: float, since_start: bool) -> str:
    """How long a grant has been held, as a watch saw it: ``since_start`` if it was held when
    the watch began (it may have been held longer)."""
    return ("≥" if since_start else "") + f"{seconds:.0f} s"


class _Watch:
    """What ``status --watch`` remembers between two reads: when it first saw each grant (by
    lock name and token), the backends' entries telling nothing of when a grant began."""

    def __init__(self) -> None:
        self.first_seen: dict[tuple[str, int], float] = {}
        #: the grants of the first read, which may have been held for longer
        self.at_start: set[tuple[str, int]] | None = None

    def held(self, states: Sequence[LockState]) -> dict[tuple[str, int], str]:
        """How long each grant of ``states`` has been held, for the table's column."""
        now = time.monotonic()
        seen = {(state.name, holder.token) for state in states for holder in state.holders}
        if self.at_start is None:
            self.at_start = seen
        self.first_seen = {grant: self.first_seen.get(grant, now) for grant in seen}
        return {
            grant: _held_text(now - at, since_start=grant in self.at_start)
            for grant, at in self.first_seen.items()
        }


def _status_table(
    states: Sequence[LockState], held: dict[tuple[str, int], str] | None = None
) -> Table:
    columns = ["lock", "holder", "token", "mode", "lease", "waiters"]
    if held is not None:
        columns.insert(4, "held")
    table = _table(*columns, right=("token", "held", "waiters"))
    for state in states:
        name = _printable(state.name)
        waiters = str(state.waiters)
        if not state.holders:
            table.add_row(name, "-", "-", "-", *(["-"] if held is not None else []), "-", waiters)
        for holder in state.holders:
            mode = "exclusive"
            if holder.shared:
                mode = "shared" if not state.limit else f"shared ({state.limit} permits)"
            table.add_row(
                name,
                _printable(holder.holder),
                str(holder.token),
                mode,
                *([held.get((state.name, holder.token), "")] if held is not None else []),
                _lease_text(holder),
                waiters,
            )
    return table


def _backend_line(locks: tumbler.Locks, url: str | None) -> str:
    """Which backend ``status`` read, and where its URL came from."""
    if url is not None:
        origin = ""
    elif os.environ.get(backends.URL_VARIABLE):
        origin = f" (from ${backends.URL_VARIABLE})"
    else:
        origin = f" (the default: ${backends.URL_VARIABLE} is not set)"
    return f"backend: {locks.url}{origin}"


@cli.command(cls=_Described)
@click.argument("name", required=False)
@url_option()
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts instead of a table.")
@click.option(
    "--watch",
    is_flag=True,
    help="Read again every --interval seconds until Ctrl-C, and at once when lock NAME "
    "changes: a live table with how long each grant has been held, or with --json one line "
    "of JSON per read.",
)
@click.option(
    "--interval",
    type=Seconds(positive=True),
    default=1.0,
    show_default=True,
    help="Seconds between two reads of --watch.",
)
def status(name: str | None, url: str | None, as_json: bool, watch: bool, interval: float) -> int:
    """Show the holders and waiters of lock NAME, or of every lock in use.

    For each holder: its description (host and pid), fencing token, mode (exclusive or
    shared) and its lease: the seconds left on it, or, on a backend where a grant lives
    with its holder's session ({session_backends}), "with session" and the session's timeout
    (how long the grant outlives a holder that died). "waiters" counts the backend's entries:
    one per client waiting on the lock, however many of its threads or tasks wait behind it
    in the client's own line. The table names the backend it read (and whether its URL came
    from $TUMBLER_URL or is the default). With --json, one object for NAME
    ({"name", "locked", "holders": [{"holder", "token", "mode", "expires_in", "session",
    "session_timeout"}], "waiters", "limit", "malformed", "lapsed"}), or a list of them
    without NAME; expires_in is null for a session's grant, session_timeout null for the
    others; malformed counts entries tumbler did not write, which block nothing; lapsed lists
    the grants that ended without a release and close the lock for their lock-delay (its
    seconds left as expires_in), as the table's notes below it say. With --watch, it reads again
    every --interval seconds until Ctrl-C (exit status 0), and for one NAME at once when the
    lock changes (a grant, a release, a waiter; told by the backend where it can, else read
    four times a second): a live table whose "held" column
    says how long each grant has been held as far as the watch saw (≥ for one held when it
    began), or, with --json, one line per read (JSON Lines). Characters that a terminal
    would act on (escape sequences in a holder's description) are shown escaped.
    """
    if name is not None:
        _check_name(name)
    with _connect(url, "status") as locks:
        if watch:
            return _watch_status(locks, name, url, as_json, interval)
        states = [locks.status(name)] if name is not None else locks.status_all()
    if as_json:
        click.echo(_json_text(_states_json(states, name)))
        return EX_OK
    console = _console()
    console.print(_backend_line(locks, url), soft_wrap=True)
    for part in _status_parts(states, name):
        console.print(part)
    return EX_OK


def _states_json(states: Sequence[LockState], name: str | None) -> Any:
    return _state_json(states[0]) if name is not None else list(map(_state_json, states))


def _status_parts(
    states: Sequence[LockState], name: str | None, held: dict[tuple[str, int], str] | None = None
) -> list[Table | str]:
    """What ``status`` prints of ``states`` after the backend's line, in order."""
    parts: list[Table | str] = []
    if name is not None and not (states[0].holders or states[0].waiters or states[0].lapsed):
        parts.append(f"lock {states[0].name!r} is free: no holders, no waiters")
    elif not states:
        parts.append("no lock has holders or waiters")
    else:
        parts.append(_status_table(states, held))
    parts += [
        f"lock {_printable(state.name)!r}: closed {lapsed.expires_in:.1f} s more, the lock-delay "
        f"of {_printable(lapsed.holder)}'s grant (token {lapsed.token}), which ended without "
        "a release"
        for state in states
        for lapsed in state.lapsed
    ]
    parts += [
        f"lock {_printable(state.name)!r}: {state.malformed} entries tumbler did not write "
        "(skipped; its next grant, release or force release removes them)"
        for state in states
        if state.malformed
    ]
    return parts


def _watch_status(
    locks: tumbler.Locks, name: str | None, url: str | None, as_json: bool, interval: float
) -> int:
    """``status --watch``: read every ``interval`` seconds until SIGINT."""
    watch = _Watch()
    console = None if as_json else _console()
    backend = _backend_line(locks, url)
    live = None
    if console is not None and console.is_terminal:
        from rich.live import Live

        live = Live(console=console, auto_refresh=False, transient=False)
        live.start()
    changed = threading.Event()
    changes = None
    try:
        if name is not None:
            changes = _follow(locks, name, changed)
        while True:
            changed.clear()
            states = [locks.status(name)] if name is not None else locks.status_all()
            if console is None:
                click.echo(_json_text(_states_json(states, name), indent=None))
            else:
                parts = _status_parts(states, name, watch.held(states))
                if live is not None:
                    from rich.console import Group

                    live.update(Group(backend, *parts), refresh=True)
                else:
                    for part in (backend, *parts, ""):
                        console.print(part)
            changed.wait(interval)
    except KeyboardInterrupt:
        return EX_OK
    finally:
        if changes is not None:
            changes.close()
        if live is not None:
            live.stop()


def _follow(locks: tumbler.Locks, name: str, changed: threading.Event) -> tumbler.StateChanges:
    """Set ``changed`` at each change of lock ``name`` (``locks.watch``, on a thread of its
    own), so that ``status NAME --watch`` reads it again at once, not at its next interval.
    Returns once the watch has read the lock: every change after that sets ``changed``."""
    changes = locks.watch(name)
    began = threading.Event()

    def follow() -> None:
        try:
            for _state in changes:
                if began.is_set():
                    changed.set()
                began.set()
        except TumblerError:
            pass  # closed, or the backend failed: the reads at the interval go on
        finally:
            began.set()

    threading.Thread(target=follow, name="tumbler-status-watch", daemon=True).start()
    began.wait()
    return changes


# -- release -------------------------------------------------------------------------------------


@cli.command()
@click.argument("name")
@click.option(
    "--force", is_flag=True, help="Remove every grant of NAME, whoever holds it (required)."
)
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")
@click.option(
    "--reason",
    metavar="TEXT",
    help="Why, for the evicted holders: recorded on the backend with who forced it (user, "
    "host, pid) and when, and reported as their lost reason.",
)
@url_option()
def release(name: str, force: bool, yes: bool, reason: str | None, url: str | None) -> int:
    """For operators: force-release lock NAME, taking it from its holders.

    A hold is normally released by the process that holds it; this removes the grants of
    another owner, e.g. one that hangs. Its holders find out at their next lease renewal
    (a `tumbler run` then stops its command and exits 79), and a resource that checks fencing
    tokens refuses their writes once the next holder has written. Who forced it, when, and
    --reason are left on the backend, where each evicted holder reads them: its hold's lost
    reason says "force-released by ...". Asks for confirmation unless --yes is given; without
    a terminal to ask on, --yes is required.
    """
    if not force:
        raise click.UsageError(
            "release takes another owner's hold away: that needs --force "
            "(a holder releases its own hold itself)",
            click.get_current_context(),
        )
    if not yes and not sys.stdin.isatty():
        raise click.UsageError(
            "no terminal to confirm on: add --yes to force-release", click.get_current_context()
        )
    _check_name(name)
    core.validate_reason(reason)  # before anything is asked of the backend
    with _connect(url, "release") as locks:
        state = locks.status(name)
        if not yes:
            if not state.holders:
                click.echo(f"lock {state.name!r} has no holders: nothing to release")
                return EX_OK
            console = _console()
            console.print(_status_table([state]))
            try:
                confirmed = click.confirm(
                    f"Force-release lock {state.name!r} from {len(state.holders)} holder(s)?",
                    default=False,
                )
            except click.Abort:
                confirmed = False
            if not confirmed:
                _complain("not released")
                return EX_FAILURE
        removed = locks.force_release(name, reason=reason)
    click.echo(f"released {removed} grant(s) of lock {state.name!r}")
    return EX_OK


# -- init ----------------------------------------------------------------------------------------


@cli.command(cls=_Described)
@click.argument("url", required=False, metavar="[URL]")
def init(url: str | None) -> int:
    """Make what the backend at URL needs before its first use, and say what that was.

    The backends that have something to make ({preparing_backends}) make their tables, and
    whatever else they keep beside them (a schema, functions, procedures: the README's
    section of each says what, and where the URL puts it), on first use too; run this as a
    role that may create them when the application's own role may not (then grant it what
    the README lists). Safe to run again, and while clients use them. A backend that needs
    nothing made says so. URL defaults to $TUMBLER_URL (where a password is not seen by
    other users of the machine).
    """
    click.echo(tumbler.prepare(url))
    return EX_OK


# -- demo ----------------------------------------------------------------------------------------


@cli.command()
@url_option(
    "Backend URL for the locks. Default: an SQLite file in a fresh temporary directory "
    "($TUMBLER_URL is not used)."
)
@click.option(
    "--http",
    is_flag=True,
    help="Run the stock service of examples/ as two HTTP instances under concurrent load: "
    "without a lock, with one, with a segmented lock.",
)
@click.option(
    "--workers",
    type=click.IntRange(1, 64),
    default=None,
    help="Worker processes.  [default: 4; not with --http]",
)
@click.option(
    "--requests",
    type=click.IntRange(1, 100_000),
    default=None,
    help="Purchase requests: per worker; with --http, in all.  [default: 30; --http: 150]",
)
@click.option(
    "--stock",
    type=click.IntRange(0, 1_000_000),
    default=100,
    show_default=True,
    help="Items in stock at the start.",
)
@click.option(
    "--think",
    type=DURATION,
    default=None,
    help="Seconds between reading and writing the stock (wider: a surer race).  "
    "[default: 0.001; --http: 0.01]",
)
@click.option(
    "--concurrency",
    # each client keeps a connection to each instance: 256 of them stay well within the
    # usual limit of 1024 open files
    type=click.IntRange(1, 256),
    default=None,
    help="--http: concurrent clients.  [default: 30]",
)
@click.option(
    "--segments",
    type=click.IntRange(1, 64),
    default=None,
    help="--http: the stock's segments, one per segment of the segmented lock.  [default: 4]",
)
@click.option(
    "--flavour",
    type=click.Choice(["sync", "asyncio"]),
    default=None,
    help="--http: which example service runs, blocking or asyncio.  [default: sync]",
)
@click.option(
    "-q",
    "--quiet",
    is_flag=True,
    help="--http: leave out the instances' own output (their logs), keeping the progress and "
    "the results.",
)
def demo(
    url: str | None,
    http: bool,
    workers: int | None,
    requests: int | None,
    stock: int,
    think: float | None,
    concurrency: int | None,
    segments: int | None,
    flavour: str | None,
    quiet: bool,
) -> int:
    """Show a race that a lock prevents: stock deduction by worker processes.

    Worker processes sell items from a stock kept in a file: read it, think, write it back
    minus one, record the sale. Run once without a lock (oversold items, lost updates) and
    once with a tumbler lock around each sale (exactly right).

    With --http, two instances of the example stock service (examples/stock_service.py, or
    stock_service_async.py with --flavour asyncio) serve HTTP on loopback ports, sharing one
    stock, and concurrent clients send purchase requests to them in turn: without a lock,
    with one lock, and with a segmented lock (throughput compared).

    Exits 0 if the locked runs are exactly right, 1 otherwise.
    """
    from . import demo as stock_demo

    if url is not None and not stock_demo.shared_by_processes(url):
        raise click.BadParameter(
            f"{parse_url(url).redacted}: its locks live inside one process; the demo's "
            f"workers are separate processes: use {_by_scope('host', 'network')}",
            param_hint="'--url'",
        )
    if think is not None and think > 10:
        raise click.BadParameter("at most 10 seconds", param_hint="'--think'")
    if http:
        if workers is not None:
            raise click.BadParameter(
                "the HTTP demo has two instances and --concurrency clients",
                param_hint="'--workers'",
            )
        return _http_demo(
            url,
            flavour=flavour or "sync",
            requests=requests or 150,
            concurrency=concurrency or 30,
            stock=stock,
            segments=segments or 4,
            think=0.01 if think is None else think,
            quiet=quiet,
        )
    for name, value in (
        ("concurrency", concurrency),
        ("segments", segments),
        ("flavour", flavour),
        ("quiet", quiet or None),
    ):
        if value is not None:
            raise click.BadParameter("only with --http", param_hint=f"'--{name}'")
    workers = workers or 4
    requests = requests or 30
    think = 0.001 if think is None else think
    console = _console()
    console.print(
        f"Stock-deduction demo: {workers} worker processes x {requests} requests, "
        f"stock {stock}, think {think * 1000:g} ms"
    )
    try:
        result = stock_demo.run_demo(
            url, workers=workers, requests=requests, stock=stock, think=think
        )
    except stock_demo.DemoError as error:
        _complain(str(error))
        return EX_FAILURE
    console.print(_demo_table((result.unlocked, result.locked)))
    console.print(f"backend: {result.url}")
    locked = result.locked
    if result.ok:
        console.print(
            f"with the lock: exactly right: sold {locked.sold} of {locked.initial_stock}, "
            f"{locked.final_stock} left, none oversold, no lost update"
        )
        return EX_OK
    _complain(
        f"the locked run came out wrong: sold {locked.sold} (expected {locked.expected_sold}), "
        f"{locked.final_stock} left, {locked.oversold} oversold, {locked.lost_updates} lost"
    )
    return EX_FAILURE


def _demo_table(runs: Sequence[RunResult], *, throughput: bool = False) -> Table:
    """The demo's runs side by side, in 80 columns: ``left`` is the stock left at the end,
    ``lost`` the updates lost (a sale recorded whose deduction another overwrote)."""
    numbers: tuple[str, ...] = ("requests", "sold", "left", "oversold", "lost", "secs")
    if throughput:
        numbers += ("req/s",)
    table = _table("run", *numbers, right=numbers)
    table.pad_edge, table.collapse_padding = False, True
    table.columns[0].no_wrap = True
    for run in runs:
        cells = [run.requests, run.sold, run.final_stock, run.oversold, run.lost_updates]
        table.add_row(
            run.label,
            *map(str, cells),
            f"{run.seconds:.2f}",
            *([f"{run.throughput:.0f}"] if throughput else []),
        )
    return table


def _http_demo(
    url: str | None,
    *,
    flavour: str,
    requests: int,
    concurrency: int,
    stock: int,
    segments: int,
    think: float,
    quiet: bool,
) -> int:
    from . import demo as stock_demo
    from . import demo_http

    console = _console()
    console.print(
        f"Stock-service demo over HTTP: 2 instances of {demo_http.FLAVOURS[flavour]}, "
        f"{requests} requests from {concurrency} concurrent clients, stock {stock} in "
        f"{segments} segments, think {think * 1000:g} ms"
    )
    try:
        with demo_http.TerminalView(console, instance_output=not quiet) as view:
            result = demo_http.run_http_demo(
                url,
                flavour=flavour,
                requests=requests,
                concurrency=concurrency,
                stock=stock,
                segments=segments,
                think=think,
                view=view,
            )
    except stock_demo.DemoError as error:
        _complain(str(error))
        return EX_FAILURE
    console.print(_demo_table(result.runs, throughput=True))
    console.print(f"backend: {result.url}")
    locked, segmented = result.locked, result.segmented
    console.print(
        f"segmented lock over {segmented.segments} segments: "
        f"{segmented.throughput:.0f} requests/s, one lock: {locked.throughput:.0f} requests/s "
        f"({result.speedup:.1f}x)"
    )
    if result.ok:
        console.print(
            f"with either lock: exactly right: sold {locked.sold} of {locked.initial_stock}, "
            "none oversold, no lost update"
        )
        return EX_OK
    for wrong in (run for run in (locked, segmented) if not run.exact):
        _complain(
            f"the run with {wrong.label} came out wrong: sold {wrong.sold} (expected "
            f"{wrong.expected_sold}), {wrong.final_stock} left, {wrong.oversold} oversold, "
            f"{wrong.lost_updates} lost, {wrong.failed} requests failed"
        )
    return EX_FAILURE


# -- entry point ---------------------------------------------------------------------------------


# click >= 8.2 raises this for a group called without a command; older click prints the help
_NO_ARGS_IS_HELP: tuple[type[Exception], ...] = tuple(
    kind for kind in [getattr(click.exceptions, "NoArgsIsHelpError", None)] if kind is not None
)


def main(argv: Sequence[str] | None = None) -> int:
    """The console script: run the ``tumbler`` command and return its exit status."""
    try:
        result = cli.main(
            args=list(argv) if argv is not None else None,
            prog_name="tumbler",
            standalone_mode=False,
        )
    except click.UsageError as error:
        if isinstance(error, _NO_ARGS_IS_HELP):  # `tumbler` alone: its help is the message
            click.echo(error.format_message(), err=True)
            return EX_USAGE
        message = error.format_message()
        if error.ctx is not None:
            message = f"{message.rstrip('.')} (see '{error.ctx.command_path} --help')"
        _complain(message)
        return EX_USAGE
    except click.ClickException as error:
        _complain(error.format_message())
        return EX_USAGE if error.exit_code == 2 else error.exit_code
    except click.Abort as error:
        _complain("aborted")
        if isinstance(error.__cause__, KeyboardInterrupt):
            return EX_SIGNAL_BASE + signal.SIGINT
        return EX_FAILURE
    except TumblerError as error:
        _complain(str(error))
        return exit_code_for(error)
    return result if isinstance(result, int) else EX_OK


if __name__ == "__main__":
    sys.exit(main())
