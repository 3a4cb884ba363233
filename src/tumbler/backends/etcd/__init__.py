"""The etcd backend (``etcd://``, ``etcds://``), under way: so far the test servers
(:mod:`.server`). Its descriptor comes with the backend, once the conformance suite passes."""
