"""How hard the property tests search, chosen with ``TUMBLER_HYPOTHESIS``.

``tumbler-unit`` (the default): the examples each test asks for, which keeps a run fast.
``tumbler-unit-thorough``: a long search (a run before a release, or after touching the grant
rule or a backend's statements). ``tumbler-unit-light``: a fifth, for CI's quick tiers on the
other Pythons, which show that the code runs there; how hard it is to break is the full run's.
"""

from __future__ import annotations

import os

from hypothesis import settings

DEPTH = os.environ.get("TUMBLER_HYPOTHESIS", "tumbler-unit")
if DEPTH not in ("tumbler-unit", "tumbler-unit-thorough", "tumbler-unit-light"):
    raise ValueError(f"TUMBLER_HYPOTHESIS={DEPTH!r}: no such depth")
THOROUGH = DEPTH == "tumbler-unit-thorough"

settings.register_profile("tumbler-unit", max_examples=150, deadline=None)
settings.register_profile("tumbler-unit-thorough", max_examples=5000, deadline=None)
settings.register_profile("tumbler-unit-light", max_examples=30, deadline=None)
#: the depth's settings, for tests that take the default number of examples
PROFILE = settings.get_profile(DEPTH)


def examples(asked: int) -> int:
    """The examples for a test that asks for ``asked``: a fifth (at least 20) when light."""
    return max(20, asked // 5) if DEPTH == "tumbler-unit-light" else asked
