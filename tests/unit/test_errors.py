"""The error hierarchy: one base class, the builtin bases callers already catch, messages."""

from __future__ import annotations

import pickle

import pytest

import tumbler
from tumbler import errors
from tumbler.errors import TumblerError

ALL_ERRORS = [getattr(errors, name) for name in errors.__all__]

# Errors whose constructor is that of TumblerError (message, lock_name=, backend=).
PLAIN_ERRORS = [
    error
    for error in ALL_ERRORS
    if error not in (errors.UnknownScheme, errors.MissingDependency, errors.StaleToken)
]

# The documented builtin base of each error (module docstring of tumbler.errors).
BUILTIN_BASES: dict[type[TumblerError], type[Exception]] = {
    errors.AcquireTimeout: TimeoutError,
    errors.NotHeld: RuntimeError,
    errors.AlreadyHeld: RuntimeError,
    errors.ClientClosed: RuntimeError,
    errors.ForkedClient: RuntimeError,
    errors.InvalidArgument: ValueError,
    errors.InvalidLockName: ValueError,
    errors.InvalidTTL: ValueError,
    errors.InvalidTimeout: ValueError,
    errors.InvalidPermits: ValueError,
    errors.InvalidURL: ValueError,
    errors.UnknownScheme: ValueError,
    errors.PermitsMismatch: ValueError,
    errors.MissingDependency: ImportError,
    errors.PermissionDenied: PermissionError,
    errors.BackendUnavailable: ConnectionError,
}

# The documented tumbler parent of each error.
PARENTS: dict[type[TumblerError], type[TumblerError]] = {
    errors.InvalidLockName: errors.InvalidArgument,
    errors.InvalidTTL: errors.InvalidArgument,
    errors.InvalidTimeout: errors.InvalidArgument,
    errors.InvalidPermits: errors.InvalidArgument,
    errors.InvalidURL: errors.InvalidArgument,
    errors.UnknownScheme: errors.InvalidURL,
    errors.MissingDependency: errors.ConfigurationError,
    errors.HoldInDoubt: errors.LockLost,
    errors.OutOfConnections: errors.BackendUnavailable,
}


def make(error: type[TumblerError]) -> TumblerError:
    """An instance of any error, with a lock name and a backend where it takes them."""
    if error is errors.UnknownScheme:
        return errors.UnknownScheme("nosuch", ["sqlite", "memory"])
    if error is errors.MissingDependency:
        return errors.MissingDependency("redis", "redis", "redis")
    if error is errors.StaleToken:
        return errors.StaleToken("account:7", 4, 5)
    return error("it went wrong", lock_name="orders:42", backend="sqlite:///tmp/locks.db")


@pytest.mark.parametrize("error", ALL_ERRORS, ids=lambda error: error.__name__)
def test_every_error_is_a_tumbler_error(error: type[Exception]) -> None:
    assert issubclass(error, TumblerError)
    assert issubclass(error, Exception)
    assert isinstance(make(error), TumblerError)


def test_every_error_class_is_listed() -> None:
    defined = {
        name
        for name, value in vars(errors).items()
        if isinstance(value, type) and issubclass(value, BaseException)
    }
    assert defined == set(errors.__all__)


def test_every_error_is_re_exported_from_tumbler() -> None:
    for name in errors.__all__:
        assert getattr(tumbler, name) is getattr(errors, name)
        assert name in tumbler.__all__


@pytest.mark.parametrize(
    ("error", "base"), list(BUILTIN_BASES.items()), ids=lambda item: getattr(item, "__name__", "")
)
def test_errors_are_also_the_builtin_exception_callers_catch(
    error: type[TumblerError], base: type[Exception]
) -> None:
    assert issubclass(error, base)
    with pytest.raises(base):
        raise make(error)


@pytest.mark.parametrize(
    "error",
    [errors.LockLost, errors.StaleToken, errors.ConfigurationError, errors.TumblerError],
    ids=lambda error: error.__name__,
)
def test_errors_without_a_builtin_base_are_not_value_or_runtime_errors(
    error: type[TumblerError],
) -> None:
    # LockLost must not be swallowed by an "except RuntimeError" meant for something else
    for builtin in (ValueError, RuntimeError, TimeoutError, OSError, ImportError):
        assert not issubclass(error, builtin)


@pytest.mark.parametrize(
    ("error", "parent"), list(PARENTS.items()), ids=lambda error: error.__name__
)
def test_the_documented_hierarchy(error: type[TumblerError], parent: type[TumblerError]) -> None:
    assert issubclass(error, parent)


@pytest.mark.parametrize("error", PLAIN_ERRORS, ids=lambda error: error.__name__)
def test_the_message_names_the_lock_and_the_backend(error: type[TumblerError]) -> None:
    instance = make(error)
    text = str(instance)
    assert text.startswith("it went wrong")
    assert "'orders:42'" in text
    assert "sqlite:///tmp/locks.db" in text
    assert instance.message == "it went wrong"
    assert instance.lock_name == "orders:42"
    assert instance.backend == "sqlite:///tmp/locks.db"


def test_the_message_is_not_padded_when_it_already_names_them() -> None:
    error = errors.NotHeld(
        "lock 'a' is not held on sqlite:///x.db", lock_name="a", backend="sqlite:///x.db"
    )
    assert str(error) == "lock 'a' is not held on sqlite:///x.db"


def test_the_message_alone_when_there_is_no_lock_or_backend() -> None:
    assert str(errors.ClientClosed("the client is closed")) == "the client is closed"


def test_unknown_scheme_lists_the_known_schemes_sorted() -> None:
    error = errors.UnknownScheme("nosuch", ["sqlite", "memory"])
    assert error.known == ["memory", "sqlite"]
    assert error.scheme == "nosuch"
    assert "memory, sqlite" in str(error)


def test_missing_dependency_names_the_extra_and_the_package() -> None:
    error = errors.MissingDependency("etcd", "etcd", "etcd3")
    assert "pip install 'tumbler-locks[etcd]'" in str(error)
    assert "'etcd3'" in str(error)
    assert error.extra == "etcd"
    assert error.missing == "etcd3"


def test_a_stale_token_says_what_was_refused_and_what_it_means() -> None:
    error = errors.StaleToken("account:7", 4, 5)
    assert (error.resource, error.token, error.highest) == ("account:7", 4, 5)
    text = str(error)
    assert "'account:7' refused fencing token 4 (it has accepted 5)" in text
    assert "a newer holder of the lock has written" in text
    assert "lease ran out" in text
    # the same write with the same token would be refused again: not a busy resource
    assert error.exit_status == errors.EX_LOCK_LOST
    assert not isinstance(error, errors.LockLost)


def test_a_stale_token_whose_highest_is_unknown_does_not_make_one_up() -> None:
    error = errors.StaleToken("account:7", 4)
    assert error.highest is None
    assert "None" not in str(error)


@pytest.mark.parametrize("error", ALL_ERRORS, ids=lambda error: error.__name__)
def test_errors_survive_pickling(error: type[TumblerError]) -> None:
    # Errors cross process boundaries (multiprocessing, concurrent.futures): they must come
    # back as the same class with the same message and attributes.
    original = make(error)
    restored = pickle.loads(pickle.dumps(original))
    assert type(restored) is type(original)
    assert str(restored) == str(original)
    assert restored.lock_name == original.lock_name
    assert restored.backend == original.backend
