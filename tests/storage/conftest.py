"""Archive tests: a real PostgreSQL per session (a fresh database per test: ``pg_dsn``,
tests/conftest.py) and the session's real redis-server (``redis_url``, flushed per test)."""
