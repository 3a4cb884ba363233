"""Sphinx configuration of tumbler's documentation site: built by ``scripts/docs``.

The pages are the Markdown of this folder (MyST), the README's sections included where they
belong rather than copied, and reference pages made from the code: the API from its
docstrings, each backend from its module's, the command line from its click commands.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import sys
import typing
from pathlib import Path

from docutils.nodes import Element
from sphinx.addnodes import pending_xref
from sphinx.application import Sphinx
from sphinx.environment import BuildEnvironment

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
# the tree's own code, whichever tumbler is installed (a worktree's, a clone's)
sys.path.insert(0, str(ROOT / "src"))

import tumbler  # noqa: E402  (after the path above)

project = "tumbler"
author = "the tumbler authors"
copyright = "the tumbler authors"
release = tumbler.__version__
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.intersphinx",
    "sphinx_click",
]

source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build", "_plots", "_screenshots"]
templates_path: list[str] = []

# Every warning is an error (scripts/docs passes -W), and every reference must resolve.
nitpicky = True

# MyST: heading anchors, so that the README's links to its own sections (#the-stock-service...)
# and the pages' to each other's sections resolve as they do on GitHub.
myst_heading_anchors = 4
myst_enable_extensions = ["colon_fence", "deflist"]

# Python's own inventory, from Debian's python3-doc (scripts/servers installs it): no network
# at build time, and every reference to the standard library becomes a link to its page.
_PYTHON_INVENTORY = os.environ.get(
    "TUMBLER_PYTHON_INVENTORY", "/usr/share/doc/python3/html/objects.inv"
)
intersphinx_mapping = {"python": ("https://docs.python.org/3", _PYTHON_INVENTORY)}
intersphinx_timeout = 5

autodoc_typehints = "signature"
autodoc_typehints_format = "short"
autodoc_member_order = "bysource"
autodoc_preserve_defaults = True
autodoc_default_options = {
    "members": True,
    "show-inheritance": True,
}

# option names and shell lines are quoted as they are typed: no "--" turned into a dash
smartquotes = False

html_theme = "furo"
html_title = f"tumbler {release}"
html_static_path = ["_static"]
html_css_files = ["tumbler.css"]
html_show_sourcelink = False

# The drivers' own types in the fences' and the observer's signatures: their projects'
# inventories are on the network, which the build does not use, so they stay plain names.
nitpick_ignore_regex = [
    ("py:class", r"(psycopg|pymysql|redis|opentelemetry|sqlalchemy)(\..+)?"),
    ("py:class", r"(MeterProvider|TracerProvider)"),
    # SQLAlchemy's, as the fences' signatures name them
    ("py:class", r"(SQLAlchemyConnection|SQLAlchemyAsyncConnection|Session|AsyncSession)"),
    # the type variables of generic signatures (synchronized's P and R, a hold's H)
    ("py:class", r"(tumbler\.[\w.]+\.)?[PRHT]"),
]

# `timeout=` left out means the lock's own timeout: the default's repr says so, and the
# sentinel's class is no type for a caller to name.
_UNSET_TYPE = re.compile(r"\s*\|\s*~?tumbler\._(a)?sync\.primitives\._Unset")


def _signature(
    app: Sphinx,
    what: str,
    name: str,
    obj: object,
    options: object,
    signature: str | None,
    return_annotation: str | None,
) -> tuple[str | None, str | None] | None:
    # Clients, locks and holds are made by connect() and its methods, never by the caller:
    # their constructors' parameters are the lock layer's own.
    if what == "class" and getattr(obj, "__module__", "").startswith(
        ("tumbler._sync.", "tumbler._async.")
    ):
        return "", return_annotation
    if signature is not None:
        return _UNSET_TYPE.sub("", signature), return_annotation
    return None


def _private(base: object) -> bool:
    base = typing.get_origin(base) or base
    return isinstance(base, type) and base.__name__.startswith("_")


def _bases(app: Sphinx, name: str, obj: type, options: object, bases: list[object]) -> None:
    # a private base (the primitives' shared code) is shown as what it derives from
    if not any(_private(b) for b in bases):
        return
    public: list[object] = []
    for base in bases:
        found = [base]
        while any(_private(b) for b in found):
            found = [
                p
                for b in found
                for p in ((typing.get_origin(b) or b).__bases__ if _private(b) else (b,))
            ]
        public.extend(b for b in found if b is not object and b not in public)
    bases[:] = public


# The lock layer names its types by their home modules (core.Seconds, the clock's module):
# on the site, by the public names they are documented under.
_PUBLIC_NAMES = {
    "core.Seconds": "tumbler.Seconds",
    "tumbler._core.Seconds": "tumbler.Seconds",
}


def _public_name(
    app: Sphinx, env: BuildEnvironment, node: pending_xref, contnode: Element
) -> Element | None:
    target = _PUBLIC_NAMES.get(node.get("reftarget", ""))
    if target is None or node.get("refdomain") != "py":
        return None
    return env.get_domain("py").resolve_xref(
        env, node["refdoc"], app.builder, node["reftype"], target, node, contnode
    )


# A Markdown link in the README (or bench/README.md) is relative to the file it is in, as on
# GitHub; included into a page elsewhere, it is made relative to that page, so that a link to
# docs/security.md reaches that page and one to a source file the file (MyST copies it).
_LINK = re.compile(r"(\]\()([^)#\s:]+)([)#])")
# files that are pages of the site under another name (included whole by that page)
_PAGES = {
    ROOT / "bench" / "README.md": DOCS / "bench.md",
    ROOT / "CHANGELOG.md": DOCS / "changelog.md",
}


def _included(app: Sphinx, relative_path: Path, parent_docname: str, content: list[str]) -> None:
    if relative_path.suffix != ".md":
        return
    included_dir = (DOCS / relative_path).parent
    page_dir = (DOCS / app.env.docname).parent

    def rebased(match: re.Match[str]) -> str:
        path = Path(os.path.normpath(included_dir / match[2]))
        target = os.path.relpath(_PAGES.get(path, path), page_dir)
        return f"{match[1]}{target}{match[3]}"

    content[0] = _LINK.sub(rebased, content[0])


# The bench page's plots, drawn from the runs kept in bench/results/ at every build, so that
# they are never older than the figures they show.
PLOTS = DOCS / "_plots"
BENCH_RESULTS = sorted((ROOT / "bench" / "results").glob("*.json"))


def _draw_plots(app: Sphinx) -> None:
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import plots  # bench/plots.py
    finally:
        sys.path.remove(str(ROOT / "bench"))
    with contextlib.redirect_stdout(io.StringIO()):
        status = plots.main([*map(str, BENCH_RESULTS), "--out", str(PLOTS)])
    if status != 0:
        raise RuntimeError(f"bench/plots.py exited {status}")


def setup(app: Sphinx) -> None:
    app.connect("builder-inited", _draw_plots)
    app.connect("include-read", _included)
    app.connect("missing-reference", _public_name)
    app.connect("autodoc-process-signature", _signature)
    app.connect("autodoc-process-bases", _bases)
