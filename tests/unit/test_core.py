"""The pure lock logic of ``tumbler._core``: input rules, the grant predicate, lease maths.

The grant predicate ``decide()`` is checked against a reference model written here from the
documented rule (not from the implementation), on random lock tables, and by a state machine
that drives a lock table through requests, releases and lease expiries.
"""

from __future__ import annotations

import contextlib
import math
import random
import re
import unicodedata
from collections.abc import Sequence
from datetime import timedelta

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from tests.search import PROFILE
from tumbler import _core as core
from tumbler._core import Backoff, Decision, Entry, decide, would_block
from tumbler.errors import (
    InvalidArgument,
    InvalidLockDelay,
    InvalidLockName,
    InvalidPermits,
    InvalidSegments,
    InvalidTimeout,
    InvalidTTL,
    PermitsMismatch,
    TumblerError,
)


def raises_exactly(error: type[Exception], function: object, *args: object) -> Exception:
    """Call ``function(*args)`` and check it raises exactly ``error``, a ValueError."""
    assert callable(function)
    with pytest.raises(error) as info:
        function(*args)
    assert type(info.value) is error
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, TumblerError)
    return info.value


# ---------------------------------------------------------------------------------------------
# validate_name


@pytest.mark.parametrize(
    "name",
    [
        "a",
        "orders:42",
        "Orders:42",  # case-sensitive: kept as given
        " leading and trailing ",
        "*",
        "?",
        "[abc]",
        "it's",
        "100%",
        "%_",
        "/",
        ".",
        "..",
        "../../etc/passwd",
        "a/b/c",
        "'; DROP TABLE tumbler_entries; --",
        "ключ",
        "鍵",
        "😀",
        "a" * core.MAX_NAME_BYTES,
    ],
)
def test_names_of_any_other_characters_are_data(name: str) -> None:
    assert core.validate_name(name) == name


def test_name_is_normalised_to_nfc() -> None:
    decomposed = "cafe\u0301"  # e + COMBINING ACUTE ACCENT
    assert core.validate_name(decomposed) == "caf\u00e9"
    assert core.validate_name("caf\u00e9") == "caf\u00e9"


@pytest.mark.parametrize(
    "name",
    [
        "",
        " ",
        "   ",
        "\t",
        "\n",
        " \t\r\n ",
        "\u00a0",  # NO-BREAK SPACE
        "\u3000",  # IDEOGRAPHIC SPACE
        "\u2003\u2003",  # EM SPACE
    ],
)
def test_empty_or_white_space_names_are_refused(name: str) -> None:
    raises_exactly(InvalidLockName, core.validate_name, name)


@pytest.mark.parametrize("name", [None, b"orders", bytearray(b"x"), 42, 4.2, ["a"], object()])
def test_names_that_are_not_str_are_refused(name: object) -> None:
    raises_exactly(InvalidLockName, core.validate_name, name)


@pytest.mark.parametrize(
    "code",
    [0x00, 0x01, 0x07, 0x09, 0x0A, 0x0D, 0x1B, 0x1F, 0x7F, 0x80, 0x85, 0x9F],
)
def test_control_characters_are_refused(code: int) -> None:
    raises_exactly(InvalidLockName, core.validate_name, f"before{chr(code)}after")


@pytest.mark.parametrize("code", range(0x01, 0x20))
def test_every_c0_control_character_is_refused(code: int) -> None:
    raises_exactly(InvalidLockName, core.validate_name, f"x{chr(code)}")


@pytest.mark.parametrize("code", range(0x7F, 0xA0))
def test_every_delete_and_c1_control_character_is_refused(code: int) -> None:
    raises_exactly(InvalidLockName, core.validate_name, f"x{chr(code)}")


def test_nul_is_refused_and_the_message_shows_it_escaped() -> None:
    error = raises_exactly(InvalidLockName, core.validate_name, "a\x00b")
    assert "U+0000" in str(error)


@pytest.mark.parametrize("code", [0xD800, 0xDBFF, 0xDC00, 0xDFFF])
def test_lone_surrogates_are_refused(code: int) -> None:
    error = raises_exactly(InvalidLockName, core.validate_name, f"name{chr(code)}")
    # the message must itself be printable and encodable, surrogate and all
    str(error).encode("utf-8")


@pytest.mark.parametrize("code", [0xFFF0, 0xFFF8, 0xFFF9, 0xFFFC, 0xFFFD, 0xFFFE, 0xFFFF])
def test_specials_and_noncharacters_are_refused(code: int) -> None:
    raises_exactly(InvalidLockName, core.validate_name, f"x{chr(code)}")


@pytest.mark.parametrize(
    ("unit", "fits"),
    [
        ("a", 255),  # 1 byte
        ("\u00e9", 127),  # é: 2 bytes
        ("\u20ac", 85),  # €: 3 bytes
        ("\U0001f600", 63),  # 😀: 4 bytes
    ],
)
def test_name_limit_is_255_utf8_bytes_not_characters(unit: str, fits: int) -> None:
    longest = unit * fits
    assert len(longest.encode("utf-8")) <= core.MAX_NAME_BYTES
    assert core.validate_name(longest) == longest
    too_long = unit * (fits + 1)
    if len(unit.encode("utf-8")) > 1:
        assert len(too_long) <= core.MAX_NAME_BYTES  # refused for its bytes, not its length
    error = raises_exactly(InvalidLockName, core.validate_name, too_long)
    assert str(len(too_long.encode("utf-8"))) in str(error)


def test_name_limit_counts_a_mix_of_widths_exactly() -> None:
    name = "\U0001f600" * 63 + "abc"  # 252 + 3 bytes
    assert core.validate_name(name) == name
    raises_exactly(InvalidLockName, core.validate_name, name + "d")


def test_name_limit_is_measured_after_normalisation() -> None:
    # 127 decomposed é are 381 bytes, but 254 bytes once composed: the stored name fits.
    decomposed = "e\u0301" * 127
    assert len(decomposed.encode("utf-8")) > core.MAX_NAME_BYTES
    assert core.validate_name(decomposed) == "\u00e9" * 127


_any_character = st.characters(exclude_categories=())


@PROFILE
@given(st.text(_any_character, max_size=300))
def test_any_text_is_either_a_canonical_name_or_refused(text: str) -> None:
    try:
        name = core.validate_name(text)
    except InvalidLockName:
        return
    assert name == unicodedata.normalize("NFC", text)
    assert 1 <= len(name.encode("utf-8")) <= core.MAX_NAME_BYTES
    assert not name.isspace()
    assert not any(ord(ch) < 0x20 or 0x7F <= ord(ch) <= 0x9F for ch in name)
    assert core.validate_name(name) == name  # canonical names are fixed points


@PROFILE
@given(st.text(max_size=100))
def test_canonically_equivalent_names_are_one_name(text: str) -> None:
    def outcome(candidate: str) -> str | None:
        try:
            return core.validate_name(candidate)
        except InvalidLockName:
            return None

    assert outcome(unicodedata.normalize("NFD", text)) == outcome(text)


# ---------------------------------------------------------------------------------------------
# validate_ttl, validate_timeout, validate_permits


@pytest.mark.parametrize(
    ("ttl", "seconds"),
    [
        (30, 30.0),
        (0.5, 0.5),
        (core.MIN_TTL, core.MIN_TTL),
        (core.MAX_TTL, core.MAX_TTL),
        (timedelta(seconds=5), 5.0),
        (timedelta(milliseconds=250), 0.25),
        (timedelta(days=365), core.MAX_TTL),
    ],
)
def test_valid_ttls_become_float_seconds(ttl: object, seconds: float) -> None:
    result = core.validate_ttl(ttl)
    assert result == seconds
    assert type(result) is float


@pytest.mark.parametrize(
    "ttl",
    [
        0,
        0.0,
        -1,
        -0.5,
        math.nan,
        math.inf,
        -math.inf,
        True,
        False,
        "30",
        b"30",
        None,
        [30],
        timedelta(0),
        timedelta(seconds=-5),
        core.MIN_TTL / 2,
        0.009,
        core.MAX_TTL + 1,
        core.MAX_TTL * 1000,
        timedelta(days=366),
        pytest.param(10**400, id="int-too-large-for-a-float"),
    ],
)
def test_invalid_ttls_are_refused(ttl: object) -> None:
    raises_exactly(InvalidTTL, core.validate_ttl, ttl)


@pytest.mark.parametrize("timeout", [None, -1, -1.0, math.inf])
def test_timeouts_that_wait_for_ever(timeout: object) -> None:
    assert core.validate_timeout(timeout) is None


@pytest.mark.parametrize(
    ("timeout", "seconds"),
    [
        (0, 0.0),
        (0.0, 0.0),
        (2.5, 2.5),
        (5, 5.0),
        (timedelta(seconds=3), 3.0),
        (timedelta(0), 0.0),
        (core.MAX_TIMEOUT, core.MAX_TIMEOUT),
    ],
)
def test_finite_timeouts_become_float_seconds(timeout: object, seconds: float) -> None:
    result = core.validate_timeout(timeout)
    assert result == seconds
    assert type(result) is float


@pytest.mark.parametrize(
    "timeout",
    [
        -0.5,
        -2,
        -1.5,
        -math.inf,
        math.nan,
        True,
        False,
        "5",
        [5],
        timedelta(seconds=-2),
        core.MAX_TIMEOUT + 1,
        timedelta.max,
        1e300,
        pytest.param(10**400, id="int-too-large-for-a-float"),
    ],
)
def test_invalid_timeouts_are_refused(timeout: object) -> None:
    raises_exactly(InvalidTimeout, core.validate_timeout, timeout)


@pytest.mark.parametrize("permits", [1, 2, 100, core.MAX_PERMITS])
def test_valid_permits(permits: int) -> None:
    assert core.validate_permits(permits) == permits


@pytest.mark.parametrize(
    "permits",
    [0, -1, -100, True, False, 1.0, 2.5, "3", None, core.MAX_PERMITS + 1, 10**100, math.inf],
)
def test_invalid_permits_are_refused(permits: object) -> None:
    raises_exactly(InvalidPermits, core.validate_permits, permits)


@PROFILE
@given(st.one_of(st.floats(allow_nan=True), st.integers(), st.none(), st.booleans(), st.text()))
def test_validators_raise_nothing_but_their_own_error(value: object) -> None:
    for validate, error in (
        (core.validate_ttl, InvalidTTL),
        (core.validate_timeout, InvalidTimeout),
        (core.validate_permits, InvalidPermits),
    ):
        with contextlib.suppress(error):
            validate(value)


# ---------------------------------------------------------------------------------------------
# The grant predicate: a reference model of the documented rule


def reference_decision(
    entries: Sequence[Entry], owner: str, shared: bool, limit: int, fair: bool
) -> Decision:
    """The grant rule as the documentation states it, written without looking at decide()."""
    own = [entry for entry in entries if entry.owner == owner]
    others = [entry for entry in entries if entry.owner != owner]
    if own and own[0].token is not None:
        return Decision.HELD
    if shared and any(entry.shared and entry.limit != limit for entry in others):
        raise PermitsMismatch("limits differ")
    my_seq = own[0].seq if own else None

    def blocks(entry: Entry) -> bool:
        if entry.token is not None:
            return True  # everybody waits on grants
        # only a fair request waits on waiters, and only on earlier fair ones
        return fair and entry.fair and (my_seq is None or entry.seq < my_seq)

    blockers = [entry for entry in others if blocks(entry)]
    exclusive = sum(1 for entry in blockers if not entry.shared)
    if not shared:
        admitted = not blockers
    else:
        admitted = exclusive == 0 and (limit == 0 or len(blockers) < limit)
    return Decision.GRANT if admitted else Decision.WAIT


def grants_compatible(entries: Sequence[Entry]) -> bool:
    """No two exclusive grants, no exclusive beside a shared one, no more shared than allowed."""
    grants = [entry for entry in entries if entry.granted]
    exclusive = [entry for entry in grants if not entry.shared]
    shared = [entry for entry in grants if entry.shared]
    if len(exclusive) > 1 or (exclusive and shared):
        return False
    return all(entry.limit == 0 or len(shared) <= entry.limit for entry in shared)


# (shared, limit) of the kinds a lock name can be used as
MUTEX = (False, 1)
READ = (True, 0)


@st.composite
def lock_tables(draw: st.DrawFn) -> tuple[list[Entry], int]:
    """A consistent table of one lock name, and the name's shared limit.

    Entries arrive in seq order; one that wants a grant gets it only if the grants before it
    admit it, so the table is one a correct backend could reach.
    """
    shared_limit = draw(st.sampled_from([0, 1, 2, 3]))
    count = draw(st.integers(0, 7))
    seqs = sorted(draw(st.lists(st.integers(1, 1000), min_size=count, max_size=count, unique=True)))
    entries: list[Entry] = []
    token = 0
    for index, seq in enumerate(seqs):
        shared = draw(st.booleans())
        limit = shared_limit if shared else 1
        fair = draw(st.booleans())
        wants_grant = draw(st.booleans())
        candidate = Entry(f"owner{index}", seq, shared, limit, fair, None)
        if wants_grant and grants_compatible([*entries, candidate._replace(token=token + 1)]):
            token += 1
            candidate = candidate._replace(token=token)
        entries.append(candidate)
    shuffled = draw(st.permutations(entries))
    return list(shuffled), shared_limit


@st.composite
def requests(draw: st.DrawFn, entries: Sequence[Entry], shared_limit: int) -> tuple:
    """A request for the table: from an owner in it (with its entry's kind) or a new owner."""
    owners = [entry.owner for entry in entries]
    owner = draw(st.sampled_from([*owners, "newcomer"]))
    mine = next((entry for entry in entries if entry.owner == owner), None)
    if mine is not None and draw(st.integers(0, 9)) > 0:
        return owner, mine.shared, mine.limit, mine.fair
    shared = draw(st.booleans())
    # now and then a limit other than the name's: PermitsMismatch territory
    limit = draw(st.sampled_from([shared_limit, shared_limit, shared_limit, 0, 1, 2, 5]))
    return owner, shared, (limit if shared else 1), draw(st.booleans())


def decide_or_mismatch(
    entries: Sequence[Entry], owner: str, shared: bool, limit: int, fair: bool
) -> Decision | type[PermitsMismatch]:
    try:
        return decide(entries, owner, shared, limit, fair)
    except PermitsMismatch:
        return PermitsMismatch


def reference_or_mismatch(
    entries: Sequence[Entry], owner: str, shared: bool, limit: int, fair: bool
) -> Decision | type[PermitsMismatch]:
    try:
        return reference_decision(entries, owner, shared, limit, fair)
    except PermitsMismatch:
        return PermitsMismatch


@PROFILE
@given(st.data())
def test_decide_agrees_with_the_reference_model(data: st.DataObject) -> None:
    entries, shared_limit = data.draw(lock_tables())
    owner, shared, limit, fair = data.draw(requests(entries, shared_limit))
    assert decide_or_mismatch(entries, owner, shared, limit, fair) == reference_or_mismatch(
        entries, owner, shared, limit, fair
    )


@PROFILE
@given(st.data())
def test_a_grant_never_breaks_exclusion(data: st.DataObject) -> None:
    entries, shared_limit = data.draw(lock_tables())
    assert grants_compatible(entries)
    owner, shared, limit, fair = data.draw(requests(entries, shared_limit))
    decision = decide_or_mismatch(entries, owner, shared, limit, fair)
    assume(decision is Decision.GRANT)
    rest = [entry for entry in entries if entry.owner != owner]
    granted = Entry(owner, 10_000, shared, limit, fair, 10_000)
    assert grants_compatible([*rest, granted])


@PROFILE
@given(st.data())
def test_held_exactly_when_the_owner_already_has_a_grant(data: st.DataObject) -> None:
    entries, shared_limit = data.draw(lock_tables())
    owner, shared, limit, fair = data.draw(requests(entries, shared_limit))
    has_grant = any(entry.owner == owner and entry.granted for entry in entries)
    decision = decide_or_mismatch(entries, owner, shared, limit, fair)
    assert (decision is Decision.HELD) == has_grant


@PROFILE
@given(st.data())
def test_a_fair_request_never_overtakes_an_earlier_fair_waiter(data: st.DataObject) -> None:
    entries, shared_limit = data.draw(lock_tables())
    owner, shared, limit, _ = data.draw(requests(entries, shared_limit))
    mine = next((entry for entry in entries if entry.owner == owner), None)
    if mine is not None:
        # a retry asks for what its stored entry holds, made fair for this property
        shared, limit = mine.shared, mine.limit
        entries = [entry._replace(fair=True) if entry is mine else entry for entry in entries]
    assume(decide_or_mismatch(entries, owner, shared, limit, True) is Decision.GRANT)
    my_seq = mine.seq if mine is not None else math.inf
    earlier_fair_waiters = [
        entry
        for entry in entries
        if entry.owner != owner and not entry.granted and entry.fair and entry.seq < my_seq
    ]
    # granting me now is only fair if each of them could be granted now as well
    for waiter in earlier_fair_waiters:
        assert decide(entries, waiter.owner, waiter.shared, waiter.limit, True) is Decision.GRANT


@PROFILE
@given(st.data())
def test_a_non_fair_request_only_waits_on_grants(data: st.DataObject) -> None:
    entries, shared_limit = data.draw(lock_tables())
    owner, shared, limit, _ = data.draw(requests(entries, shared_limit))
    decision = decide_or_mismatch(entries, owner, shared, limit, False)
    assume(decision in (Decision.GRANT, Decision.WAIT))
    without_other_waiters = [entry for entry in entries if entry.granted or entry.owner == owner]
    assert decide(without_other_waiters, owner, shared, limit, False) is decision
    other_grants = [entry.shared for entry in entries if entry.granted and entry.owner != owner]
    assert (decision is Decision.WAIT) == would_block(other_grants, shared, limit)


@PROFILE
@given(st.data())
def test_decide_does_not_depend_on_the_order_of_entries(data: st.DataObject) -> None:
    entries, shared_limit = data.draw(lock_tables())
    owner, shared, limit, fair = data.draw(requests(entries, shared_limit))
    reordered = data.draw(st.permutations(entries))
    assert decide_or_mismatch(reordered, owner, shared, limit, fair) == decide_or_mismatch(
        entries, owner, shared, limit, fair
    )


def grant(owner: str, seq: int, kind: tuple[bool, int] = MUTEX, fair: bool = False) -> Entry:
    return Entry(owner, seq, kind[0], kind[1], fair, seq)


def waiter(owner: str, seq: int, kind: tuple[bool, int] = MUTEX, fair: bool = False) -> Entry:
    return Entry(owner, seq, kind[0], kind[1], fair, None)


def test_an_exclusive_grant_excludes_everything() -> None:
    table = [grant("a", 1)]
    assert decide(table, "b", *MUTEX, False) is Decision.WAIT
    assert decide(table, "b", *READ, False) is Decision.WAIT
    assert decide(table, "b", True, 3, False) is Decision.WAIT


def test_a_shared_grant_excludes_an_exclusive_request() -> None:
    assert decide([grant("a", 1, READ)], "b", *MUTEX, False) is Decision.WAIT


def test_read_locks_are_unlimited() -> None:
    table = [grant(f"r{i}", i, READ) for i in range(50)]
    assert decide(table, "another", *READ, False) is Decision.GRANT


def test_a_semaphore_admits_its_permits_and_no_more() -> None:
    sem = (True, 2)
    assert decide([grant("a", 1, sem)], "b", *sem, False) is Decision.GRANT
    assert decide([grant("a", 1, sem), grant("b", 2, sem)], "c", *sem, False) is Decision.WAIT


def test_held_is_returned_for_any_kind_of_retry() -> None:
    table = [grant("a", 1), waiter("b", 2)]
    assert decide(table, "a", *MUTEX, False) is Decision.HELD
    assert decide(table, "a", *MUTEX, True) is Decision.HELD


def test_an_own_waiter_entry_does_not_block_its_owner() -> None:
    assert decide([waiter("a", 1, fair=True)], "a", *MUTEX, True) is Decision.GRANT


def test_a_non_fair_request_barges_past_waiters() -> None:
    table = [waiter("a", 1, fair=True), waiter("b", 2)]
    assert decide(table, "c", *MUTEX, False) is Decision.GRANT


def test_a_fair_request_queues_behind_earlier_fair_waiters_only() -> None:
    table = [waiter("a", 1, fair=True), waiter("b", 2, fair=True)]
    assert decide(table, "c", *MUTEX, True) is Decision.WAIT  # newcomer: behind both
    assert decide(table, "b", *MUTEX, True) is Decision.WAIT  # behind a
    assert decide(table, "a", *MUTEX, True) is Decision.GRANT  # first in line


def test_a_fair_request_does_not_queue_behind_non_fair_waiters() -> None:
    table = [waiter("a", 1, fair=False)]
    assert decide(table, "b", *MUTEX, True) is Decision.GRANT


def test_fair_shared_waiters_count_against_a_semaphore() -> None:
    sem = (True, 2)
    table = [grant("a", 1, sem), waiter("b", 2, sem, fair=True)]
    # b's permit is spoken for: a fair newcomer must not take it
    assert decide(table, "c", *sem, True) is Decision.WAIT
    assert decide(table, "b", *sem, True) is Decision.GRANT


@pytest.mark.parametrize(
    ("live", "asked"),
    [
        ((True, 2), (True, 3)),
        ((True, 3), (True, 2)),
        (READ, (True, 2)),
        ((True, 2), READ),
    ],
)
def test_shared_requests_with_differing_limits_are_refused(
    live: tuple[bool, int], asked: tuple[bool, int]
) -> None:
    for entry in (grant("a", 1, live), waiter("a", 1, live)):
        with pytest.raises(PermitsMismatch) as info:
            decide([entry], "b", *asked, False)
        assert type(info.value) is PermitsMismatch
        assert isinstance(info.value, ValueError)


def test_limits_of_exclusive_entries_and_of_the_owner_itself_do_not_mismatch() -> None:
    assert decide([waiter("a", 1, MUTEX)], "b", True, 3, False) is Decision.GRANT
    assert decide([waiter("b", 1, (True, 2))], "b", True, 3, False) is Decision.GRANT
    assert decide([grant("a", 1, (True, 2))], "b", *MUTEX, False) is Decision.WAIT


@pytest.mark.parametrize(
    ("holders", "shared", "limit", "blocks"),
    [
        ([], False, 1, False),
        ([], True, 0, False),
        ([False], False, 1, True),
        ([False], True, 0, True),
        ([True], False, 1, True),
        ([True], True, 0, False),
        ([True] * 100, True, 0, False),
        ([True], True, 2, False),
        ([True, True], True, 2, True),
        ([True, True, True], True, 2, True),
    ],
)
def test_would_block(holders: list[bool], shared: bool, limit: int, blocks: bool) -> None:
    assert would_block(holders, shared, limit) is blocks


# ---------------------------------------------------------------------------------------------
# The grant predicate driving a lock table: requests, releases, expiries

KINDS = [MUTEX, READ, (True, 2), (True, 3)]
OWNERS = ["a", "b", "c", "d", "e"]


class LockTable(RuleBasedStateMachine):
    """One lock name as a backend keeps it, with decide() as its only grant rule."""

    def __init__(self) -> None:
        super().__init__()
        self.entries: dict[str, Entry] = {}
        self.next_seq = 1
        self.next_token = 1

    def table(self) -> list[Entry]:
        return list(self.entries.values())

    @rule(owner=st.sampled_from(OWNERS), kind=st.sampled_from(KINDS), fair=st.booleans())
    def request(self, owner: str, kind: tuple[bool, int], fair: bool) -> None:
        mine = self.entries.get(owner)
        # a waiter retrying asks for what it asked for before
        shared, limit = (mine.shared, mine.limit) if mine else kind
        fair = mine.fair if mine else fair
        table = self.table()
        try:
            decision = decide(table, owner, shared, limit, fair)
        except PermitsMismatch:
            assert shared
            assert any(e.shared and e.owner != owner and e.limit != limit for e in table)
            return
        assert decision is reference_decision(table, owner, shared, limit, fair)
        if decision is Decision.HELD:
            assert mine is not None
            assert mine.granted
            return
        if decision is Decision.WAIT:
            if mine is None:
                self.entries[owner] = Entry(owner, self.next_seq, shared, limit, fair, None)
                self.next_seq += 1
            return
        if fair:
            my_seq = mine.seq if mine else math.inf
            for entry in table:
                if entry.owner != owner and entry.fair and not entry.granted and entry.seq < my_seq:
                    overtaken = decide(table, entry.owner, entry.shared, entry.limit, True)
                    assert overtaken is Decision.GRANT, f"{owner} overtook {entry.owner}"
        seq = mine.seq if mine else self.next_seq
        if mine is None:
            self.next_seq += 1
        self.entries[owner] = Entry(owner, seq, shared, limit, fair, self.next_token)
        self.next_token += 1

    @rule(owner=st.sampled_from(OWNERS))
    def release(self, owner: str) -> None:
        self.entries.pop(owner, None)

    @precondition(lambda self: bool(self.entries))
    @rule(data=st.data())
    def expire(self, data: st.DataObject) -> None:
        """A lease (of a grant or of a waiter entry) runs out."""
        owner = data.draw(st.sampled_from(sorted(self.entries)))
        del self.entries[owner]

    @invariant()
    def grants_exclude_each_other(self) -> None:
        assert grants_compatible(self.table())

    @invariant()
    def shared_entries_agree_on_their_limit(self) -> None:
        limits = {entry.limit for entry in self.table() if entry.shared}
        assert len(limits) <= 1

    @invariant()
    def tokens_grow_with_every_grant(self) -> None:
        tokens = [entry.token for entry in self.table() if entry.token is not None]
        assert len(set(tokens)) == len(tokens)
        assert all(token < self.next_token for token in tokens)

    @invariant()
    def a_free_lock_lets_some_waiter_in(self) -> None:
        table = self.table()
        if table and not any(entry.granted for entry in table):
            assert any(
                decide(table, e.owner, e.shared, e.limit, e.fair) is Decision.GRANT for e in table
            )


LockTable.TestCase.settings = settings(
    PROFILE, max_examples=min(PROFILE.max_examples, 80), stateful_step_count=40
)
TestLockTable = LockTable.TestCase


# ---------------------------------------------------------------------------------------------
# Leases, deadlines, backoff

_sent_at = st.floats(0, 1e9)  # a monotonic clock: up to ~30 years since boot
_ttls = st.floats(core.MIN_TTL, core.MAX_TTL)


@PROFILE
@given(_sent_at, st.floats(0, core.MAX_TTL))
def test_the_local_deadline_is_before_the_server_lease_ends(sent_at: float, ttl: float) -> None:
    assert core.local_deadline(sent_at, ttl) < sent_at + ttl


@PROFILE
@given(_sent_at, _ttls)
def test_the_local_deadline_is_after_the_request_was_sent(sent_at: float, ttl: float) -> None:
    assert core.local_deadline(sent_at, ttl) > sent_at


@PROFILE
@given(_sent_at, _ttls)
def test_a_renewal_falls_due_before_the_local_deadline(sent_at: float, ttl: float) -> None:
    delay = core.renew_delay(ttl)
    assert 0 < delay < ttl
    assert sent_at + delay < core.local_deadline(sent_at, ttl)


@PROFILE
@given(_ttls)
def test_the_drift_margin_is_a_small_positive_part_of_the_lease(ttl: float) -> None:
    assert 0 < core.drift_margin(ttl) < ttl


@PROFILE
@given(st.floats(allow_nan=False))
def test_retry_delay_is_between_10ms_and_1s(remaining: float) -> None:
    assert 0.01 <= core.retry_delay(remaining) <= 1.0


@PROFILE
@given(st.floats(0.04, 1e6))
def test_several_renewal_retries_fit_in_the_time_left(remaining: float) -> None:
    assert core.retry_delay(remaining) <= remaining / 4


@pytest.mark.parametrize(
    ("remaining", "delay"), [(-5, 0.01), (0, 0.01), (0.02, 0.01), (0.4, 0.1), (4, 1.0), (1e9, 1.0)]
)
def test_retry_delay_examples(remaining: float, delay: float) -> None:
    assert core.retry_delay(remaining) == pytest.approx(delay)


@PROFILE
@given(
    base=st.floats(1e-4, 1.0),
    spread=st.floats(1.0, 100.0),
    seed=st.integers(0, 2**32),
    count=st.integers(1, 60),
)
def test_backoff_stays_between_base_and_cap(
    base: float, spread: float, seed: int, count: int
) -> None:
    cap = base * spread
    backoff = Backoff(base, cap, random.Random(seed))
    waits = [backoff.next() for _ in range(count)]
    assert waits[0] == base
    assert all(base <= wait <= cap for wait in waits)


@pytest.mark.parametrize("seed", range(5))
def test_backoff_is_jittered_not_constant(seed: int) -> None:
    backoff = Backoff(0.002, 0.05, random.Random(seed))
    waits = [backoff.next() for _ in range(200)]
    assert len(set(waits[1:])) > 20
    assert any(wait < 0.05 for wait in waits[50:])  # keeps jittering once it reached the cap


def test_pollers_started_together_do_not_poll_in_lock_step() -> None:
    first = Backoff(0.002, 0.05, random.Random(1))
    second = Backoff(0.002, 0.05, random.Random(2))
    assert [first.next() for _ in range(10)] != [second.next() for _ in range(10)]


# -- rules tightened after review ------------------------------------------------------------


def test_a_negative_timedelta_is_not_the_wait_for_ever_convention() -> None:
    with pytest.raises(InvalidTimeout):
        core.validate_timeout(timedelta(seconds=-1))
    assert core.validate_timeout(-1) is None


@pytest.mark.parametrize("name", ["a\u2028b", "a\u2029b", "evil\u202etxt.exe", "x\u2066y"])
def test_names_with_line_separators_or_bidi_controls_are_refused(name: str) -> None:
    with pytest.raises(InvalidLockName):
        core.validate_name(name)


@pytest.mark.parametrize("name", ["\ue000private", "\U000e0001tag", "\u0378"])
def test_private_use_and_unassigned_characters_are_data(name: str) -> None:
    # decided by code point, so a name valid on one Python's Unicode is valid on all
    assert core.validate_name(name) == name


@pytest.mark.parametrize(("base", "cap"), [(0.0, 1.0), (-1.0, 1.0), (2.0, 1.0)])
def test_backoff_refuses_a_busy_poll_or_a_base_above_the_cap(base: float, cap: float) -> None:
    with pytest.raises(ValueError, match="backoff"):
        core.Backoff(base, cap, random.Random(1))


# --------------------------------------------------------------------------------------------
# The write plan: what a backend storing rows writes for a request


def plan_or_mismatch(
    entries: Sequence[Entry], owner: str, shared: bool, limit: int, fair: bool, queue: bool
) -> core.WritePlan | type[PermitsMismatch]:
    try:
        return core.plan(entries, owner, shared, limit, fair, queue)
    except PermitsMismatch:
        return PermitsMismatch


def apply_plan(
    entries: Sequence[Entry], plan: core.WritePlan, request: tuple[str, bool, int, bool]
) -> list[Entry]:
    """The table after a backend wrote ``plan``: what a row store does with it, and no more
    (leases are not modelled, so refreshing a waiter changes nothing here)."""
    owner, shared, limit, fair = request
    token = max((e.token for e in entries if e.token is not None), default=0) + 1
    seq = max((e.seq for e in entries), default=0) + 1
    write = plan.write
    if write is core.Write.ADD_GRANT:
        return [*entries, Entry(owner, seq, shared, limit, fair, token)]
    if write is core.Write.ADD_WAITER:
        return [*entries, Entry(owner, seq, shared, limit, fair, None)]
    if write is core.Write.GRANT_WAITER:
        return [e._replace(token=token) if e is plan.mine else e for e in entries]
    return list(entries)


@PROFILE
@given(st.data())
def test_plan_decides_as_decide_and_check_limits(data: st.DataObject) -> None:
    entries, shared_limit = data.draw(lock_tables())
    owner, shared, limit, fair = data.draw(requests(entries, shared_limit))
    queue = data.draw(st.booleans())
    plan = plan_or_mismatch(entries, owner, shared, limit, fair, queue)
    decision = decide_or_mismatch(entries, owner, shared, limit, fair)
    if decision is PermitsMismatch:
        assert plan is PermitsMismatch
        with pytest.raises(PermitsMismatch):
            core.check_limits(entries, owner, shared, limit)
        return
    assert isinstance(plan, core.WritePlan)
    assert plan.decision is decision
    assert plan.mine == next((e for e in entries if e.owner == owner), None)


@PROFILE
@given(st.data())
def test_plan_writes_what_the_decision_needs(data: st.DataObject) -> None:
    entries, shared_limit = data.draw(lock_tables())
    owner, shared, limit, fair = data.draw(requests(entries, shared_limit))
    queue = data.draw(st.booleans())
    plan = plan_or_mismatch(entries, owner, shared, limit, fair, queue)
    assume(plan is not PermitsMismatch)
    assert isinstance(plan, core.WritePlan)
    mine = plan.mine
    expected = {
        (Decision.HELD, True): core.Write.NOTHING,
        (Decision.GRANT, False): core.Write.ADD_GRANT,
        (Decision.GRANT, True): core.Write.GRANT_WAITER,
        (Decision.WAIT, True): core.Write.REFRESH_WAITER,
        (Decision.WAIT, False): core.Write.ADD_WAITER if queue else core.Write.NOTHING,
    }
    assert plan.write is expected[plan.decision, mine is not None]
    if plan.decision is Decision.HELD:
        assert mine is not None
        assert plan.held_token == mine.token
    else:
        with pytest.raises(ValueError, match="no grant already made"):
            _ = plan.held_token


@PROFILE
@given(st.data())
def test_plan_is_idempotent_by_owner(data: st.DataObject) -> None:
    # a retry after a lost reply writes nothing new: the same grant, or the same place in line
    entries, shared_limit = data.draw(lock_tables())
    request = data.draw(requests(entries, shared_limit))
    queue = data.draw(st.booleans())
    first = plan_or_mismatch(entries, *request, queue)
    assume(first is not PermitsMismatch)
    assert isinstance(first, core.WritePlan)
    after = apply_plan(entries, first, request)
    retry = core.plan(after, *request, queue)
    assert apply_plan(after, retry, request) == after
    assert sum(e.owner == request[0] for e in after) <= 1
    if first.decision is not Decision.WAIT:
        assert retry.decision is Decision.HELD
        assert retry.held_token == next(e.token for e in after if e.owner == request[0])
    else:
        assert retry.decision is Decision.WAIT


def test_plan_examples() -> None:
    held = core.plan([grant("a", 1)], "a", *MUTEX, False, True)
    assert (held.write, held.held_token) == (core.Write.NOTHING, 1)
    promoted = core.plan([waiter("a", 1, fair=True)], "a", *MUTEX, True, True)
    assert (promoted.decision, promoted.write) == (Decision.GRANT, core.Write.GRANT_WAITER)
    assert promoted.mine == waiter("a", 1, fair=True)
    assert core.plan([grant("a", 1)], "b", *MUTEX, False, True).write is core.Write.ADD_WAITER
    single_try = core.plan([grant("a", 1)], "b", *MUTEX, False, False)
    assert (single_try.decision, single_try.write) == (Decision.WAIT, core.Write.NOTHING)
    kept = core.plan([grant("a", 1), waiter("b", 2)], "b", *MUTEX, False, False)
    assert kept.write is core.Write.REFRESH_WAITER
    with pytest.raises(PermitsMismatch):
        core.plan([grant("a", 1, (True, 3))], "b", True, 2, False, True)


# -- segmented locks --------------------------------------------------------------------------


@given(st.lists(st.integers(0, 1023), min_size=1, max_size=50, unique=True), st.integers())
def test_spread_is_the_same_cycle_from_a_random_start(candidates: list[int], seed: int) -> None:
    order = core.spread(candidates, random.Random(seed))
    start = candidates.index(order[0])
    assert order == candidates[start:] + candidates[:start]


def test_spread_starts_anywhere() -> None:
    rng = random.Random(7)
    assert {core.spread([0, 1, 2, 3], rng)[0] for _ in range(200)} == {0, 1, 2, 3}


@given(st.integers(1, 1024), st.lists(st.integers(-3, 1030), max_size=8))
def test_a_segment_choice_is_taken_as_given_or_refused(segments: int, chosen: list[int]) -> None:
    valid = bool(chosen) and len(set(chosen)) == len(chosen)
    valid = valid and all(0 <= index < segments for index in chosen)
    if valid:
        assert core.validate_segment_choice(chosen, segments) == tuple(chosen)
    else:
        with pytest.raises(InvalidSegments):
            core.validate_segment_choice(chosen, segments)


def test_segment_names_carry_the_count_and_leave_room_for_it() -> None:
    assert core.segment_names("stock", 3) == ("stock#0/3", "stock#1/3", "stock#2/3")
    assert core.validate_segment_choice(None, 3) == (0, 1, 2)
    core.segment_names("x" * 245, 1024)  # and "#1023/1024": 255 bytes
    with pytest.raises(InvalidLockName):
        core.segment_names("x" * 246, 1024)


@given(st.lists(st.text(alphabet="abcé\u0301xyz", min_size=1, max_size=4), min_size=1, max_size=6))
def test_multi_names_are_canonical_distinct_and_in_one_order_whatever_order_given(
    names: list[str],
) -> None:
    canonical = [unicodedata.normalize("NFC", name) for name in names]
    if len(set(canonical)) < len(canonical):
        with pytest.raises(InvalidLockName, match="given twice"):
            core.multi_names(names)
        return
    taken = core.multi_names(names)
    assert taken == tuple(sorted(canonical))
    assert core.multi_names(list(reversed(names))) == taken


@pytest.mark.parametrize(
    ("names", "says"),
    [
        ("ab", "not one name"),
        (b"ab", "not one name"),
        (7, "not int"),
        ([], "at least one"),
        (["a", "b", "a"], "given twice"),
        (["é", "e\u0301"], "given twice"),  # the same name once normalised
        (["a", ""], "must not be empty"),
        (["a", 3], "must be str"),
    ],
    ids=["str", "bytes", "int", "none", "twice", "twice-normalised", "empty-name", "not-str"],
)
def test_bad_multi_names_are_refused(names: object, says: str) -> None:
    with pytest.raises(InvalidLockName, match=says):
        core.multi_names(names)


# -- what a client says of itself, and an operator's reason ------------------------------------

ONE_LINE_REFUSALS = [
    pytest.param("a\nb", "U+000A", id="newline"),
    pytest.param("a\x1b[31m", "U+001B", id="ansi-escape"),
    pytest.param("x\ud800", "U+D800", id="lone-surrogate"),
    pytest.param("pay\u202egnp.exe", "U+202E", id="bidi-override"),
    pytest.param("a\u2028b", "U+2028", id="line-separator"),
    pytest.param("a\uffff", "U+FFFF", id="noncharacter"),
]


@pytest.mark.parametrize(("text", "character"), ONE_LINE_REFUSALS)
def test_a_holder_or_reason_that_cannot_be_shown_on_one_line_or_stored_is_refused(
    text: str, character: str
) -> None:
    for validate, what in [(core.validate_holder, "holder"), (core.validate_reason, "reason")]:
        with pytest.raises(InvalidArgument, match=rf"^{what} must be .*{re.escape(character)}"):
            validate(text)


def test_a_holder_or_reason_of_any_script_is_kept_as_given() -> None:
    text = "worker-7 on Zürich-東京 (pid 42) 🔒 שלום"
    assert core.validate_holder(text) == text
    assert core.validate_reason(f"  {text}  ") == text


def test_a_lapsed_grant_blocks_everyone_its_owner_included_and_plans_no_write() -> None:
    lapsed = Entry("gone", 1, False, 1, False, token=7, lapsed=True)
    waiter = Entry("next", 2, False, 1, True, token=None)
    for owner in ("next", "new"):
        assert decide([lapsed, waiter], owner, False, 1, True) is Decision.WAIT
    # the owner of a lapsed grant is not given it back (HELD), nor a second entry
    assert decide([lapsed, waiter], "gone", False, 1, False) is Decision.WAIT
    plan = core.plan([lapsed, waiter], "gone", False, 1, False, queue=True)
    assert (plan.decision, plan.write) == (Decision.WAIT, core.Write.NOTHING)
    # a lapsed permit counts against the limit as the live one did
    permit = lapsed._replace(shared=True, limit=2)
    assert decide([permit], "new", True, 2, False) is Decision.GRANT
    taken = Entry("other", 3, True, 2, False, token=8)
    assert decide([permit, taken], "new", True, 2, False) is Decision.WAIT
    # let_through counts it as a grant: nobody behind it goes
    assert core.let_through([lapsed, waiter]) == ([], True)


def test_a_lock_delay_is_seconds_from_zero_to_an_hour() -> None:
    assert core.validate_lock_delay(0) == 0.0
    assert core.validate_lock_delay(timedelta(seconds=2.5)) == 2.5
    assert core.validate_lock_delay(core.MAX_LOCK_DELAY) == core.MAX_LOCK_DELAY
    for bad in (-0.001, core.MAX_LOCK_DELAY + 1, math.nan, math.inf, True, "1", None):
        with pytest.raises(InvalidLockDelay):
            core.validate_lock_delay(bad)
