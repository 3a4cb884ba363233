"""examples/fastapi_recipe.py runs in FastAPI: the client's life is the app's lifespan, concurrent
sales under the lock sell exactly the stock (and oversell without it), and a restock that finds
the lock busy answers 503 at once. On SQLite locks and on a real Redis server."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import secrets
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest
from asgi_lifespan import LifespanManager

import tumbler.aio
from tumbler.errors import ClientClosed

pytestmark = pytest.mark.asyncio  # async-only: the recipe is an asyncio app

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "fastapi_recipe.py"
ITEMS = 10
BUYERS = 40


def load_recipe() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fastapi_recipe", EXAMPLE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


recipe = load_recipe()


@pytest.fixture(params=["sqlite", "redis"])
def lock_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite://{tmp_path}/locks.db"
    server = request.getfixturevalue("redis_server")
    # a prefix of the test's own on the session's shared server
    return f"{server.url}?prefix=fastapi-{secrets.token_hex(4)}"


@pytest.fixture
def stock_path(tmp_path: Path) -> str:
    return str(tmp_path / "stock.db")


@contextlib.asynccontextmanager
async def serving(app: Any) -> AsyncIterator[httpx.AsyncClient]:
    """The app with its lifespan run (startup before the first request, shutdown at the end),
    and an HTTP client that calls it in this event loop."""
    async with LifespanManager(app) as manager:
        transport = httpx.ASGITransport(app=manager.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://shop") as client:
            yield client


async def buy_all(client: httpx.AsyncClient) -> list[int]:
    """BUYERS sales at once; their status codes."""
    responses = await asyncio.gather(*(client.post("/buy") for _ in range(BUYERS)))
    return [response.status_code for response in responses]


class NoLocks:
    """A client whose locks never exclude: the recipe with its lock taken out."""

    def lock(self, name: str, **options: object) -> contextlib.nullcontext[None]:
        return contextlib.nullcontext()


async def test_concurrent_sales_under_the_lock_sell_exactly_the_stock(
    lock_url: str, stock_path: str
) -> None:
    app = recipe.create_app(lock_url, stock_path, items=ITEMS, think=0.01)
    async with serving(app) as client:
        codes = await buy_all(client)
        left = await app.state.stock.read()
    assert sorted(codes) == [200] * ITEMS + [409] * (BUYERS - ITEMS)
    assert left == 0


async def test_without_the_lock_the_same_sales_oversell(lock_url: str, stock_path: str) -> None:
    app = recipe.create_app(lock_url, stock_path, items=ITEMS, think=0.01)
    app.dependency_overrides[recipe.get_locks] = NoLocks
    async with serving(app) as client:
        codes = await buy_all(client)
    # sales read the same count and each wrote it back less one: more sold than there was
    assert codes.count(200) > ITEMS


async def test_the_lifespan_opens_the_client_and_closes_it_at_shutdown(
    lock_url: str, stock_path: str
) -> None:
    app = recipe.create_app(lock_url, stock_path, items=ITEMS)
    async with serving(app) as client:
        locks = app.state.locks
        assert (await client.post("/buy")).json() == {"left": ITEMS - 1}
        await locks.status("stock")  # open while the app runs
    with pytest.raises(ClientClosed):
        await locks.status("stock")


async def test_a_restock_answers_busy_while_another_holder_has_the_lock(
    lock_url: str, stock_path: str
) -> None:
    app = recipe.create_app(lock_url, stock_path, items=ITEMS)
    # another instance of the service: a client of its own, on the same backend
    async with serving(app) as client, await tumbler.aio.connect(lock_url) as other:
        async with other.lock("stock"):
            busy = await client.post("/restock", params={"items": 5})
            assert busy.status_code == 503
            assert busy.headers["Retry-After"] == "1"
            assert await app.state.stock.read() == ITEMS
        done = await client.post("/restock", params={"items": 5})
        assert done.status_code == 200
        assert done.json() == {"left": ITEMS + 5}


async def test_a_sale_that_cannot_have_the_lock_in_time_answers_503(
    lock_url: str, stock_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(recipe, "BUY_TIMEOUT", 0.1)
    app = recipe.create_app(lock_url, stock_path, items=ITEMS)
    async with serving(app) as client, await tumbler.aio.connect(lock_url) as other:
        async with other.lock("stock"):
            busy = await client.post("/buy")
        assert busy.status_code == 503
        assert busy.headers["Retry-After"] == "1"
        assert await app.state.stock.read() == ITEMS
