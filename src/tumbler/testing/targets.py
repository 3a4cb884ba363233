"""A test target: one way to run a backend's store for the conformance suite (and the bench).

A backend's harness (:class:`tumbler.testing.harness.BackendHarness`) lists its targets; each
starts what its store needs in a directory of its own and hands out URLs that no other test
uses.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

__all__ = ["RunningTarget", "ServedTarget", "TestTarget"]


class RunningTarget(Protocol):
    """A test target's servers, started once and shared by the tests of a session. One whose
    store is served by processes of its own is also a :class:`ServedTarget`."""

    def fresh_url(self) -> str:
        """A URL of this target that no other test uses: a new file, key prefix or path, so
        that tests sharing the servers cannot see each other's locks."""

    def close(self) -> None:
        """Stop the servers and remove their files."""


@runtime_checkable
class ServedTarget(Protocol):
    """A running test target whose store is served by processes of its own (not a file, not
    the test process's memory): what the cases that stall the store stop."""

    def server_pids(self) -> list[int]:
        """Every process that serves the store now (each server of a cluster, each process
        of a server that forks): stopping them all (SIGSTOP) stalls the store."""
        ...


@dataclass(frozen=True)
class TestTarget:
    """One way to run a backend for the conformance suite: a server set-up and its URLs.

    ``start(directory)`` starts what the target needs (nothing, for an embedded store) in
    ``directory``, a fresh temporary directory, and raises ``ServerError`` (from
    ``tumbler.testing.servers``) or ``OSError`` when it cannot. A backend usually has one
    target; variants of the same store (TLS with an ACL user, a cluster, a pooler) are targets
    of their own. A variant whose only difference is the connection (TLS, another user) is a
    ``connection_variant``: it runs the cases that exercise the connection, not the locking
    that its plain target runs already.
    """

    __test__ = False  # a test target, not a pytest test class

    #: the name tests and reports show (``redis-cluster``)
    name: str
    start: Callable[[Path], RunningTarget] = field(repr=False)
    #: whether it differs from another target of the backend only by the connection: then only
    #: the conformance cases marked ``tumbler_connection`` run on it
    connection_variant: bool = False
