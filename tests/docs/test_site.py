"""The documentation site: it builds with no warning (scripts/docs's command: -W, nitpicky),
and its main pages render in headless Chromium with no console error and no broken internal
link.

The checker is tested first on pages made here, each with one fault, so that a clean report
on the site means something.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tumbler.testing.conformance.plugin import server_unavailable

from .browser import Browser, broken_links

pytestmark = pytest.mark.docs

ROOT = Path(__file__).resolve().parents[2]
# the pages the site must not get wrong: its entrance, the API reference, the matrix, and
# the bench page, whose plots are drawn at the build (a missing one is a failed load)
MAIN_PAGES = ["index.html", "api/index.html", "api/tumbler.html", "choosing.html", "bench.html"]


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    binary = shutil.which("chromium")
    if binary is None:
        server_unavailable("no chromium on PATH (scripts/servers installs Debian's)")
    with Browser(binary, tmp_path_factory.mktemp("chromium-profile")) as opened:
        yield opened


def write(site: Path, name: str, body: str, head: str = "") -> Path:
    page = site / name
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text(f"<!DOCTYPE html><html><head>{head}</head><body>{body}</body></html>")
    return page


def test_a_clean_page_has_no_error_and_its_links_resolve(browser: Browser, tmp_path: Path) -> None:
    write(tmp_path, "other.html", '<h1 id="part">part</h1>')
    page = write(
        tmp_path,
        "index.html",
        '<a href="other.html">a</a> <a href="other.html#part">b</a> <a href="#top">c</a>'
        ' <a href="https://example.invalid/">outside</a> <p id="top">top</p>',
        head="<script>console.log('a log line is no error')</script>",
    )
    report = browser.open(page)
    assert report.errors == []
    assert broken_links(tmp_path, report.links) == []
    assert len(report.links) == 4


def test_a_missing_page_and_a_missing_anchor_are_broken_links(
    browser: Browser, tmp_path: Path
) -> None:
    write(tmp_path, "other.html", '<h1 id="part">part</h1>')
    page = write(
        tmp_path,
        "index.html",
        '<a href="gone.html">a</a> <a href="other.html#nowhere">b</a> <a href="#absent">c</a>'
        ' <a href="../outside.html">d</a>',
    )
    report = browser.open(page)
    broken = broken_links(tmp_path, report.links)
    assert [link.rsplit("/", 1)[-1] for link in broken] == [
        "gone.html",
        "other.html#nowhere",
        "index.html#absent",
        "outside.html",
    ]


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("<script>console.error('said so')</script>", "said so"),
        ("<script>throw new Error('thrown')</script>", "thrown"),
        ("<script>Promise.reject(new Error('rejected'))</script>", "rejected"),
        ('<script src="missing.js"></script>', "missing.js"),
        ('<img src="missing.png">', "missing.png"),
    ],
    ids=["console.error", "exception", "unhandled-rejection", "missing-script", "missing-image"],
)
def test_console_errors_exceptions_and_failed_loads_are_reported(
    browser: Browser, tmp_path: Path, body: str, expected: str
) -> None:
    report = browser.open(write(tmp_path, "index.html", body))
    assert len(report.errors) == 1, report.errors
    assert expected in report.errors[0]


def build_site(out: Path) -> subprocess.CompletedProcess[str]:
    try:
        import furo  # noqa: F401
        import matplotlib  # noqa: F401
        import myst_parser  # noqa: F401
        import sphinx  # noqa: F401
        import sphinx_click  # noqa: F401
    except ImportError as missing:
        server_unavailable(f"the docs extra is not installed ({missing.name})")
    # scripts/docs's command, with this interpreter
    return subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-n", "-b", "html", "docs", out],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )


# The whole site is built here, in CI beside the full run at the lowest priority: minutes of
# wall time on a busy machine where it takes 15 s alone (the build's own bound is 600 s).
@pytest.mark.timeout(660)
def test_the_site_builds_with_no_warning_and_its_main_pages_render_clean(
    browser: Browser, tmp_path: Path
) -> None:
    out = tmp_path / "html"
    built = build_site(out)
    assert built.returncode == 0, built.stderr
    assert "WARNING" not in built.stderr, built.stderr
    for name in MAIN_PAGES:
        report = browser.open(out / name)
        assert report.errors == [], name
        internal = [link for link in report.links if link.startswith("file:")]
        assert internal, f"{name} has no internal link: did it render?"
        assert broken_links(out, report.links) == [], name
