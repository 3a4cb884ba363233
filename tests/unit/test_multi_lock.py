"""What a multi-lock hands over: every name held, never one lost while a later name was
waited for (on a ManualClock, so the lease runs out exactly when the test says)."""

from __future__ import annotations

import threading
import time
import uuid

import tumbler
from tumbler.testing import ManualClock


def wait_until(condition: object, what: str) -> None:
    end = time.monotonic() + 30
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < end, f"timed out waiting until {what}"
        time.sleep(0.002)


def test_a_name_lost_while_a_later_one_was_waited_for_is_taken_again() -> None:
    clock = ManualClock()
    url = f"memory://multi-{uuid.uuid4().hex}"
    with tumbler.connect(url, clock=clock) as mine, tumbler.connect(url, clock=clock) as other:
        blocker = other.lock("b", ttl=60)
        assert blocker.acquire()
        multi = mine.multi(["a", "b"], ttl=10, renew=False)
        got: dict[str, object] = {}

        def take() -> None:
            got["acquired"] = multi.acquire(timeout=120)
            hold = multi.hold  # per thread: read where it was acquired
            got["held"] = hold is not None and hold.held
            got["tokens"] = dict(hold.tokens) if hold is not None else {}

        taker = threading.Thread(target=take)
        taker.start()
        wait_until(lambda: other.status("b").waiters == 1, "the multi-lock waits for b")
        (first,) = other.status("a").holders
        clock.advance(11)  # a's lease runs out while b is waited for
        blocker.release()
        taker.join(30)
        assert not taker.is_alive()
        assert got["acquired"] is True
        assert got["held"] is True
        tokens = got["tokens"]
        assert isinstance(tokens, dict)
        assert tokens["a"] > first.token  # a taken again, not the lost grant handed over
