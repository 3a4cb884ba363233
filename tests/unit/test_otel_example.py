"""examples/otel_prometheus.py runs: its /metrics, on 127.0.0.1, shows tumbler's metrics under
Prometheus's names, and every acquisition its workers made is counted once (granted, timed out
or failed)."""

from __future__ import annotations

import subprocess
import sys
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "otel_prometheus.py"
SOURCE = Path(__file__).resolve().parents[2] / "src"
OPERATIONS = 60


def test_the_example_serves_its_lock_metrics_to_prometheus() -> None:
    process = subprocess.Popen(
        [
            sys.executable,
            str(EXAMPLE),
            "--port=0",
            f"--operations={OPERATIONS}",
            "--workers=3",
            "--locks=1",
            "--hold=0.002",
            "--timeout=0.001",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={"PYTHONPATH": str(SOURCE), "PATH": "/usr/bin:/bin"},
    )
    try:
        assert process.stdout is not None
        serving = process.stdout.readline()
        assert serving.startswith("metrics on http://127.0.0.1:"), serving
        address = serving.split()[-1]
        assert process.stdout.readline() == f"done: {OPERATIONS} acquisitions\n"
        with urllib.request.urlopen(address, timeout=10) as response:
            text = response.read().decode()
    finally:
        process.terminate()
        _, errors = process.communicate(timeout=30)
    assert process.returncode == 0, errors
    samples = {
        (sample.name, _own(sample.labels)): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name.startswith("tumbler_")
    }
    memory = (("tumbler_backend", "memory"),)
    grants = samples[("tumbler_lock_grants_total", memory)]
    timeouts = samples.get(("tumbler_lock_timeouts_total", memory), 0)
    errors_counted = sum(
        v for (name, _), v in samples.items() if name == "tumbler_lock_errors_total"
    )
    assert grants >= 1
    assert grants + timeouts + errors_counted == OPERATIONS
    durations = {
        labels: value
        for (name, labels), value in samples.items()
        if name == "tumbler_lock_acquire_duration_seconds_count"
    }
    assert sum(durations.values()) == OPERATIONS
    assert samples[("tumbler_lock_hold_duration_seconds_count", memory)] <= grants
    assert ("tumbler_lock_waiters", memory) in samples


def _own(labels: dict[str, str]) -> tuple[tuple[str, str], ...]:
    """A sample's labels but the exporter's own (``otel_scope_name`` ...) and a histogram
    bucket's bound."""
    return tuple(
        sorted(
            (name, value)
            for name, value in labels.items()
            if not name.startswith("otel_scope_") and name != "le"
        )
    )
