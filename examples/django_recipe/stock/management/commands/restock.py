"""``manage.py restock``: add the supplier's deliveries to the stock, one run at a time.

    python manage.py restock < deliveries.txt      # one quantity a line

A job that must not run twice at once, though cron starts it on two hosts, or an operator
starts it while the nightly run is still going: it takes the lock "restock" without waiting
(``acquire(timeout=0)``). A second run exits at once, with status 75 (EX_TEMPFAIL: try again
later), naming the run that holds it.
"""

from __future__ import annotations

import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from shop.locking import locks

from stock.models import Stock

# sysexits(3)'s EX_TEMPFAIL, as `tumbler run` exits when the lock is held elsewhere
BUSY = 75


class Command(BaseCommand):
    help = (
        "Add the deliveries read from stdin (one quantity a line) to the stock; one run at a time."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        job = locks().lock("restock")
        if not job.acquire(timeout=0):
            holders = [holder.holder for holder in locks().status("restock").holders]
            raise CommandError(
                f"restock is running already, held by {', '.join(holders) or 'a run just ended'}",
                returncode=BUSY,
            )
        try:  # the lease is renewed while this runs: a slow feed may take as long as it takes
            self.stdout.write("restocking: reading the deliveries from stdin")
            delivered = sum(int(line) for line in sys.stdin if line.strip())
            # the stock's own lock too: a sale must not write between this read and write
            with locks().lock("stock", timeout=30):
                stock = Stock.objects.first() or Stock(quantity=0)
                stock.quantity += delivered
                stock.save()
        finally:
            job.release()
        self.stdout.write(f"restocked: {delivered} delivered, {stock.quantity} in stock")
