"""The PostgreSQL backend written for asyncio: the source of ``../_sync``."""
