"""``jsonfile://``: an example tumbler backend kept outside tumbler, in a package of its own.

tumbler finds it by the entry point this distribution declares (``pyproject.toml``)::

    [project.entry-points."tumbler.backends"]
    jsonfile = "tumbler_jsonfile:DESCRIPTOR"

so that ``tumbler.connect("jsonfile:///path/store.json")`` opens it, and the conformance suite
runs against it with ``pytest --pyargs tumbler.testing.conformance --tumbler-url URL``. This
module must stay cheap to import: tumbler reads ``DESCRIPTOR`` to find the scheme's backend,
and only then imports :mod:`.backend` (the ``opener``). The backend, its URL grammar and what
it promises are in :mod:`.backend`; its test harness (optional: a URL is enough for the
conformance suite) in :mod:`.testing`, registered by an entry point of its own::

    [project.entry-points."tumbler.harnesses"]
    jsonfile = "tumbler_jsonfile.testing:HARNESS"

so that ``--tumbler-target jsonfile`` runs the suite on files it makes itself.
"""

from __future__ import annotations

from tumbler.backends.contract import Capabilities
from tumbler.backends.descriptor import BackendDescriptor, call_on_demand

__all__ = ["CAPABILITIES", "DESCRIPTOR"]

CAPABILITIES = Capabilities(
    # Nothing tells another process that the file changed: waiters poll (2 to 50 ms apart).
    # Waiters of this process are woken at once by its own releases (see backend.watch).
    push_wakeups=False,
    # Writes are atomic (a new file renamed over the old), but not synced to the disk: a power
    # loss may undo the last grants, and with them the last tokens handed out.
    durable_fencing=False,
    # Every process reads the leases on one clock, the machine's boot-time clock.
    server_clock=True,
    # Each poll refreshes the waiter's entry; 1 s is 20 polls at the longest backoff, and a
    # waiter that died holds up a fair line for at most this long.
    waiter_ttl=1.0,
    poll_base=0.002,
    poll_cap=0.05,
    # A call is one flock, a read and a rewrite of a small file: well under a millisecond,
    # but it may wait for other processes' calls. Renewals come at ttl/3, so 0.5 s leaves
    # a third of a second for such waits.
    min_ttl=0.5,
    # flock(2) excludes the processes of one machine; the file must not be on a network
    # file system.
    scope="host",
)


DESCRIPTOR = BackendDescriptor(
    name="jsonfile",
    schemes=("jsonfile",),
    opener=f"{__name__}.backend",
    capabilities=CAPABILITIES,
    summary="one JSON file guarded by flock: the processes of one machine (an example)",
    url_form="jsonfile:///path/store.json",
    # in the opener's module, which imports this one: named here, imported when called
    isolate=call_on_demand(f"{__name__}.backend", "isolate"),
)
