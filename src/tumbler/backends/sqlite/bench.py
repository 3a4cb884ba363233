"""The SQLite backend as the bench sees it: no peers, and a "version" that says which SQLite
library and which file system the file is on (tmpfs and ext4 time differently)."""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass

from ..._url import parse_url
from ...testing.bench import StoreBench
from .backend import filesystem_type


@dataclass(frozen=True)
class SQLiteBench(StoreBench):
    def version(self, url: str) -> str | None:
        """``SQLite 3.40.1 on ext4``: the library, and the file system of the URL's file."""
        shown = f"SQLite {sqlite3.sqlite_version}"
        path = parse_url(url).path
        if not path:
            return shown
        try:
            with open("/proc/self/mountinfo", encoding="utf-8") as file:
                mountinfo = file.read()
        except OSError:
            return shown
        directory = os.path.dirname(os.path.abspath(os.path.expanduser(path)))
        where = filesystem_type(directory, mountinfo)
        return f"{shown} on {where}" if where else shown


BENCH = SQLiteBench()
