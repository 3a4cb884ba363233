"""``POST /buy``: sell one item under the lock named "stock"; ``GET /stock``: what is left."""

from __future__ import annotations

import os
import time

from django.conf import settings
from django.db import transaction
from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_GET, require_POST
from shop.locking import locks

import tumbler
from stock.models import Sale, Stock


@require_POST
def buy(request: HttpRequest) -> JsonResponse:
    """200 and what is left, 409 when sold out, 503 when the lock was not had in time."""
    if not settings.STOCK_LOCK:
        return sell_one()  # the demonstration without the lock: it oversells
    try:
        # every process selling from this stock, on any host, takes the same lock
        with locks().lock("stock", timeout=10):
            return sell_one()
    except tumbler.AcquireTimeout:
        return JsonResponse({"error": "busy: try again"}, status=503)


def sell_one() -> JsonResponse:
    """Read the stock, think, write it back minus one: right only one sale at a time."""
    stock = Stock.objects.get()
    if stock.quantity <= 0:
        return JsonResponse({"error": "sold out"}, status=409)
    time.sleep(settings.STOCK_THINK)  # a price lookup, a payment call: another sale reads now
    with transaction.atomic():
        stock.quantity -= 1
        stock.save(update_fields=["quantity"])
        Sale.objects.create(seller=f"pid {os.getpid()}")
    return JsonResponse({"left": stock.quantity})


@require_GET
def level(request: HttpRequest) -> JsonResponse:
    """The stock left, the sales made, and which processes made them."""
    sellers = sorted(set(Sale.objects.values_list("seller", flat=True)))
    return JsonResponse(
        {"stock": Stock.objects.get().quantity, "sales": Sale.objects.count(), "sellers": sellers}
    )
