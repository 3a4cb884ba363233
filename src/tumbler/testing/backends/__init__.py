"""The backends' harnesses: how tests, the bench and the torture harness run each built-in
backend, one package per backend (``tumbler.testing.backends.<name>``, beside the backend's
runtime package ``tumbler.backends.<name>``), each exposing a
:class:`~tumbler.testing.harness.BackendHarness` as ``HARNESS``.

A harness package holds its backend's launchers of throwaway servers (``server``), the
conformance suite's test targets (``targets``), the bench's view of the store (``bench``) and
the torture harness's deployments (``torture``); its ``__init__`` names them on demand, so that
reading the harnesses imports no launcher, driver or torture harness.
"""
