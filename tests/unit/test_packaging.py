"""What a release would upload: the sdist and the wheel built from this tree, their files and
their metadata; and the install commands a user reads, which must name that distribution.

"tumbler" on PyPI is another project: ``pip install 'tumbler[redis]'`` installs it, with only a
warning that it has no such extra. tumbler is distributed as ``tumbler-locks``.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Iterator
from email.message import Message
from email.parser import Parser
from pathlib import Path

import pytest

import tumbler
from tumbler.backends import BackendDescriptor, builtin_descriptors
from tumbler.errors import MissingDependency

pytestmark = pytest.mark.tools  # mypy, the build, the bench: the same on every Python

ROOT = Path(__file__).resolve().parents[2]
NAME = "tumbler-locks"

# The peers bench/ measures: a user's or contributor's install has no use for them.
BENCH_PEERS = {
    "python-redis-lock",
    "tooz",
    "psycopg2-binary",
    "etcd-sdk-python",
    "protobuf",
    "etcd3gw",
    "pottery",
}

# An install command naming the distribution "tumbler" rather than "tumbler-locks": with
# extras ("tumbler[redis]", quoted or in a docstring's backquotes) or bare.
OTHER_PROJECT = re.compile(r"(?<![\w-])tumbler\[|pip install (?:-\S+ )*['\"]?tumbler(?![\w-])")


def user_facing_files() -> Iterator[Path]:
    yield ROOT / "README.md"
    yield ROOT / "CHANGELOG.md"
    yield ROOT / "pyproject.toml"
    yield from (ROOT / "docs").rglob("*.md")
    yield ROOT / "scripts" / "test"
    for path in sorted((ROOT / "src").rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            yield path


def test_no_install_command_names_the_other_projects_distribution() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in user_facing_files()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if OTHER_PROJECT.search(line)
    ]
    assert found == []


def test_the_pattern_finds_the_install_commands_of_the_other_project() -> None:
    for line in [
        "pip install 'tumbler[redis]'",
        'pip install "tumbler[all]"',
        "(extra ``tumbler[etcd]``)",
        "pip install tumbler",
        "pip install -U tumbler",
    ]:
        assert OTHER_PROJECT.search(line), line
    for line in [
        "pip install 'tumbler-locks[redis]'",
        "pip install tumbler-locks",
        "pip install -e .",
        "the tumbler command",
    ]:
        assert not OTHER_PROJECT.search(line), line


def test_missing_dependency_says_to_install_tumbler_locks() -> None:
    error = MissingDependency("redis", "redis", "redis")
    assert "pip install 'tumbler-locks[redis]'" in str(error)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The sdist, and the wheel built from it (as ``python -m build`` makes a release)."""
    out = tmp_path_factory.mktemp("dist")
    # --no-isolation: the build backend of the dev extra, rather than one fetched for the test
    result = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=110,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    (sdist,) = out.glob("*.tar.gz")
    (wheel,) = out.glob("*.whl")
    return sdist, wheel


@pytest.fixture(scope="module")
def wheel_names(built: tuple[Path, Path]) -> list[str]:
    with zipfile.ZipFile(built[1]) as wheel:
        return wheel.namelist()


@pytest.fixture(scope="module")
def metadata(built: tuple[Path, Path], wheel_names: list[str]) -> Message:
    (name,) = [name for name in wheel_names if name.endswith(".dist-info/METADATA")]
    with zipfile.ZipFile(built[1]) as wheel:
        return Parser().parsestr(wheel.read(name).decode("utf-8"))


def extras(metadata: Message) -> dict[str, set[str]]:
    """Each extra and the requirements it installs (the build flattens an extra that names
    another of the same distribution into that one's requirements)."""
    installs: dict[str, set[str]] = {name: set() for name in metadata.get_all("Provides-Extra")}
    for requirement in metadata.get_all("Requires-Dist"):
        spec, _, marker = requirement.partition(";")
        found = re.fullmatch(r"\s*extra == ['\"]([\w.-]+)['\"]\s*", marker)
        if found:
            installs[found.group(1)].add(spec.strip())
    return installs


def project_name(requirement: str) -> str:
    found = re.match(r"[A-Za-z0-9._-]+", requirement)
    assert found, requirement
    return re.sub(r"[-_.]+", "-", found.group(0)).lower()


def test_the_wheel_is_tumbler_locks_with_its_license_urls_and_classifiers(
    metadata: Message,
) -> None:
    assert metadata["Name"] == NAME
    assert metadata["Version"] == tumbler.__version__
    assert metadata["License-Expression"] == "MIT"
    assert metadata.get_all("License-File") == ["LICENSE"]
    assert metadata["Requires-Python"] == ">=3.10"
    urls = dict(url.split(", ", 1) for url in metadata.get_all("Project-URL"))
    assert set(urls) == {"Homepage", "Documentation", "Repository", "Issues", "Changelog"}
    assert all(url.startswith("https://") for url in urls.values())
    assert metadata["Keywords"]
    classifiers = set(metadata.get_all("Classifier"))
    assert {
        "Development Status :: 4 - Beta",
        "Framework :: AsyncIO",
        "Operating System :: POSIX :: Linux",
        "Programming Language :: Python :: 3 :: Only",
        "Typing :: Typed",
    } <= classifiers
    # PEP 639: the License-Expression replaces the license classifiers (PyPI refuses both)
    assert not [classifier for classifier in classifiers if classifier.startswith("License ::")]


def test_the_python_classifiers_are_the_versions_ci_tests(metadata: Message) -> None:
    classifiers = metadata.get_all("Classifier")
    versions = {
        found.group(1)
        for classifier in classifiers
        if (found := re.fullmatch(r"Programming Language :: Python :: (3\.\d+)", classifier))
    }
    # the quick tiers' versions, and the full run's Python (python3 on the CI machine)
    quick = re.search(r"^versions=\(([^)]*)\)", (ROOT / ".ci" / "run").read_text(), re.M)
    assert quick, "no versions=(...) in .ci/run"
    assert set(quick.group(1).split()) <= versions
    lowest = min(versions, key=lambda version: int(version.split(".")[1]))
    assert metadata["Requires-Python"] == f">={lowest}"


def test_every_backend_extra_and_bench_and_dev_are_provided(metadata: Message) -> None:
    installs = extras(metadata)
    for extra in ["redis", "zookeeper", "postgresql", "mysql", "etcd", "all", "testing"]:
        assert installs.get(extra), extra
    backends = {d.extra for d in builtin_descriptors() if d.extra is not None}
    assert set().union(*(installs[extra] for extra in backends)) <= installs["all"]
    assert {project_name(r) for r in installs["bench"]} == BENCH_PEERS
    dev = {project_name(r) for r in installs["dev"]}
    assert not dev & BENCH_PEERS
    assert installs["all"] | installs["testing"] <= installs["dev"]
    # the dev extra builds the wheel in this module's test
    assert {"build", "hatchling"} <= dev


def schemes_users_type(descriptor: BackendDescriptor) -> list[str]:
    """The schemes a user may put in ``pip install 'tumbler-locks[SCHEME]'``: not a TLS twin
    (``rediss`` beside ``redis``), nor a transport variant (``redis+unix``: "+" is not allowed
    in an extra's name), both installed by their base scheme's extra."""
    return [
        scheme
        for scheme in descriptor.schemes
        if "+" not in scheme and not (scheme.endswith("s") and scheme[:-1] in descriptor.schemes)
    ]


def test_the_schemes_users_type_are_extras_too(metadata: Message) -> None:
    installs = extras(metadata)
    typed = []
    for descriptor in builtin_descriptors():
        if descriptor.extra is None:
            continue  # sqlite://, memory://: the standard library is enough
        for scheme in schemes_users_type(descriptor):
            typed.append(scheme)
            assert installs.get(scheme) == installs[descriptor.extra], scheme
    assert {"postgres", "mariadb", "redlock"} <= set(typed)


def test_the_backends_without_an_extra_need_none(metadata: Message) -> None:
    without = {d.name for d in builtin_descriptors() if d.extra is None}
    assert without == {"sqlite", "memory"}
    assert without.isdisjoint(extras(metadata))


def test_the_wheel_holds_of_the_examples_only_the_demos_stock_services(
    wheel_names: list[str],
) -> None:
    examples = {name for name in wheel_names if name.startswith("tumbler/_examples/")}
    assert examples == {
        f"tumbler/_examples/{name}"
        for name in ("stock_service.py", "stock_service_async.py", "stock_store.py")
    }


def test_the_wheel_holds_the_package_and_the_license_only(wheel_names: list[str]) -> None:
    dist_info = f"tumbler_locks-{tumbler.__version__}.dist-info"
    assert "tumbler/py.typed" in wheel_names
    assert "tumbler/__init__.py" in wheel_names
    assert f"{dist_info}/licenses/LICENSE" in wheel_names
    assert {name.split("/")[0] for name in wheel_names} == {"tumbler", dist_info}
    assert not [name for name in wheel_names if "__pycache__" in name or name.endswith(".pyc")]


def test_the_sdist_holds_what_a_rebuild_needs(built: tuple[Path, Path]) -> None:
    with tarfile.open(built[0]) as sdist:
        names = sdist.getnames()
        (info,) = [name for name in names if name.count("/") == 1 and name.endswith("/PKG-INFO")]
        pkg_info = sdist.extractfile(info)
        assert pkg_info is not None
        assert Parser().parsestr(pkg_info.read().decode("utf-8"))["Name"] == NAME
    top = f"tumbler_locks-{tumbler.__version__}"
    files = {name.removeprefix(f"{top}/") for name in names}
    for needed in [
        "LICENSE",
        "README.md",
        "CHANGELOG.md",
        "pyproject.toml",
        "src/tumbler/__init__.py",
        "src/tumbler/py.typed",
        "examples/stock_service.py",  # the wheel's tumbler/_examples
    ]:
        assert needed in files, needed
    assert not [name for name in files if "__pycache__" in name or name.startswith(".venv")]
    assert not [name for name in files if name.startswith("docs/_screenshots")]
