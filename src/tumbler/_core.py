"""The lock logic that needs no I/O: input rules, the grant predicate, lease and backoff maths.

Everything here is a pure function of its arguments (randomness is passed in), so it is tested
exhaustively with hypothesis and shared by every backend that decides grants in Python
(SQLite, memory, and later ZooKeeper and etcd, whose contenders arrive as a sorted list).
This module imports nothing else of tumbler but its errors.
"""

from __future__ import annotations

import enum
import math
import re
import sys
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Final, NamedTuple, TypeAlias, TypeGuard

from .errors import (
    InvalidArgument,
    InvalidLockDelay,
    InvalidLockName,
    InvalidPermits,
    InvalidSegments,
    InvalidTimeout,
    InvalidTTL,
    PermitsMismatch,
)

if TYPE_CHECKING:
    import random
    from datetime import timedelta

    #: a length of time the API takes: seconds, or a timedelta
    Seconds: TypeAlias = float | timedelta
else:
    # Hidden from type checkers, which read the alias above.

    def __getattr__(name: str) -> object:
        # Seconds names datetime's timedelta: made at its first use (an annotation
        # evaluated, tumbler.Seconds), so that importing tumbler does not import datetime.
        if name == "Seconds":
            global Seconds
            from datetime import timedelta

            Seconds = float | timedelta
            return Seconds
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


#: Longest lock name, in UTF-8 bytes: one limit that every backend can store.
MAX_NAME_BYTES = 255
#: Shortest lease: below this a renewal could not be scheduled before the lease ran out.
MIN_TTL = 0.01
#: Longest lease: a year. Longer is almost certainly a unit mistake (milliseconds for seconds).
MAX_TTL = 365 * 24 * 3600.0
#: Most permits a semaphore may have.
MAX_PERMITS = 1_000_000
#: Most segments of one segmented lock (each is a lock of its own at the backend)
MAX_SEGMENTS = 1024
#: Longest finite acquire timeout (same bound as the TTL, for the same reason).
MAX_TIMEOUT = MAX_TTL
#: Longest lock-delay: an hour. It keeps a name from every client after a lost grant, for
#: writes in flight to drain; longer than any network delivers them is a unit mistake.
MAX_LOCK_DELAY = 3600.0

DEFAULT_TTL = 30.0
#: A renewal is attempted when this fraction of the lease has passed (Redisson's watchdog: 1/3).
RENEW_FRACTION = 1 / 3


# --------------------------------------------------------------------------------------------
# Input rules


# Characters no lock name may contain, by code point (not by Unicode category, so that a name
# valid on one Python stays valid on every other):
# - C0 and C1 controls and DEL: NUL breaks C clients, the rest break logs and paths;
# - surrogates: a lone one cannot be encoded as UTF-8;
# - U+FFF0..U+FFFF: specials and noncharacters;
# - bidirectional embeddings, overrides and isolates: they make a name display as another;
# - line and paragraph separators: they break logs as newlines do.
# One regular expression, so that a megabyte-long name is refused in a millisecond; compiled at
# the first text that is not printable ASCII (of ASCII, only the controls and DEL are refused,
# which str.isprintable() finds), as its large ranges cost the import most of a millisecond.
_FORBIDDEN = "[\x00-\x1f\x7f-\x9f\ud800-\udfff\ufff0-\uffff\u202a-\u202e\u2066-\u2069\u2028\u2029]"


def _forbidden(text: str) -> str | None:
    """The first character of ``text`` no lock name or holder may contain, if any."""
    if text.isascii() and text.isprintable():
        return None
    found = re.search(_FORBIDDEN, text)
    return None if found is None else found.group()


#: Most characters of a refused value that an error message shows: messages go to logs and to
#: one line on a terminal, and a refused value may be a megabyte long.
SHOWN_CHARS = 60


def shown(value: object) -> str:
    """``repr(value)`` for an error message: escaped, and cut to ``SHOWN_CHARS`` characters."""
    try:
        text = repr(value)
    except ValueError:
        # an int with more digits than Python converts to text (sys.get_int_max_str_digits)
        text = f"<an int of {value.bit_length()} bits>" if isinstance(value, int) else "<?>"
    if len(text) > SHOWN_CHARS:
        text = text[: SHOWN_CHARS - 3] + "..."
    return text


def _escaped(name: str) -> str:
    """A refused name as printable ASCII for ``lock_name``, cut to ``SHOWN_CHARS``."""
    text = name.encode("ascii", "backslashreplace").decode("ascii")
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 3] + "..."


def validate_name(name: object) -> str:
    """Return the canonical (NFC) form of a lock name, or raise InvalidLockName.

    Names are case-sensitive text of 1 to 255 UTF-8 bytes (counted after normalisation),
    without control characters, and not only white space. Any other character,
    ``/ : * ? [ ] ' % .`` included, is data: backends encode names, never splice them into
    paths, patterns or queries.
    """
    if not isinstance(name, str):
        raise InvalidLockName(f"a lock name must be str, not {type(name).__name__}")
    # a str subclass could carry its own __eq__ or __hash__ into the backends
    name = str.__str__(name)
    if not name or name.isspace():
        raise InvalidLockName("a lock name must not be empty or only white space")
    forbidden = _forbidden(name)
    if forbidden is not None:
        raise InvalidLockName(
            f"a lock name must not contain the character U+{ord(forbidden):04X}",
            lock_name=_escaped(name),
        )
    canonical = unicodedata.normalize("NFC", name)
    size = len(canonical.encode("utf-8"))
    if size > MAX_NAME_BYTES:
        raise InvalidLockName(
            f"a lock name must be at most {MAX_NAME_BYTES} UTF-8 bytes, this one has {size}"
        )
    return canonical


def _is_timedelta(value: object) -> TypeGuard[timedelta]:
    # Only a program that imported datetime can hold a timedelta: it is looked for there,
    # rather than imported with tumbler, which most programs would pay for nothing.
    datetime = sys.modules.get("datetime")
    return datetime is not None and isinstance(value, datetime.timedelta)


def _seconds(
    value: object, what: str, error: type[InvalidTTL | InvalidTimeout | InvalidLockDelay]
) -> float:
    if _is_timedelta(value):
        return value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise error(f"{what} must be a number of seconds, not {type(value).__name__}")
    try:
        seconds = float(value)
    except OverflowError:
        raise error(f"{what} is far too large: {shown(value)}") from None
    if math.isnan(seconds):
        raise error(f"{what} must be a number of seconds, not NaN")
    return seconds


def validate_ttl(ttl: object) -> float:
    """Return a lease length in seconds, or raise InvalidTTL."""
    seconds = _seconds(ttl, "ttl", InvalidTTL)
    if not MIN_TTL <= seconds <= MAX_TTL:
        raise InvalidTTL(
            f"ttl must be between {MIN_TTL} and {MAX_TTL:.0f} seconds, not {shown(ttl)}"
        )
    return seconds


def validate_timeout(timeout: object) -> float | None:
    """Return an acquire timeout in seconds, None meaning "wait for ever", or raise InvalidTimeout.

    ``None``, ``-1`` (as in ``threading.Lock.acquire``) and ``math.inf`` wait for ever; ``0``
    tries once; other values must be finite and non-negative.
    """
    if timeout is None:
        return None
    seconds = _seconds(timeout, "timeout", InvalidTimeout)
    # -1 means "for ever" as a number, as in threading; a timedelta of -1 s is just negative
    if (seconds == -1 and not _is_timedelta(timeout)) or seconds == math.inf:
        return None
    if seconds < 0:
        raise InvalidTimeout(
            f"timeout must be >= 0, or None or -1 to wait for ever, not {shown(timeout)}"
        )
    if seconds > MAX_TIMEOUT:
        raise InvalidTimeout(
            f"timeout must be at most {MAX_TIMEOUT:.0f} seconds (None waits for ever), "
            f"not {shown(timeout)}"
        )
    return seconds


def validate_lock_delay(lock_delay: object) -> float:
    """Return a lock-delay in seconds (0: none), or raise InvalidLockDelay."""
    seconds = _seconds(lock_delay, "lock_delay", InvalidLockDelay)
    if not 0 <= seconds <= MAX_LOCK_DELAY:
        raise InvalidLockDelay(
            f"lock_delay must be between 0 and {MAX_LOCK_DELAY:.0f} seconds, "
            f"not {shown(lock_delay)}"
        )
    return seconds


def validate_flag(value: object, what: str) -> bool:
    """A yes/no option: only True or False (``fair="no"`` must not mean fair)."""
    if not isinstance(value, bool):
        raise InvalidArgument(f"{what} must be True or False, not {value!r}"[:200])
    return value


def validate_permits(permits: object) -> int:
    """Return a semaphore's permit count, or raise InvalidPermits."""
    if isinstance(permits, bool) or not isinstance(permits, int):
        raise InvalidPermits(f"permits must be an int, not {type(permits).__name__}")
    if not 1 <= permits <= MAX_PERMITS:
        raise InvalidPermits(f"permits must be between 1 and {MAX_PERMITS}, not {shown(permits)}")
    return int(permits)  # a plain int, not an IntEnum or other subclass


def validate_segments(segments: object) -> int:
    """Return a segmented lock's segment count, or raise InvalidSegments."""
    if isinstance(segments, bool) or not isinstance(segments, int):
        raise InvalidSegments(f"segments must be an int, not {type(segments).__name__}")
    if not 1 <= segments <= MAX_SEGMENTS:
        raise InvalidSegments(
            f"segments must be between 1 and {MAX_SEGMENTS}, not {shown(segments)}"
        )
    return int(segments)


def multi_names(names: object) -> tuple[str, ...]:
    """The names of a multi-lock (``locks.multi()``), canonical and in the one order every
    caller takes them in (code point order of the canonical forms), or InvalidLockName: a
    single string (not a collection of names), no name, or a name given twice. Taking locks in
    one global order is what keeps two callers whose sets overlap from waiting for each other
    for ever."""
    if isinstance(names, (str, bytes)):
        raise InvalidLockName(
            "multi() takes a collection of lock names, not one name: multi([name, ...])"
        )
    if not isinstance(names, Iterable):
        raise InvalidLockName(
            f"multi() takes a collection of lock names, not {type(names).__name__}"
        )
    given = [validate_name(name) for name in names]
    if not given:
        raise InvalidLockName("multi() needs at least one lock name")
    seen: set[str] = set()
    for name in given:
        if name in seen:
            raise InvalidLockName(
                f"lock name {shown(name)} is given twice", lock_name=_escaped(name)
            )
        seen.add(name)
    return tuple(sorted(given))


def segment_names(name: str, segments: int) -> tuple[str, ...]:
    """The lock names of the segments of the segmented lock ``name`` (canonical), in segment
    order: ``name#i/K``. The count is part of each name, so that two users who split the
    resource differently never hold "the same" segment of two different partitions; raises
    InvalidLockName if ``name`` leaves no room for the suffix."""
    names = tuple(f"{name}#{index}/{segments}" for index in range(segments))
    validate_name(names[-1])  # the longest suffix
    return names


def validate_segment_choice(chosen: object, segments: int) -> tuple[int, ...]:
    """The segments an acquire may take: every one if ``chosen`` is None, else the distinct
    indexes of ``chosen`` in the order given; raises InvalidSegments for an empty choice, a
    repeated or out-of-range index, or one that is not an int."""
    if chosen is None:
        return tuple(range(segments))
    if isinstance(chosen, (str, bytes)) or not hasattr(chosen, "__iter__"):
        raise InvalidSegments(
            f"segments must be an iterable of segment indexes, not {type(chosen).__name__}"
        )
    picked: list[int] = []
    for index in chosen:
        if isinstance(index, bool) or not isinstance(index, int):
            raise InvalidSegments(f"a segment index must be an int, not {type(index).__name__}")
        if not 0 <= index < segments:
            raise InvalidSegments(
                f"segment {shown(index)} does not exist: this lock has segments 0 to {segments - 1}"
            )
        if index in picked:
            raise InvalidSegments(f"segment {index} is chosen twice")
        picked.append(int(index))
    if not picked:
        raise InvalidSegments("at least one segment must be chosen")
    return tuple(picked)


def spread(candidates: Sequence[int], rng: random.Random) -> list[int]:
    """The order in which to try ``candidates``: the same cycle, started at a random place,
    so that acquirers starting at once mostly try different segments first, and a segment
    that is taken is never tried again before the others."""
    start = rng.randrange(len(candidates))
    return [*candidates[start:], *candidates[:start]]


# --------------------------------------------------------------------------------------------
# The grant predicate


class Entry(NamedTuple):
    """One contender for a lock name as a backend stores it: a grant, or a waiter in line.

    ``seq`` orders entries by arrival. ``limit`` is how many shared holders the entry's kind
    admits (0: any number, as for read locks); exclusive entries use 1. ``token`` is the fencing
    token of a grant and None for a waiter. ``lapsed``: a grant whose lease ran out, kept for
    its lock-delay: it counts as the grant it was for everyone else, and its owner cannot
    have it back.
    """

    owner: str
    seq: int
    shared: bool
    limit: int
    fair: bool
    token: int | None
    lapsed: bool = False

    @property
    def granted(self) -> bool:
        return self.token is not None


class Decision(enum.Enum):
    HELD = "held"  # the owner already has a grant: an idempotent retry returns it
    GRANT = "grant"  # grant now
    WAIT = "wait"  # not now: keep (or create) a waiter entry


def admits(ahead: Sequence[Entry], shared: bool, limit: int) -> bool:
    """Whether a request of this kind may be granted with ``ahead`` in front of it.

    An exclusive request needs nobody ahead. A shared one needs no exclusive entry ahead and,
    if limited, fewer than ``limit`` shared ones.
    """
    if not shared:
        return not ahead
    if any(not entry.shared for entry in ahead):
        return False
    return limit == 0 or len(ahead) < limit


def check_limits(entries: Sequence[Entry], owner: str, shared: bool, limit: int) -> None:
    """Refuse a shared request whose limit differs from that of the live shared entries.

    Two semaphores of one name with different permit counts would each count differently; a
    read lock (no limit) and a semaphore of one name likewise.
    """
    if not shared:
        return
    for entry in entries:
        if entry.shared and entry.owner != owner and entry.limit != limit:

            def kind(n: int) -> str:
                return "a read lock" if n == 0 else f"a semaphore of {n} permits"

            raise PermitsMismatch(
                f"asked for {kind(limit)} but the lock is in use as {kind(entry.limit)}"
            )


def decide(entries: Sequence[Entry], owner: str, shared: bool, limit: int, fair: bool) -> Decision:
    """Decide a grant request against the live entries of its lock name (expired ones removed,
    lapsed grants kept for their lock-delay).

    A fair request waits behind every grant and every earlier fair waiter; a non-fair one only
    behind grants, so it may overtake waiters (barging), which is faster but can starve them.
    A lapsed grant blocks as a live one does; its own owner is refused too (it lost the grant,
    and a grant once lost is never revived) until its delay ends.
    """
    mine = next((entry for entry in entries if entry.owner == owner), None)
    if mine is not None and mine.granted:
        return Decision.WAIT if mine.lapsed else Decision.HELD
    check_limits(entries, owner, shared, limit)
    my_seq = mine.seq if mine is not None else math.inf
    ahead = [
        entry
        for entry in entries
        if entry.owner != owner and (entry.granted or (fair and entry.fair and entry.seq < my_seq))
    ]
    return Decision.GRANT if admits(ahead, shared, limit) else Decision.WAIT


def let_through(line: Sequence[Entry]) -> tuple[list[int], bool]:
    """Whom a change to a lock's line lets through now: the indexes of the waiters of ``line``
    (the name's live entries, every grant among them, the waiters by arrival) that the grant
    rule grants if each one granted counts as a grant for those behind it, in one pass that
    stops at the first waiter that cannot go. A mutex lets one waiter through, a read lock
    the run of readers at the head, a semaphore as many waiters as it has free permits.

    Up to that waiter the answer is :func:`decide`'s for each waiter in turn; behind it, a
    waiter of a fair line cannot go either (it would have that waiter ahead of it), while a
    non-fair one that could overtake is left to its own re-check. Also whether the pass is
    complete: it met a waiter that cannot go, or the grants it counts leave room for none
    (``False``: it let every waiter given through, and a longer head of the line may let
    more). One step per entry given, each a few comparisons (``decide`` for every waiter in
    turn took a pass over the line each): a backend gives it the grants and the head of the
    line, and reads more only while the answer is not complete.
    """
    exclusive = shared = 0  # grants, those let through counted
    limits: set[int] = set()
    for entry in line:
        if entry.shared:
            limits.add(entry.limit)
        if entry.granted:
            if entry.shared:
                shared += 1
            else:
                exclusive += 1
    # two permit counts among the shared entries: every shared request is refused
    # (check_limits), whichever count it has
    mixed = len(limits) > 1
    limit = next(iter(limits)) if len(limits) == 1 else 0

    def full() -> bool:
        return exclusive > 0 or (shared > 0 and (mixed or 0 < limit <= shared))

    # Every waiter the pass passes over goes, and counts as a grant from then on: no waiter
    # it looks at has a fair waiter ahead of it that does not go, so fair and non-fair
    # waiters are counted alike.
    through: list[int] = []
    for index, entry in enumerate(line):
        if entry.granted:
            continue
        if full():
            return through, True
        # not full: a shared waiter has no exclusive grant ahead and fewer shared ones than
        # its limit, unless the permit counts clash
        goes = not mixed if entry.shared else exclusive == shared == 0
        if not goes:
            return through, True
        through.append(index)
        if entry.shared:
            shared += 1
        else:
            exclusive += 1
    return through, full()


class Write(enum.Enum):
    """What a backend that stores rows must write for one grant request (see :func:`plan`)."""

    NOTHING = "nothing"  # the owner holds it already, or a single try that waits leaves nothing
    ADD_GRANT = "add grant"  # a new granted entry: a fresh token, the request's lease
    GRANT_WAITER = "grant waiter"  # the owner's waiter entry becomes a grant, keeping its seq
    ADD_WAITER = "add waiter"  # a new waiter entry, with the waiter lease
    REFRESH_WAITER = "refresh waiter"  # the owner's waiter entry gets a new waiter lease


class WritePlan(NamedTuple):
    """:func:`plan`'s answer: the decision, what to write for it, and the owner's own entry
    (``mine``: whose ``seq`` a write of the owner's entry names, and whose ``token`` a HELD
    answer returns), if the owner has one among the live entries."""

    decision: Decision
    write: Write
    mine: Entry | None

    @property
    def held_token(self) -> int:
        """The fencing token of the grant the owner holds already (HELD plans only)."""
        if self.decision is not Decision.HELD or self.mine is None or self.mine.token is None:
            raise ValueError(f"a {self.decision.value} plan returns no grant already made")
        return self.mine.token


def plan(
    entries: Sequence[Entry], owner: str, shared: bool, limit: int, fair: bool, queue: bool
) -> WritePlan:
    """Turn the live entries of a lock name and one request into what the backend writes.

    The decision is :func:`decide`'s (so a shared request whose limit differs from the live
    shared entries' raises ``PermitsMismatch``, and nothing is written). Idempotent by owner:
    a retry finds its own entry and either returns its grant (HELD) or keeps its place
    (REFRESH_WAITER, GRANT_WAITER); it never plans a second entry for the owner. A request with
    ``queue`` False (a single try) leaves nothing behind when it is not granted.
    """
    decision = decide(entries, owner, shared, limit, fair)
    mine = next((entry for entry in entries if entry.owner == owner), None)
    if decision is Decision.HELD or (mine is not None and mine.lapsed):
        write = Write.NOTHING
    elif decision is Decision.GRANT:
        write = Write.ADD_GRANT if mine is None else Write.GRANT_WAITER
    elif mine is not None:
        write = Write.REFRESH_WAITER
    else:
        write = Write.ADD_WAITER if queue else Write.NOTHING
    return WritePlan(decision, write, mine)


#: ``line_position``'s answer for a waiter that must watch the whole line, not one entry
WATCH_LINE = -1


def line_position(line: Sequence[Entry], index: int) -> int | None:
    """For backends whose grants follow from the order of a line (ZooKeeper's sequential nodes).

    ``line`` holds every entry in arrival order, granted or not. The entry at ``index`` holds the
    lock when ``admits`` everything ahead of it; since entries only ever leave the line ahead of
    it, it then keeps the lock until it leaves itself. Returns None if it holds the lock, else
    what its waiter should watch: the index of the one entry whose leaving (or, for
    semaphores, whose grant) may let it through, or ``WATCH_LINE`` for the first semaphore
    waiter, which any leaving holder may let through.
    """
    mine = line[index]
    ahead = line[:index]
    if admits(ahead, mine.shared, mine.limit):
        return None
    if not mine.shared:
        return index - 1  # a mutex or writer waits for its predecessor: no herd
    exclusive = [i for i, entry in enumerate(ahead) if not entry.shared]
    if exclusive:
        return exclusive[-1]  # a reader waits for the nearest writer ahead
    # a semaphore with ``limit`` or more entries ahead: the first waiter watches the holders,
    # the others their predecessor, which says when it is granted
    return WATCH_LINE if index == mine.limit else index - 1


def would_block(holders_shared: Sequence[bool], shared: bool, limit: int) -> bool:
    """Whether a non-fair request would have to wait, given which of the grants are shared."""
    ahead = [Entry("", i, s, 1, False, 0) for i, s in enumerate(holders_shared)]
    return not admits(ahead, shared, limit)


# --------------------------------------------------------------------------------------------
# Leases, deadlines, backoff


def drift_margin(ttl: float) -> float:
    """How much earlier than the server the client gives its hold up.

    Covers clock-rate differences between client and server (1% of the lease, as Redlock's
    description allows) and the delay between the deadline and the holder acting on it on a
    loaded machine (a thread or task woken late): 25 ms, but no more than 5% of the lease
    (and at least 2 ms).
    The holder's ``on_lost`` must come before the backend can grant the lock to anyone else.
    """
    return ttl * 0.01 + min(0.025, max(0.002, ttl * 0.05))


def local_deadline(sent_at: float, granted_ttl: float) -> float:
    """When the client stops believing it holds a lease granted for ``granted_ttl`` seconds.

    Timed from when the request was *sent*, not answered: the server's lease may have started
    at any moment in between.
    """
    return sent_at + granted_ttl - drift_margin(granted_ttl)


#: the least time a renewal call is given, even when a lease is about to run out
MIN_CALL_BOUND = 0.01


def renew_delay(granted_ttl: float) -> float:
    """How long after a grant or renewal the next renewal is due."""
    return granted_ttl * RENEW_FRACTION


def retry_delay(remaining: float) -> float:
    """How long to wait before retrying a renewal that could not reach the backend.

    Several tries fit before the local deadline, none sooner than 10 ms apart or later than 1 s.
    """
    return max(0.01, min(1.0, remaining / 4))


class Backoff:
    """Waits between polls: exponential growth with "decorrelated jitter", bounded by ``cap``.

    Jitter keeps pollers that started together from asking the backend in lock-step.
    """

    __slots__ = ("_last", "base", "cap", "rng")

    def __init__(self, base: float, cap: float, rng: random.Random) -> None:
        if not 0 < base <= cap:
            raise ValueError(f"backoff needs 0 < base <= cap, not {base} and {cap}")
        self.base = base
        self.cap = cap
        self.rng = rng
        self._last = 0.0

    def __repr__(self) -> str:
        return f"Backoff(base={self.base!r}, cap={self.cap!r})"

    def next(self) -> float:
        if self._last <= 0:
            self._last = self.base
        else:
            self._last = min(self.cap, self.rng.uniform(self.base, self._last * 3))
        return self._last

    def reset(self) -> None:
        """Start again from ``base``."""
        self._last = 0.0


# --------------------------------------------------------------------------------------------
# Operators

#: longest reason an operator may give for a forced release
MAX_REASON = 500


#: the longest description a client may give of itself (``connect(holder=...)``): what every
#: store keeps with a grant (MySQL's column holds 255 characters)
MAX_HOLDER = 200


def validate_holder(holder: object) -> str:
    """A client's description of itself for operators: one line of 1 to MAX_HOLDER
    characters."""
    if not isinstance(holder, str):
        raise InvalidArgument(f"holder must be text, not {type(holder).__name__}")
    if not holder.strip() or len(holder) > MAX_HOLDER:
        raise InvalidArgument(f"holder must be 1 to {MAX_HOLDER} characters")
    _check_one_line(holder, "holder")
    return holder


def validate_reason(reason: object) -> str | None:
    """A forced release's reason: None, or one line of text of at most MAX_REASON characters."""
    if reason is None:
        return None
    if not isinstance(reason, str):
        raise InvalidArgument(f"reason must be text, not {type(reason).__name__}")
    text = reason.strip()
    if not text or len(text) > MAX_REASON:
        raise InvalidArgument(f"reason must be 1 to {MAX_REASON} characters")
    _check_one_line(text, "reason")
    return text


def _check_one_line(text: str, what: str) -> None:
    """Refuse what a lock name may not contain either: controls would break the line it is
    shown on, a lone surrogate cannot be stored (no UTF-8 for it), a bidirectional override
    would make it display as other text."""
    forbidden = _forbidden(text)
    if forbidden is not None:
        raise InvalidArgument(
            f"{what} must be one line of text without the character U+{ord(forbidden):04X}"
        )


# -- the life of a hold (the lock layer's hold follows this table) ---------------------------


class HoldState(enum.Enum):
    """Where a hold is in its life (see the module docstring)."""

    #: granted, and confirmed by the last grant or renewal
    HELD = "held"
    #: granted, but the backend could not confirm it lately: it may come back, or be lost
    IN_DOUBT = "in doubt"
    #: found lost; its grant is still to be given back at the backend
    LOST = "lost"
    #: found lost, and its grant given back by the renewal worker
    GIVEN_BACK = "given back"
    #: the holder's release is on its way to the backend
    RELEASING = "releasing"
    #: the grant was given back for good
    RELEASED = "released"

    # Members are singletons, equal only to themselves: identity's hash will do, and Enum's
    # own (a Python-level call) costs a hold's release a few microseconds in its lookups in
    # GRANTED, UNLOST and TRANSITIONS.
    __hash__ = object.__hash__


HELD: Final = HoldState.HELD
IN_DOUBT: Final = HoldState.IN_DOUBT
LOST: Final = HoldState.LOST
GIVEN_BACK: Final = HoldState.GIVEN_BACK
RELEASING: Final = HoldState.RELEASING
RELEASED: Final = HoldState.RELEASED

#: the states in which the grant is still the client's to give back: a release may begin
GRANTED: Final = frozenset({HELD, IN_DOUBT, LOST, GIVEN_BACK})
#: the states in which the client still believes it holds the grant (the clock may say not)
UNLOST: Final = frozenset({HELD, IN_DOUBT})

#: every legal change of state; staying in a state is not a change
TRANSITIONS: Final[Mapping[HoldState, frozenset[HoldState]]] = {
    HELD: frozenset({IN_DOUBT, LOST, RELEASING, RELEASED}),
    IN_DOUBT: frozenset({HELD, LOST, RELEASING, RELEASED}),
    LOST: frozenset({GIVEN_BACK, RELEASING, RELEASED}),
    GIVEN_BACK: frozenset({RELEASING, RELEASED}),
    RELEASING: frozenset({RELEASED}),
    RELEASED: frozenset(),
}


class IllegalTransition(AssertionError):
    """A hold was asked to change state along no edge of ``TRANSITIONS``: a bug in tumbler."""


def transition(current: HoldState, wanted: HoldState) -> HoldState:
    """``wanted`` if a hold in ``current`` may change to it; else ``IllegalTransition``."""
    if wanted not in TRANSITIONS[current]:
        raise IllegalTransition(f"a hold cannot go from {current.value} to {wanted.value}")
    return wanted
