"""Bad input to the ``tumbler`` command: the sysexits status, one line on stderr, nothing made.

One table, CLI_CASES: a command line, the exit status it must end with (64 usage, 69
unavailable, 77 permission denied, 78 configuration) and a fragment of the one ``tumbler: ...``
line it prints on stderr, with no traceback. Nothing is left behind: no file appears in the
test's directory (the lock file that ``$TUMBLER_URL`` names included: bad input is refused
before connecting, which would create it), and on Redis the right credentials find no lock.

Rows run in this process through ``main()``, or, marked ``process``, as a real process: those
pass arguments that are not UTF-8, as a shell would, or check that the process exits cleanly.
docs/bad-input.md shows this table; tests/cli/test_cli.py has the other command-line cases.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import pytest

import tumbler
from tumbler.cli import EX_CONFIG, EX_NOPERM, EX_UNAVAILABLE, EX_USAGE, main

from .conftest import run_tumbler

RUN = ("run",)
CMD = ("--", "true")


@dataclass(frozen=True)
class CliCase:
    """A command line (``{dir}``: the test's directory) and how it must fail.

    ``url`` is passed as ``--url`` (``{tls}``: host and port of the TLS+ACL Redis, ``{right}``
    the ``tumbler`` user's password, ``{ca}`` its CA file, ``{prefix}`` a prefix of the test's).
    """

    id: str
    args: tuple[str, ...]
    status: int
    says: str
    url: str = ""
    process: bool = False


def run_with(*args: str) -> tuple[str, ...]:
    return (*RUN, *args, *CMD)


TLS = "rediss://{userinfo}{tls}/0?prefix={prefix}&ssl_ca_certs={ca}"

CLI_CASES = [
    # -- lock names: refused before connecting
    CliCase("run-empty-name", run_with(""), EX_USAGE, "must not be empty"),
    CliCase("run-blank-name", run_with(" \u3000 "), EX_USAGE, "must not be empty"),
    CliCase("run-newline-in-name", run_with("a\nb"), EX_USAGE, "U+000A"),
    CliCase("run-escape-in-name", run_with("\x1b[2Jx"), EX_USAGE, "U+001B"),
    CliCase("run-bidi-override-name", run_with("log\u202etxt.sh"), EX_USAGE, "U+202E"),
    CliCase("run-256-byte-name", run_with("x" * 256), EX_USAGE, "at most 255 UTF-8 bytes"),
    CliCase("run-non-utf8-name", run_with("caf\udce9"), EX_USAGE, "U+DCE9", process=True),
    CliCase("status-bad-name", ("status", "\x07"), EX_USAGE, "U+0007"),
    CliCase("release-bad-name", ("release", "--force", "--yes", "x" * 300), EX_USAGE, "255"),
    # -- TTLs and waits
    CliCase("ttl-zero", run_with("job", "--ttl", "0"), EX_USAGE, "more than 0 seconds"),
    CliCase("ttl-negative", run_with("job", "--ttl", "-5"), EX_USAGE, "more than 0 seconds"),
    CliCase("ttl-below-10-ms", run_with("job", "--ttl", "0.001"), EX_USAGE, "between 0.01"),
    CliCase("ttl-over-a-year", run_with("job", "--ttl", "1e9"), EX_USAGE, "more than a year"),
    CliCase("ttl-overflow", run_with("job", "--ttl", "1e309"), EX_USAGE, "not a finite number"),
    CliCase("ttl-nan", run_with("job", "--ttl", "nan"), EX_USAGE, "not a finite number"),
    CliCase("ttl-with-unit", run_with("job", "--ttl", "30s"), EX_USAGE, "not a number"),
    CliCase("wait-negative", run_with("job", "--wait", "-1"), EX_USAGE, "must not be negative"),
    CliCase("wait-huge", run_with("job", "--wait", "1e12"), EX_USAGE, "more than a year"),
    CliCase("wait-inf", run_with("job", "--wait", "inf"), EX_USAGE, "not a finite number"),
    CliCase(
        "kill-after-huge", run_with("job", "--kill-after", "1e12"), EX_USAGE, "more than a year"
    ),
    CliCase(
        "kill-after-past-the-lease",
        run_with("job", "--ttl", "3", "--kill-after", "2"),
        EX_USAGE,
        "at most a third of the lease",
    ),
    # -- URLs: configuration
    CliCase("url-no-scheme", ("status",), EX_CONFIG, "needs a scheme", url="{dir}/locks.db"),
    CliCase("url-unknown-scheme", ("status",), EX_CONFIG, "'etcd3'", url="etcd3://h:2379"),
    CliCase(
        "url-unknown-option",
        run_with("job"),
        EX_CONFIG,
        "busy_timeuot",
        url="sqlite:///{dir}/locks.db?busy_timeuot=5",
    ),
    CliCase(
        "url-encoded-newline",
        ("status",),
        EX_CONFIG,
        "control characters",
        url="sqlite:///{dir}/a%0Ab.db",
    ),
    CliCase(
        "url-non-utf8",
        ("status",),
        EX_CONFIG,
        "not UTF-8",
        url="sqlite:///{dir}/caf\udce9.db",
        process=True,
    ),
    CliCase(
        "url-missing-parent",
        ("status",),
        EX_CONFIG,
        "not an existing directory",
        url="sqlite:///{dir}/no/such/dir/locks.db",
    ),
    CliCase("url-bad-port", ("status",), EX_CONFIG, "bad port", url="redis://127.0.0.1:65536/0"),
    # -- the backend: unavailable, or refusing the credentials
    CliCase(
        "unreachable-server",
        run_with("job"),
        EX_UNAVAILABLE,
        "cannot reach Redis",
        url="redis://127.0.0.1:1/0?connect_timeout=2",
    ),
    CliCase(
        "wrong-password",
        run_with("job"),
        EX_NOPERM,
        "refused the credentials",
        url=TLS.replace("{userinfo}", "tumbler:not-{right}@"),
        process=True,
    ),
    CliCase(
        "no-credentials",
        ("status",),
        EX_NOPERM,
        "Redis refused",
        url=TLS.replace("{userinfo}", ""),
    ),
    CliCase(
        "unknown-user",
        ("release", "--force", "--yes", "job"),
        EX_NOPERM,
        "refused the credentials",
        url=TLS.replace("{userinfo}", "intruder:{right}@"),
    ),
]


def listing(directory: Path) -> list[str]:
    return sorted(str(path.relative_to(directory)) for path in directory.rglob("*"))


@pytest.fixture
def fill_in(request: pytest.FixtureRequest, tmp_path: Path):
    """Fill a case's placeholders; start the TLS+ACL Redis only for cases that use it."""
    prefix = f"tumbler:test-{uuid.uuid4().hex[:12]}"

    def fill(case: CliCase) -> tuple[list[str], str | None]:
        values = {"{dir}": str(tmp_path).lstrip("/"), "{prefix}": prefix}
        server = None
        if "{tls}" in case.url:
            server = request.getfixturevalue("redis_tls_server")
            values["{tls}"] = f"{server.host}:{server.port}"
            values["{right}"] = quote(server.users["tumbler"].password, safe="")
            values["{ca}"] = str(server.ca_path)
        url = case.url
        for placeholder, value in values.items():
            url = url.replace(placeholder, value)
        if case.url.startswith("{dir}"):
            url = "/" + url
        args = list(case.args)
        if case.url:
            # before a "--": what follows it is the command
            at = args.index("--") if "--" in args else len(args)
            args[at:at] = ["--url", url]
        right_url = None
        if server is not None:
            right_url = TLS.replace("{userinfo}", "tumbler:{right}@")
            for placeholder, value in values.items():
                right_url = right_url.replace(placeholder, value)
        return args, right_url

    return fill


@pytest.mark.parametrize("case", CLI_CASES, ids=lambda case: case.id)
def test_bad_input_exits_with_its_status_and_leaves_nothing(
    case: CliCase,
    fill_in,
    tmp_path: Path,
    env: dict[str, str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    args, right_url = fill_in(case)
    before = listing(tmp_path)
    if case.process:
        result = run_tumbler(*args, env=env)
        status, err = result.returncode, result.stderr
    else:
        status = main(args)
        err = capsys.readouterr().err
    assert status == case.status, err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("tumbler: "), err
    assert case.says in lines[0], err
    assert "Traceback" not in err
    # nothing made: not the lock file $TUMBLER_URL names, nor one that --url names
    assert listing(tmp_path) == before
    if right_url is not None:
        with tumbler.connect(right_url) as locks:
            assert locks.status_all() == []
