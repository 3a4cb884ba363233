"""gunicorn's settings for stock_app.py: prefork workers, each with its own tumbler client.

gunicorn reads this file in its master. The hooks run in each worker, after the fork.
"""

from gunicorn.arbiter import Arbiter
from gunicorn.workers.base import Worker

bind = "127.0.0.1:8000"
workers = 4
# Import the app once, in the master, before forking (faster starts, shared memory): the
# reason a client made at import would be the master's, and ForkedClient in every worker.
preload_app = True


def post_fork(server: Arbiter, worker: Worker) -> None:
    import stock_app

    stock_app.connect_locks()  # this worker's own client, made after the fork


def worker_exit(server: Arbiter, worker: Worker) -> None:
    import stock_app

    stock_app.close_locks()  # releases what the worker still holds, before it is gone
