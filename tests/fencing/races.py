"""What the fences' tests share: bad input, and two holders racing for one resource."""

from __future__ import annotations

import threading
from collections.abc import Callable

BAD_TOKENS: list[object] = [0, -3, True, False, 2.0, "5", None, 2**63]
BAD_RESOURCES: list[object] = ["", None, 7, b"account:7", "a\0b", "x" * 256]


def race(holder: Callable[[int, str], None], resource: str) -> dict[int, BaseException | None]:
    """Run ``holder(token, resource)`` for tokens 5 and 4 in two threads let go together; what
    each raised (None: nothing), by token."""
    start = threading.Barrier(2)
    outcomes: dict[int, BaseException | None] = {}

    def run(token: int) -> None:
        start.wait()
        try:
            holder(token, resource)
            outcomes[token] = None
        except BaseException as error:  # the test looks at it
            outcomes[token] = error

    threads = [threading.Thread(target=run, args=(token,)) for token in (5, 4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outcomes
