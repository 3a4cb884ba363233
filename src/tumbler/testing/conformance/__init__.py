"""tumbler's conformance suite: the cases every backend must pass, shipped in the package.

Run it against any backend URL, from any directory, with pytest and pytest-asyncio installed::

    pytest --pyargs tumbler.testing.conformance --tumbler-url sqlite:///some/dir/locks.db

The options, the backends the cases run on and the capability gates come from
:mod:`tumbler.testing.conformance.plugin` (a pytest plugin registered by tumbler's ``pytest11``
entry point). The lock cases are written once for asyncio in ``_async/`` and generated for
threads in ``_sync/``; a case that needs a capability not every backend declares is marked
``@pytest.mark.tumbler_requires(NAME)`` and skipped, naming it, where it is missing.

A third-party backend joins by registering its descriptor (entry point group
``tumbler.backends``) with its declared capabilities and an ``isolate`` function, then running
this suite against its URL; it never edits the suite.
"""
