"""The backends' kit: a driver's errors as tumbler's, by a table of rows (kit.errors)."""

from __future__ import annotations

import pytest

from tumbler import BackendUnavailable, ConfigurationError, PermissionDenied, TumblerError
from tumbler.backends.kit.errors import ErrorMap, Rule, Site, mentions

URL = "example://user@127.0.0.1:1/db"


class DriverError(Exception):
    """What a driver raises."""


class Refused(DriverError):
    """... and a subclass of it."""


class Elsewhere(Exception):
    """An error of the driver's that no row takes, or a bug's."""


class FileSite(Site):
    __slots__ = ("path",)

    def __init__(self, backend: str, path: str) -> None:
        super().__init__(backend)
        self.path = path


def raised(errors: ErrorMap, error: Exception, site: Site | None = None) -> BaseException:
    """What raising ``error`` inside ``errors.translating`` raises."""
    try:
        with errors.translating(site or Site(URL, "job")):
            raise error
    except Exception as caught:  # what it raises is what the test looks at
        return caught
    raise AssertionError("unreachable: the block raises")


def test_a_row_makes_its_class_with_its_message_the_lock_and_the_backend() -> None:
    errors = ErrorMap(Rule(DriverError, BackendUnavailable, "cannot reach it: {error}"))
    cause = DriverError("no route")
    error = raised(errors, cause)
    assert type(error) is BackendUnavailable
    assert error.message == "cannot reach it: no route"
    assert error.lock_name == "job"
    assert error.backend == URL
    assert error.__cause__ is cause


def test_the_first_row_that_takes_an_error_decides() -> None:
    errors = ErrorMap(
        Rule(Refused, PermissionDenied, "refused: {error}"),
        Rule(DriverError, BackendUnavailable, "failed: {error}"),
        Rule(Refused, ConfigurationError, "never: {error}"),
    )
    assert type(raised(errors, Refused("no"))) is PermissionDenied
    assert type(raised(errors, DriverError("down"))) is BackendUnavailable


def test_a_row_with_when_takes_only_the_errors_it_holds_for() -> None:
    errors = ErrorMap(
        Rule(DriverError, PermissionDenied, "refused: {error}", when=mentions("NOAUTH", "DENIED")),
        Rule(DriverError, BackendUnavailable, "failed: {error}"),
    )
    assert type(raised(errors, DriverError("DENIED to you"))) is PermissionDenied
    assert type(raised(errors, DriverError("NOAUTH"))) is PermissionDenied
    assert type(raised(errors, DriverError("denied"))) is BackendUnavailable


def test_a_message_names_the_maps_text_the_class_and_the_site() -> None:
    errors = ErrorMap(
        Rule(DriverError, BackendUnavailable, "{kind} [{text}] at {site.backend}: {error!r}"),
        text=lambda error: str(error).upper(),
    )
    error = raised(errors, Refused("no"))
    assert isinstance(error, TumblerError)
    assert error.message == f"Refused [NO] at {URL}: Refused('no')"


def test_a_rows_function_makes_the_error_from_the_driver_error_and_the_site() -> None:
    seen: list[tuple[Exception, Site]] = []

    def unusable(error: DriverError, site: FileSite) -> Exception:
        seen.append((error, site))
        return ConfigurationError(f"cannot use {site.path}: {error}", backend=site.backend)

    errors = ErrorMap(Rule(DriverError, unusable))
    cause = DriverError("gone")
    site = FileSite(URL, "/var/locks.db")
    error = raised(errors, cause, site)
    assert type(error) is ConfigurationError
    assert error.message == "cannot use /var/locks.db: gone"
    assert error.lock_name is None
    assert error.__cause__ is cause
    assert seen == [(cause, site)]


def test_a_function_may_make_an_error_that_is_not_a_tumbler_error() -> None:
    class Busy(Exception):
        pass

    errors = ErrorMap(Rule(DriverError, lambda error, site: Busy()))
    cause = DriverError("locked")
    error = raised(errors, cause)
    assert type(error) is Busy
    assert error.__cause__ is cause


@pytest.mark.parametrize("error", [Elsewhere("a bug"), DriverError("what no row's when holds for")])
def test_an_error_no_row_takes_goes_through_untouched(error: Exception) -> None:
    errors = ErrorMap(
        Rule(Refused, PermissionDenied, "refused"),
        Rule(DriverError, BackendUnavailable, "failed", when=mentions("down")),
    )
    assert raised(errors, error) is error
    assert error.__cause__ is None
    assert errors.translate(error, Site(URL)) is None


def test_catches_every_class_a_row_takes_once() -> None:
    errors = ErrorMap(
        Rule(Refused, PermissionDenied, "refused"),
        Rule((DriverError, OSError), BackendUnavailable, "failed"),
        Rule(OSError, BackendUnavailable, "again"),
    )
    assert errors.catches == (Refused, DriverError, OSError)


def test_tumbler_error_gives_a_rows_tumbler_error() -> None:
    errors = ErrorMap(Rule(DriverError, BackendUnavailable, "failed: {error}"))
    error = errors.tumbler_error(DriverError("down"), Site(URL, "job"))
    assert type(error) is BackendUnavailable
    assert str(error) == f"failed: down (lock 'job') [{URL}]"


@pytest.mark.parametrize(
    ("errors", "error"),
    [
        (ErrorMap(Rule(DriverError, BackendUnavailable, "failed")), Elsewhere("a bug")),
        (ErrorMap(Rule(DriverError, lambda error, site: KeyError(1))), DriverError("a bug")),
    ],
    ids=["no-row-takes-it", "its-row-makes-another-error"],
)
def test_tumbler_error_refuses_an_error_the_table_makes_no_tumbler_error_of(
    errors: ErrorMap, error: Exception
) -> None:
    kind = type(error).__name__
    with pytest.raises(TypeError, match=f"the table makes no tumbler error of {kind}: a bug"):
        errors.tumbler_error(error, Site(URL))


def test_a_row_whose_message_names_an_unknown_field_is_refused_when_made() -> None:
    with pytest.raises(ValueError, match=r"names code; it may name error, kind, site, text"):
        Rule(DriverError, BackendUnavailable, "failed ({code}): {error.args[0]}")


def test_a_row_with_a_function_takes_no_message() -> None:
    with pytest.raises(TypeError, match="no message of its own"):
        Rule(DriverError, lambda error, site: BackendUnavailable("x"), "failed: {error}")


def test_a_row_becomes_a_tumbler_error_class_or_a_function() -> None:
    with pytest.raises(TypeError, match="a row becomes a tumbler error, not ValueError"):
        Rule(DriverError, ValueError)  # type: ignore[arg-type]
