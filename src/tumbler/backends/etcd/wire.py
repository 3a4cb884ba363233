"""etcd's v3 JSON gateway in its own terms, for both flavours of the gateway client: its status
codes and errors, how it writes keys and numbers, and what a watch asks and tells."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

__all__ = [
    "INVALID_ARGUMENT",
    "NOT_FOUND",
    "OUT_OF_RANGE",
    "PERMISSION_DENIED",
    "UNAUTHENTICATED",
    "UNAVAILABLE",
    "EtcdError",
    "GatewayUnavailable",
    "WatchEvent",
    "WatchNews",
    "WatchRequest",
    "b64",
    "code_of",
    "compare",
    "count_of",
    "created_before",
    "delete",
    "put",
    "ranged",
    "read",
    "relet",
    "read_by_creation",
    "read_range",
    "error_of",
    "kv_of",
    "kvs",
    "nested",
    "prefix_end",
    "unb64",
]

#: gRPC status codes etcd answers with
UNAUTHENTICATED = 16
NOT_FOUND = 5
PERMISSION_DENIED = 7
INVALID_ARGUMENT = 3
OUT_OF_RANGE = 11
#: no leader, a leader change, a proposal that timed out: what may go through on a retry
UNAVAILABLE = 14


class EtcdError(Exception):
    """etcd refused a request; ``code`` is its gRPC status code."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"etcd: {message} (code {code})")
        self.code = code
        self.message = message


class GatewayUnavailable(Exception):
    """No member answered (or the reply to a request that is not idempotent was lost)."""


def b64(text: str | bytes) -> str:
    """A key or value as the gateway takes it."""
    raw = text.encode() if isinstance(text, str) else text
    return base64.b64encode(raw).decode()


def unb64(text: str | None) -> bytes:
    """A key or value as the gateway gave it (an absent one is empty)."""
    return base64.b64decode(text or "")


def prefix_end(prefix: bytes) -> bytes:
    """The key just past every key that starts with ``prefix`` (a range's ``range_end``)."""
    raw = bytearray(prefix)
    while raw and raw[-1] == 0xFF:
        raw.pop()
    if not raw:
        return b"\x00"  # every key
    raw[-1] += 1
    return bytes(raw)


@dataclass(frozen=True)
class WatchRequest:
    """One key (to ``range_end``, if given) to watch, from ``start_revision`` on (0: from now).
    ``watch_id`` (above 0) is the id the stream's news of this watch carry, the creation
    notice included (etcd 3.4 and later); 0 lets etcd number the stream's watches. With
    ``deletions_only``, etcd leaves out the puts."""

    key: bytes
    range_end: bytes | None = None
    start_revision: int = 0
    watch_id: int = 0
    deletions_only: bool = False

    def message(self) -> dict[str, Any]:
        request: dict[str, Any] = {"key": b64(self.key)}
        if self.range_end is not None:
            request["range_end"] = b64(self.range_end)
        if self.start_revision:
            request["start_revision"] = self.start_revision
        if self.watch_id:
            request["watch_id"] = self.watch_id
        if self.deletions_only:
            request["filters"] = ["NOPUT"]
        return {"create_request": request}


@dataclass(frozen=True)
class WatchEvent:
    """One change a watch saw: a key put (``deleted`` False) or deleted, at ``revision``."""

    key: bytes
    deleted: bool
    revision: int
    create_revision: int
    value: bytes


@dataclass(frozen=True)
class WatchNews:
    """A message of a watch stream that tells something: the stream's watch ``watch_id``
    (the request's, or numbered from 0 in the order they were asked for) was ``created`` at
    ``revision``, after which it sees every change, or it saw ``events``. The gateway does
    not make every watch a stream asks for (of 100, as few as 9): only a creation notice says
    a watch is made."""

    watch_id: int
    revision: int
    created: bool
    events: tuple[WatchEvent, ...] = ()


def kvs(reply: dict[str, Any]) -> list[dict[str, Any]]:
    """The keys of a range's reply (also one inside a transaction's), decoded."""
    return [kv_of(kv) for kv in reply.get("kvs", [])]


def kv_of(kv: dict[str, Any]) -> dict[str, Any]:
    return {
        "key": unb64(kv.get("key")),
        "value": unb64(kv.get("value")),
        "create_revision": int(kv.get("create_revision", 0)),
        "mod_revision": int(kv.get("mod_revision", 0)),
        "lease": int(kv.get("lease", 0)),
    }


def code_of(reply: Any) -> int:
    return int(reply.get("code", 0)) if isinstance(reply, dict) else 0


def error_of(reply: Any) -> EtcdError:
    if isinstance(reply, dict):
        return EtcdError(code_of(reply), str(reply.get("message") or reply.get("error") or reply))
    return EtcdError(0, str(reply))


# -- the operations of a transaction, as the gateway takes them ------------------------------


def compare(key: bytes, target: str, value: int) -> dict[str, Any]:
    """A comparison that holds when ``key``'s ``target`` (``"CREATE"``: its create revision,
    0 for a key that does not exist; ``"LEASE"``: its lease) equals ``value``."""
    field = {"CREATE": "create_revision", "LEASE": "lease"}[target]
    return {"key": b64(key), "target": target, field: str(value), "result": "EQUAL"}


def untouched_since(key: bytes, revision: int) -> dict[str, Any]:
    """A comparison that holds when ``key`` was last written at ``revision`` or before (or
    does not exist)."""
    return {"key": b64(key), "target": "MOD", "mod_revision": str(revision + 1), "result": "LESS"}


def created_before(key: bytes, range_end: bytes, revision: int) -> dict[str, Any]:
    """A comparison that holds when every key from ``key`` to ``range_end`` was created before
    ``revision`` (as it does when there is none: etcd compares an empty range as one key
    created at 0). etcd reads every key of the range for it: for few keys only."""
    return {
        "key": b64(key),
        "range_end": b64(range_end),
        "target": "CREATE",
        "create_revision": str(revision),
        "result": "LESS",
    }


def nested(
    compare: list[dict[str, Any]], success: list[dict[str, Any]], failure: list[dict[str, Any]]
) -> dict[str, Any]:
    """A transaction run as one operation of another."""
    return {"request_txn": {"compare": compare, "success": success, "failure": failure}}


def put(key: bytes, value: bytes, lease: int | None) -> dict[str, Any]:
    """Put ``key`` attached to ``lease``; with None, the lease it has (etcd would detach it
    from its lease otherwise)."""
    request: dict[str, Any] = {"key": b64(key), "value": b64(value)}
    if lease is None:
        request["ignore_lease"] = True
    else:
        request["lease"] = str(lease)
    return {"request_put": request}


def relet(key: bytes, lease: int) -> dict[str, Any]:
    """Attach ``key`` to ``lease``, keeping its value (and its create revision)."""
    return {"request_put": {"key": b64(key), "ignore_value": True, "lease": str(lease)}}


def read(key: bytes) -> dict[str, Any]:
    return {"request_range": {"key": b64(key)}}


def read_by_creation(prefix: bytes) -> dict[str, Any]:
    """A read of every key under ``prefix``, by create revision."""
    return {
        "request_range": {
            "key": b64(prefix),
            "range_end": b64(prefix_end(prefix)),
            "sort_order": "ASCEND",
            "sort_target": "CREATE",
        }
    }


def read_range(key: bytes, range_end: bytes, limit: int) -> dict[str, Any]:
    """A read of the first ``limit`` keys from ``key`` to ``range_end``, in key order: the one
    order etcd reads without sorting (any ``sort_order`` makes it fetch and sort the whole
    range, whatever the limit). Its reply's ``count`` is how many keys the range has, and
    ``more`` whether some were left out."""
    return {"request_range": {"key": b64(key), "range_end": b64(range_end), "limit": str(limit)}}


def count_of(response: dict[str, Any]) -> int:
    """How many keys a transaction's read found in its range, however many it returned."""
    return int(response.get("response_range", {}).get("count", 0))


def delete(key: bytes) -> dict[str, Any]:
    return {"request_delete_range": {"key": b64(key)}}


def ranged(response: dict[str, Any]) -> list[dict[str, Any]]:
    """The keys a transaction's read found, decoded."""
    return kvs(response.get("response_range", {}))
