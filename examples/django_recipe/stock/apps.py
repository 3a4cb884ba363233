from django.apps import AppConfig


class StockConfig(AppConfig):
    name = "stock"
    # no tumbler client here: ready() runs before a prefork server forks (shop/locking.py)
