"""The tumbler client of this process: ``locks()``, made on first use in each process.

Why not ``LOCKS = tumbler.connect(settings.TUMBLER_URL)`` at module level, or in an
``AppConfig.ready()``: a client belongs to the process that made it, and one made before
``os.fork()`` raises ``ForkedClient`` in the child, whose copies of the parent's holds are not
held. A prefork server (gunicorn with ``--preload``, uWSGI without ``lazy-apps``) sets Django
up in its master and then forks its workers: a client made at import or in ``ready()`` would
be the master's, and every worker's first lock would raise ``ForkedClient``.

So ``locks()`` connects on first use, and again whenever the process id is not the one that
connected: one client per process, shared by the process's threads, whether the process is a
prefork server's worker, ``manage.py runserver`` (a thread per request) or a management
command. Nothing needs to close it: a client still open when its process exits releases what
it holds on the way out (a prefork server's hook may close it sooner: docs/frameworks.md).
"""

from __future__ import annotations

import os
import threading

from django.conf import settings

import tumbler

_client: tumbler.Locks | None = None
_client_pid = 0
# two threads' first requests must not both connect; a fork while a thread was connecting
# would leave the child's copy of the guard held for ever, hence a fresh one in every child
_connecting = threading.Lock()


def _new_guard() -> None:
    global _connecting
    _connecting = threading.Lock()


os.register_at_fork(after_in_child=_new_guard)


def locks() -> tumbler.Locks:
    """This process's tumbler client, connected to ``settings.TUMBLER_URL`` on first use."""
    global _client, _client_pid
    client = _client
    if client is not None and _client_pid == os.getpid():
        return client
    with _connecting:
        if _client is None or _client_pid != os.getpid():
            # the parent's client, if this is a fork, is left alone: it is the parent's
            _client = tumbler.connect(settings.TUMBLER_URL)
            _client_pid = os.getpid()
        return _client
