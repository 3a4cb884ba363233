"""The shop's settings: the smallest Django project that sells from a stock under a tumbler lock.

Run it (see docs/frameworks.md)::

    cd examples/django_recipe
    python manage.py migrate
    echo 100 | python manage.py restock
    python manage.py runserver                       # or: gunicorn shop.wsgi --preload -w 4
    curl -X POST http://127.0.0.1:8000/buy           # 200 {"left": 99}, 409 when sold out

The environment variables below are for the demonstration and its tests; a project of yours
sets these the way it sets the rest of its settings.
"""

from __future__ import annotations

import os
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent

# tumbler: the lock backend's URL, as tumbler.connect() takes it (shop/locking.py reads it)
TUMBLER_URL = os.environ.get("TUMBLER_URL", "sqlite://")

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "not-a-secret: an example with no sessions")
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
INSTALLED_APPS = ["stock"]
MIDDLEWARE: list[str] = []
ROOT_URLCONF = "shop.urls"
WSGI_APPLICATION = "shop.wsgi.application"
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("STOCK_DB", str(BASE_DIR / "db.sqlite3")),
        # the seconds a write waits for another process's (SQLite locks the whole file)
        "OPTIONS": {"timeout": 30},
    }
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
USE_TZ = True
# a failed request's traceback on stderr (Django mails it to ADMINS otherwise, with DEBUG off)
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"django.request": {"handlers": ["console"], "level": "ERROR"}},
}

# The demonstration's knobs: how long a sale thinks between reading the stock and writing it
# back (a price lookup, a payment call), and whether it does so under the lock ("off": the
# same sale without a lock, which oversells: tests/frameworks/test_django.py shows it).
STOCK_THINK = float(os.environ.get("STOCK_THINK", "0.02"))
STOCK_LOCK = os.environ.get("STOCK_LOCK", "on") != "off"
