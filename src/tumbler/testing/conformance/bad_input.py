"""Bad input to the lock API: the one table of cases, and the check that the docs show it.

Each case is an input, the call it is given to, and the typed error the call must raise with a
fragment of its message; or, for names that are valid, no error: the name must work as data.
Inputs are listed once per argument (NAMES, TTLS, TIMEOUTS, LOCK_DELAYS, PERMITS, ...) and given
to every call that takes that argument (NAME_CALLS, ...), so a call added to the API needs one
line here.

The cases run in ``_async/test_locks.py`` (asyncio) and its generated twin
``_sync/test_locks.py`` (threads). There a refused call must leave nothing behind: a second
client's ``status_all()`` is empty, a hold taken before the call is unchanged, and the first
client still gets a lock. A refused call must also reach no backend (:func:`no_backend_call`):
the refusal is the lock layer's, the same code for every backend, which is why the refused
cases run on one target of a run (``tumbler_lock_layer``) and the valid names, which are data
the store keeps, on every backend.

docs/bad-input.md is this table for readers; the project's
tests/contract/test_bad_input_document.py keeps the two the same.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest

from tumbler import (
    InvalidArgument,
    InvalidLockDelay,
    InvalidLockName,
    InvalidPermits,
    InvalidSegments,
    InvalidTimeout,
    InvalidTTL,
)

#: longest message a refusal may have: it is one line in a log or on a terminal
LONGEST_MESSAGE = 200


@dataclass
class Subject:
    """What a call of the table works on: the client under test, a hold it took before the
    call (for calls on a hold), and the fixture that connects (``connect`` or ``aconnect``)."""

    locks: Any
    hold: Any
    connect: Callable[..., Any]


@dataclass(frozen=True)
class Call:
    """An API call taking the input under test. ``run`` returns what the call returns: a
    coroutine in asyncio, which the runner awaits."""

    text: str
    run: Callable[[Subject, object], object]
    needs_hold: bool = False


@dataclass(frozen=True)
class Input:
    """One input: what it is, and the error it gets (None: it is valid and must work).

    For valid names, ``same`` are other spellings of the same lock (NFC/NFD) and ``other``
    names that must be locks of their own (prefixes, case variants, glob look-alikes).
    """

    id: str
    value: object
    error: type[InvalidArgument] | None
    says: str = ""
    same: tuple[str, ...] = ()
    other: tuple[str, ...] = ()


@dataclass(frozen=True)
class Case:
    call: Call
    input: Input

    @property
    def id(self) -> str:
        return f"{self.call.text}-{self.input.id}"

    @property
    def value(self) -> object:
        return self.input.value

    @property
    def error(self) -> type[InvalidArgument]:
        assert self.input.error is not None, "a valid input raises nothing"
        return self.input.error

    @contextlib.contextmanager
    def named(self) -> Iterator[None]:
        """Name the case in a failure: several cases run in one test."""
        try:
            yield
        except (Exception, pytest.fail.Exception) as failure:
            raise AssertionError(f"case {self.id}: {failure}") from failure

    def check_refusal(self, error: BaseException) -> None:
        """The refusal is of the exact class, says why, and fits on one short line."""
        assert type(error) is self.input.error
        text = str(error)
        assert self.input.says in text, text
        assert text.isprintable(), repr(text)
        assert len(text) <= LONGEST_MESSAGE, text


#: what a client asks its backend in the background, whatever the test does meanwhile
_BACKGROUND_CALLS = frozenset({"renew_all"})


class _RecordingBackend:
    """Stands in a client for its backend, passing every call on and writing its name down."""

    def __init__(self, backend: Any, calls: list[str]) -> None:
        self._backend = backend
        self._calls = calls

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._backend, name)
        if not callable(value) or name in _BACKGROUND_CALLS:
            return value

        def recorded(*args: Any, **kwargs: Any) -> Any:
            self._calls.append(name)
            return value(*args, **kwargs)

        return recorded


@contextlib.contextmanager
def no_backend_call(*clients: Any) -> Iterator[None]:
    """Fail unless the block asks none of ``clients``' backends anything (their renewals in the
    background aside)."""
    calls: list[str] = []
    backends = [client._backend for client in clients]
    for client, backend in zip(clients, backends, strict=True):
        client._backend = _RecordingBackend(backend, calls)
    try:
        yield
    finally:
        for client, backend in zip(clients, backends, strict=True):
            client._backend = backend
    assert not calls, f"a refused call reached the backend: {', '.join(calls)}"


# -- calls ----------------------------------------------------------------------------------

NAME_CALLS = [
    Call("lock(name)", lambda s, v: s.locks.lock(v)),
    Call("rlock(name)", lambda s, v: s.locks.rlock(v)),
    Call("semaphore(name)", lambda s, v: s.locks.semaphore(v, 2)),
    Call("rwlock(name)", lambda s, v: s.locks.rwlock(v)),
    Call("segmented(name)", lambda s, v: s.locks.segmented(v, 4)),
    Call("synchronized(name)", lambda s, v: s.locks.synchronized(v)),
    Call("status(name)", lambda s, v: s.locks.status(v)),
    Call("force_release(name)", lambda s, v: s.locks.force_release(v)),
]
#: how a valid name is tried: acquired, inspected, released (see the runner)
AS_DATA = Call("lock(name).acquire()", lambda s, v: None)

TTL_CALLS = [
    Call("lock(ttl)", lambda s, v: s.locks.lock("x", ttl=v)),
    Call("rlock(ttl)", lambda s, v: s.locks.rlock("x", ttl=v)),
    Call("semaphore(ttl)", lambda s, v: s.locks.semaphore("x", 2, ttl=v)),
    Call("rwlock(ttl)", lambda s, v: s.locks.rwlock("x", ttl=v)),
    Call("segmented(ttl)", lambda s, v: s.locks.segmented("x", 4, ttl=v)),
    Call("synchronized(ttl)", lambda s, v: s.locks.synchronized("x", ttl=v)),
    Call("hold.extend(ttl)", lambda s, v: s.hold.extend(v), needs_hold=True),
    Call("connect(default_ttl)", lambda s, v: s.connect(default_ttl=v)),
]

TIMEOUT_CALLS = [
    Call("lock(timeout)", lambda s, v: s.locks.lock("x", timeout=v)),
    Call("rlock(timeout)", lambda s, v: s.locks.rlock("x", timeout=v)),
    Call("semaphore(timeout)", lambda s, v: s.locks.semaphore("x", 2, timeout=v)),
    Call("rwlock(timeout)", lambda s, v: s.locks.rwlock("x", timeout=v)),
    Call("segmented(timeout)", lambda s, v: s.locks.segmented("x", 4, timeout=v)),
    Call("synchronized(timeout)", lambda s, v: s.locks.synchronized("x", timeout=v)),
    Call("acquire(timeout)", lambda s, v: s.locks.lock("x").acquire(timeout=v)),
    Call(
        "segmented().acquire(timeout)",
        lambda s, v: s.locks.segmented("x", 4).acquire(timeout=v),
    ),
    Call("hold.wait_lost(timeout)", lambda s, v: s.hold.wait_lost(timeout=v), needs_hold=True),
]
#: a timeout that is fine by itself but contradicts blocking=False
NON_BLOCKING = Call(
    "acquire(blocking=False, timeout)",
    lambda s, v: s.locks.lock("x").acquire(blocking=False, timeout=v),
)

LOCK_DELAY_CALLS = [
    Call("lock(lock_delay)", lambda s, v: s.locks.lock("x", lock_delay=v)),
    Call("semaphore(lock_delay)", lambda s, v: s.locks.semaphore("x", 2, lock_delay=v)),
    Call("rwlock(lock_delay)", lambda s, v: s.locks.rwlock("x", lock_delay=v)),
    Call("multi(lock_delay)", lambda s, v: s.locks.multi(["x", "y"], lock_delay=v)),
    Call("election(lock_delay)", lambda s, v: s.locks.election("x", lock_delay=v)),
]

PERMITS_CALLS = [Call("semaphore(permits)", lambda s, v: s.locks.semaphore("x", v))]

SEGMENTS_CALLS = [Call("segmented(segments)", lambda s, v: s.locks.segmented("x", v))]
#: the segments an acquire may take, of a lock of 4 segments
CHOICE_CALLS = [
    Call(
        "segmented(4).acquire(segments)",
        lambda s, v: s.locks.segmented("x", 4).acquire(segments=v),
    )
]


# -- inputs -----------------------------------------------------------------------------------

EMPTY = "must not be empty or only white space"


def too_long(size: int) -> str:
    return f"must be at most 255 UTF-8 bytes, this one has {size}"


def char(code: int) -> str:
    return f"must not contain the character U+{code:04X}"


NAMES = [
    Input("empty", "", InvalidLockName, EMPTY),
    Input("spaces", "   ", InvalidLockName, EMPTY),
    Input("ideographic-space", "\u3000\u00a0", InvalidLockName, EMPTY),
    Input("256-ascii-bytes", "x" * 256, InvalidLockName, too_long(256)),
    Input("256-bytes-of-e-acute", "\u00e9" * 128, InvalidLockName, too_long(256)),
    Input("long-cjk", "\u9501" * 86, InvalidLockName, too_long(258)),
    Input("long-emoji", "\U0001f512" * 64, InvalidLockName, too_long(256)),
    Input("one-mebibyte", "x" * 2**20, InvalidLockName, too_long(2**20)),
    Input("bytes", b"orders", InvalidLockName, "must be str, not bytes"),
    Input("None", None, InvalidLockName, "must be str, not NoneType"),
    Input("int", 42, InvalidLockName, "must be str, not int"),
    Input("nul", "a\x00b", InvalidLockName, char(0)),
    Input("newline", "a\nb", InvalidLockName, char(0x0A)),
    Input("tab", "a\tb", InvalidLockName, char(0x09)),
    Input("ansi-escape", "\x1b[31mred", InvalidLockName, char(0x1B)),
    Input("delete", "a\x7f", InvalidLockName, char(0x7F)),
    Input("c1-control", "a\x85b", InvalidLockName, char(0x85)),
    Input("lone-high-surrogate", "\ud800", InvalidLockName, char(0xD800)),
    Input("lone-low-surrogate", "x\udfff", InvalidLockName, char(0xDFFF)),
    # what Python makes of the bytes b"caf\xe9" (Latin-1) on a UTF-8 command line
    Input("undecodable-bytes", "caf\udce9", InvalidLockName, char(0xDCE9)),
    Input("noncharacter", "a\uffff", InvalidLockName, char(0xFFFF)),
    Input("bidi-override", "invoice\u202efdp.exe", InvalidLockName, char(0x202E)),
    Input("bidi-isolate", "a\u2066b\u2069", InvalidLockName, char(0x2066)),
    Input("line-separator", "a\u2028b", InvalidLockName, char(0x2028)),
    Input("nul-after-a-mebibyte", "x" * 2**20 + "\x00", InvalidLockName, char(0)),
    # -- valid: data, whatever a path, pattern or query language would make of it
    Input("dot-dot-path", "../etc/passwd", None, other=("etc/passwd", "..", "../etc")),
    Input("dot", ".", None, other=("..",)),
    Input("dot-dot", "..", None, other=(".",)),
    Input("slash", "/", None, other=("//",)),
    Input("nested-path", "a/b", None, other=("a", "a/b/c", "b")),
    Input("dot-dot-inside", "a/../b", None, other=("b", "a")),
    Input("trailing-slash", "dir/", None, other=("dir",)),
    Input("zookeeper", "zookeeper", None, other=("zookeeper/quota",)),
    Input("glob-star", "*", None, other=("a", "**")),
    Input("glob-chars", "[ab]?", None, other=("a?", "b")),
    Input("percent", "100%", None, other=("100", "100%25")),
    Input("format-string", "%s%n%x{0}", None, other=("%s",)),
    Input("sql-quote", "x'; DROP TABLE tumbler_entries; --", None, other=("x",)),
    Input("lua-quote", "a\"]] .. redis.call('FLUSHALL') .. [[", None, other=("a",)),
    Input("braces", "{hashtag}", None, other=("hashtag",)),
    Input("emoji", "lock-\U0001f512-\u2764\ufe0f-\U0001f469\u200d\U0001f4bb", None),
    Input("mixed-scripts", "Z\u00fcrich-\u6771\u4eac-\u041c\u043e\u0441\u043a\u0432\u0430", None),
    Input("right-to-left", "\u05e9\u05dc\u05d5\u05dd-\u0645\u0631\u062d\u0628\u0627", None),
    Input("case", "Job", None, other=("job", "JOB")),
    Input("padded", " padded ", None, other=("padded",)),
    Input("nfd", "cafe\u0301", None, same=("caf\u00e9",)),
    Input("nfc", "caf\u00e9", None, same=("cafe\u0301",), other=("cafe",)),
    Input("hangul-jamo", "\u1112\u1161\u11ab", None, same=("\ud55c",)),
    Input("255-bytes", "x" * 255, None, other=("x" * 254,)),
    # 300 UTF-8 bytes as given, 200 once normalised: the limit counts the canonical form
    Input("long-nfd-short-nfc", "e\u0301" * 100, None, same=("\u00e9" * 100,)),
]

TTLS = [
    Input("zero", 0, InvalidTTL, "between 0.01 and 31536000 seconds, not 0"),
    Input("negative", -1, InvalidTTL, "not -1"),
    Input("below-10-ms", 0.001, InvalidTTL, "not 0.001"),
    Input("nan", math.nan, InvalidTTL, "not NaN"),
    Input("inf", math.inf, InvalidTTL, "not inf"),
    Input("minus-inf", -math.inf, InvalidTTL, "not -inf"),
    Input("over-a-year", 365 * 24 * 3600 + 1, InvalidTTL, "not 31536001"),
    Input("huge", 10**12, InvalidTTL, "not 1000000000000"),
    Input("5000-digits", 10**5000, InvalidTTL, "ttl is far too large: <an int of 16610 bits>"),
    Input("bool", True, InvalidTTL, "must be a number of seconds, not bool"),
    Input("str", "30", InvalidTTL, "must be a number of seconds, not str"),
    Input("list", [30], InvalidTTL, "not list"),
    Input("timedelta-zero", timedelta(0), InvalidTTL, "not datetime.timedelta(0)"),
    Input("timedelta-negative", timedelta(seconds=-5), InvalidTTL, "timedelta(days=-1"),
]

TIMEOUTS = [
    Input("negative", -2, InvalidTimeout, ">= 0, or None or -1 to wait for ever, not -2"),
    Input("negative-fraction", -0.5, InvalidTimeout, "not -0.5"),
    Input("minus-inf", -math.inf, InvalidTimeout, "not -inf"),
    Input("nan", math.nan, InvalidTimeout, "not NaN"),
    Input("huge", 10**12, InvalidTimeout, "at most 31536000 seconds"),
    Input("5000-digits", 10**5000, InvalidTimeout, "timeout is far too large"),
    Input("str", "5", InvalidTimeout, "must be a number of seconds, not str"),
    Input("true", True, InvalidTimeout, "not bool"),
    Input("false", False, InvalidTimeout, "not bool"),
    Input("timedelta-minus-one", timedelta(seconds=-1), InvalidTimeout, ">= 0"),
]
#: inputs for NON_BLOCKING: valid timeouts that a non-blocking acquire must still refuse
NON_BLOCKING_TIMEOUTS = [
    Input("non-blocking-with-timeout", 5, InvalidTimeout, "non-blocking acquire cannot have"),
]

LOCK_DELAYS = [
    Input("negative", -1, InvalidLockDelay, "between 0 and 3600 seconds, not -1"),
    Input("nan", math.nan, InvalidLockDelay, "must be a number of seconds, not NaN"),
    Input("inf", math.inf, InvalidLockDelay, "not inf"),
    Input("over-an-hour", 3601, InvalidLockDelay, "not 3601"),
    Input("5000-digits", 10**5000, InvalidLockDelay, "lock_delay is far too large"),
    Input("bool", True, InvalidLockDelay, "must be a number of seconds, not bool"),
    Input("str", "5", InvalidLockDelay, "not str"),
    Input("None", None, InvalidLockDelay, "not NoneType"),
    Input("timedelta-negative", timedelta(seconds=-5), InvalidLockDelay, "timedelta(days=-1"),
]

PERMITS = [
    Input("zero", 0, InvalidPermits, "between 1 and 1000000, not 0"),
    Input("negative", -1, InvalidPermits, "not -1"),
    Input("over-a-million", 10**6 + 1, InvalidPermits, "not 1000001"),
    Input("5000-digits", 10**5000, InvalidPermits, "not <an int of 16610 bits>"),
    Input("float", 2.0, InvalidPermits, "must be an int, not float"),
    Input("bool", True, InvalidPermits, "not bool"),
    Input("str", "3", InvalidPermits, "not str"),
    Input("None", None, InvalidPermits, "not NoneType"),
]

SEGMENTS = [
    Input("zero", 0, InvalidSegments, "segments must be between 1 and 1024, not 0"),
    Input("negative", -4, InvalidSegments, "not -4"),
    Input("over-1024", 1025, InvalidSegments, "not 1025"),
    Input("5000-digits", 10**5000, InvalidSegments, "not <an int of 16610 bits>"),
    Input("float", 4.0, InvalidSegments, "segments must be an int, not float"),
    Input("bool", True, InvalidSegments, "not bool"),
    Input("str", "4", InvalidSegments, "not str"),
    Input("None", None, InvalidSegments, "not NoneType"),
]

CHOICES = [
    Input("empty", [], InvalidSegments, "at least one segment must be chosen"),
    Input("out-of-range", [4], InvalidSegments, "segment 4 does not exist"),
    Input("negative", [-1], InvalidSegments, "segment -1 does not exist"),
    Input("twice", [1, 1], InvalidSegments, "segment 1 is chosen twice"),
    Input("float", [1.0], InvalidSegments, "a segment index must be an int, not float"),
    Input("bool", [True], InvalidSegments, "not bool"),
    Input("str", "12", InvalidSegments, "an iterable of segment indexes, not str"),
    Input("int", 2, InvalidSegments, "an iterable of segment indexes, not int"),
]

#: THE table: every input given to every call that takes it
CASES: list[Case] = [
    *(Case(call, name) for name in NAMES if name.error for call in NAME_CALLS),
    *(Case(AS_DATA, name) for name in NAMES if name.error is None),
    *(Case(call, ttl) for ttl in TTLS for call in TTL_CALLS),
    *(Case(call, timeout) for timeout in TIMEOUTS for call in TIMEOUT_CALLS),
    *(Case(NON_BLOCKING, timeout) for timeout in NON_BLOCKING_TIMEOUTS),
    *(Case(call, lock_delay) for lock_delay in LOCK_DELAYS for call in LOCK_DELAY_CALLS),
    *(Case(call, permits) for permits in PERMITS for call in PERMITS_CALLS),
    *(Case(call, segments) for segments in SEGMENTS for call in SEGMENTS_CALLS),
    *(Case(call, choice) for choice in CHOICES for call in CHOICE_CALLS),
]
VALID = [case for case in CASES if case.input.error is None]


@dataclass(frozen=True)
class Group:
    """The refused cases of one input, run one after another on the same two clients:
    connecting is most of a case's cost, and the table has hundreds of cases per backend."""

    id: str
    cases: tuple[Case, ...]


def _groups() -> list[Group]:
    by_input: dict[int, list[Case]] = {}
    for case in CASES:
        if case.input.error is not None:
            by_input.setdefault(id(case.input), []).append(case)
    kinds = {id(item): kind for kind, inputs in _KINDS for item in inputs}
    return [
        Group(f"{kinds[key]}-{cases[0].input.id}", tuple(cases)) for key, cases in by_input.items()
    ]


_KINDS = [
    ("name", NAMES),
    ("ttl", TTLS),
    ("timeout", [*TIMEOUTS, *NON_BLOCKING_TIMEOUTS]),
    ("lock-delay", LOCK_DELAYS),
    ("permits", PERMITS),
    ("segments", SEGMENTS),
    ("choice", CHOICES),
]
REFUSED = _groups()


def case_id(case: Case) -> str:
    return case.id


def group_id(group: Group) -> str:
    return group.id
