"""Time and tokens for a store that the processes of one machine share (a file): the
machine's boot-time clock, which boot it counts from, and the fencing counter's jump after a
reboot.

Such a store times its leases on a clock every process of the machine reads alike and that no
wall-clock step can move: ``CLOCK_BOOTTIME`` on Linux, which also keeps counting through
suspend (elsewhere, the monotonic clock). Its values mean nothing after a reboot, so the store
records :func:`boot_id` beside them: a store written in another boot has only void leases
(their holders are gone), and its fencing counter continues from :func:`token_after_reboot`,
so that tokens stay increasing even if a power loss undid the last writes before it.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

__all__ = ["TOKEN_BOOT_STEP", "boot_id", "boot_time_ns", "token_after_reboot"]

#: how far the fencing counter jumps at a new boot: more grants than one boot could make
#: between two durable writes of the counter
TOKEN_BOOT_STEP = 2**32


def boot_time_ns() -> int:
    """Nanoseconds on the machine's boot-time clock (the same in every process)."""
    if sys.platform == "linux":
        return time.clock_gettime_ns(time.CLOCK_BOOTTIME)
    return time.monotonic_ns()


def boot_id() -> str:
    """Which boot of the machine :func:`boot_time_ns` counts from."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        # no boot id: the boot time to the minute is a fair stand-in
        return f"boot-{round((time.time() - time.monotonic()) / 60)}"


def token_after_reboot(last_token: int) -> int:
    """Where a fencing counter that stood at ``last_token`` in an earlier boot continues: the
    next multiple of :data:`TOKEN_BOOT_STEP` above it."""
    return (last_token // TOKEN_BOOT_STEP + 1) * TOKEN_BOOT_STEP
