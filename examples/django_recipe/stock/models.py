"""One stock level, and a row for every sale made from it."""

from django.db import models


class Stock(models.Model):
    """The one stock the shop sells from (``manage.py restock`` makes it)."""

    quantity = models.IntegerField()


class Sale(models.Model):
    """One item sold: an oversold stock has more of these than it ever held."""

    #: which process sold it ("pid 1234"): under a prefork server, which worker
    seller = models.CharField(max_length=100)
