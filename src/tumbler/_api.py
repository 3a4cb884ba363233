"""The blocking API's entry points, :func:`tumbler.connect` and :func:`tumbler.prepare`."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from . import _core as core
from . import _observing
from ._core import DEFAULT_TTL, validate_holder, validate_ttl
from ._observing import checked
from ._sync.client import Locks

if TYPE_CHECKING:
    from .backends.contract import Backend

__all__ = ["connect", "prepare"]


def connect(
    url: str | object | None = None,
    *,
    default_ttl: core.Seconds = DEFAULT_TTL,
    observers: Iterable[_observing.Observer] = (),
    holder: str | None = None,
    **options: object,
) -> Locks:
    """Open a lock client on the backend that ``url`` names, or on the servers a client the
    application configured already connects to.

    ``url`` defaults to ``$TUMBLER_URL``, else ``sqlite://`` (a file in the user's cache
    directory). The scheme picks the backend: ``sqlite://``, ``memory://``, and those of
    installed extras. ``options`` go to the backend (``clock=`` for ``memory://``).

    In place of a URL, ``url`` may be a blocking client of a driver: a ``redis.Redis`` (one
    that Sentinels manage too: tumbler then asks the same ``Sentinel`` for the master) or
    ``redis.cluster.RedisCluster`` (tumbler copies its servers, TLS, credentials or
    ``credential_provider`` and timeouts; a client without a ``socket_timeout`` gets 5 s), a
    ``psycopg_pool.ConnectionPool`` (its connection string and libpq arguments), or a kazoo
    ``KazooClient`` (its ensemble, chroot, digest user, TLS and session timeout). tumbler
    then connects to the same servers the same way over connections (a session) of its own,
    and takes the options a URL would carry that a client does not say (Redis: ``prefix``,
    ``max_connections``, ``max_waiters``, ``wait_replicas``, ``wait_timeout``; PostgreSQL:
    ``schema``, the timeouts, ``max_connections``, ``max_waiters``, ``wakeups``, ``pooler``;
    ZooKeeper: ``base``, under the client's chroot, ``connect_timeout``,
    ``request_timeout``, ``max_waiters``).
    The client stays the caller's: closing the lock client does not close it. An asyncio
    client goes to ``tumbler.aio.connect``.
    ``default_ttl`` is the lease of locks made without a ``ttl``. ``observers``: instances of
    ``tumbler.observe.Observer`` subclasses, told of every acquisition, release, renewal and
    loss (``tumbler.otel.OpenTelemetryObserver`` makes OpenTelemetry metrics and spans of
    them); none by default, at no cost. ``holder``: how this client describes itself to
    operators, kept with its grants and waiter entries and shown by ``status`` (one line of
    at most 200 characters; default ``HOST pid=PID``).

    Raises ``UnknownScheme``, ``InvalidURL``, ``MissingDependency`` (naming the extra to
    install), ``InvalidArgument`` (a client of no backend, of the other flavour, or an option
    the backend does not take), ``ConfigurationError``, ``PermissionDenied`` or
    ``BackendUnavailable``.
    """
    from ._connect import backend_module, client_module

    default_ttl = validate_ttl(default_ttl)  # before anything is opened or created
    watchers = checked(observers)
    if holder is not None:
        holder = validate_holder(holder)
    backend: Backend
    if url is None or isinstance(url, str):
        module, parsed = backend_module(url, options)
        backend = module.open_sync(parsed, **options)
    else:
        backend = client_module(url, options).open_client_sync(url, **options)
    try:
        return Locks(backend, default_ttl=default_ttl, observers=watchers, holder=holder)
    except BaseException:
        backend.close()
        raise


def prepare(url: str | None = None) -> str:
    """Make what the backend at ``url`` needs before its first use, if anything is missing,
    and say so in one line for a person: the URL (without its password), then what was made,
    what was there already, or that the backend needs nothing made.

    ``url`` defaults as for :func:`connect`. Idempotent, and safe while clients use the
    backend (PostgreSQL: the schema the URL names, its tables, sequence and functions; a
    client makes them on first use too, so this is for a role that may create them when the
    application's own role may not). Raises what :func:`connect` raises.
    """
    from .backends import prepare as prepare_backend
    from .backends import resolve_url

    descriptor, done = prepare_backend(url)
    if done is None:
        done = f"the {descriptor.name} backend needs nothing made before first use"
    return f"{resolve_url(url).redacted}: {done}"
