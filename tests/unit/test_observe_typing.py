"""The observers' types say what the code accepts: a type checker passes an observer written as
the README writes one, in both flavours and with the OpenTelemetry observer, and flags an
observer that is not one and a field an event does not have."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.test_typing import check

pytestmark = pytest.mark.tools  # mypy, the build, the bench: the same on every Python

ACCEPTED = """
import tumbler, tumbler.aio
from tumbler.observe import AcquireGranted, HoldLost, LossReason, Observer
from tumbler.otel import OpenTelemetryObserver

class SlowWaits(Observer):
    def acquire_granted(self, event: AcquireGranted) -> None:
        waited: float = event.wait
        token: int = event.token

    def lost(self, event: HoldLost) -> None:
        reason: LossReason = event.reason
        held: float = event.held

otel = OpenTelemetryObserver(lock_names=lambda name: name.split(":")[0])
locks = tumbler.connect("memory://", observers=[SlowWaits(), otel])
locks = tumbler.connect("memory://", observers=(SlowWaits(),))

async def main() -> None:
    alocks = await tumbler.aio.connect("memory://", observers=[SlowWaits()])
"""

REFUSED = """
import tumbler
from tumbler.observe import AcquireStarted, Observer

tumbler.connect("memory://", observers=[object()])

class Wrong(Observer):
    def acquire_started(self, event: AcquireStarted) -> None:
        print(event.token)
"""


@pytest.mark.slow
def test_observers_as_the_readme_writes_them_type_check(tmp_path: Path) -> None:
    output, status = check(tmp_path, ACCEPTED)
    assert status == 0, output


@pytest.mark.slow
def test_what_is_not_an_observer_or_an_events_field_is_flagged(tmp_path: Path) -> None:
    output, status = check(tmp_path, REFUSED)
    assert status == 1, output
    assert 'List item 0 has incompatible type "object"; expected "Observer"' in output, output
    assert '"AcquireStarted" has no attribute "token"' in output, output
