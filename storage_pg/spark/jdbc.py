"""The archive as Spark's JDBC source sees it: the URL and properties built from a libpq
DSN, the PostgreSQL JDBC driver jar, and the JVM's exceptions turned into one-line errors."""

from __future__ import annotations

import contextlib
import getpass
import glob
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import parse_qsl, unquote

from storage_pg.spark.errors import ArchiveUnreachable, JdbcDriverMissing, SparkJobError

JDBC_DRIVER = "org.postgresql.Driver"
JAR_ENV = "KAFKAESQUE_JDBC_JAR"
# Where Debian's libpostgresql-jdbc-java and Maven-style installs put the driver.
KNOWN_JARS = (
    "/usr/share/java/postgresql.jar",
    "/usr/share/java/postgresql-jdbc4.jar",
    "/usr/share/maven-repo/org/postgresql/postgresql/*/postgresql-*.jar",
    "/usr/local/share/java/postgresql*.jar",
    "/opt/homebrew/share/java/postgresql*.jar",
)


# libpq URI query parameters with a pgjdbc connection property of their own.
_PARAMS = {
    "sslmode": "sslmode",
    "sslcert": "sslcert",
    "sslkey": "sslkey",
    "sslrootcert": "sslrootcert",
    "sslpassword": "sslpassword",
    "application_name": "ApplicationName",
    "connect_timeout": "connectTimeout",
    "options": "options",
    "channel_binding": "channelBinding",
}


@dataclass(frozen=True)
class JdbcTarget:
    """A JDBC URL (no password in it: Spark prints URLs in plans and errors) and the
    connection properties to go with it."""

    url: str
    properties: dict[str, str]
    where: str  # host:port/db, for messages

    def options(self) -> dict[str, str]:
        return {"url": self.url, **self.properties}


def jdbc_target(dsn: str) -> JdbcTarget:
    """Build the JDBC URL and properties from a libpq/asyncpg URI
    (``postgresql://user:pass@host:port/db?sslmode=require``). Several ``host:port``
    separated by commas are kept (pgjdbc fails over the same way). Missing parts default as
    libpq does: PGUSER/PGPASSWORD/PGHOST/PGPORT/PGDATABASE, then localhost:5432, the OS user,
    database = user name."""
    match = re.fullmatch(r"(postgres(?:ql)?)://([^/?#]*)(?:/([^?#]*))?(?:\?([^#]*))?", dsn.strip())
    if match is None:
        raise SparkJobError("the DSN must look like postgresql://user:password@host:port/db")
    _, netloc, path, query = match.groups()
    params = dict(parse_qsl(query or "", keep_blank_values=True))
    user = password = None
    if "@" in netloc:
        userinfo, netloc = netloc.rsplit("@", 1)
        user, _, password = userinfo.partition(":")
        user, password = unquote(user) or None, unquote(password) if _ else None
    user = params.pop("user", None) or user or os.environ.get("PGUSER") or getpass.getuser()
    password = params.pop("password", None) or password or os.environ.get("PGPASSWORD")
    database = unquote(path or "") or params.pop("dbname", None) or os.environ.get("PGDATABASE")
    database = database or user
    default_port = params.pop("port", None) or os.environ.get("PGPORT") or "5432"
    hosts = []
    host_list = params.pop("host", None) or unquote(netloc) or os.environ.get("PGHOST", "")
    for item in host_list.split(","):
        item = item.strip()
        if not item:
            continue
        if item.startswith("/"):
            raise SparkJobError(
                f"JDBC cannot use the unix socket {item}: give PostgreSQL's TCP host and port"
            )
        host, port = item, default_port
        m = re.fullmatch(r"(\[[^\]]+\]|[^:]+)(?::(\d*))?", item)
        if m is None:
            raise SparkJobError(f"bad host in DSN: {item!r}")
        host, port = m.group(1), m.group(2) or default_port
        hosts.append(f"{host}:{port}")
    if not hosts:
        hosts = [f"localhost:{default_port}"]
    properties = {"driver": JDBC_DRIVER, "user": user, "ApplicationName": "kafkaesque-spark"}
    if password is not None:
        properties["password"] = password
    for name, value in params.items():
        if name in _PARAMS:
            properties[_PARAMS[name]] = value
        # anything else (target_session_attrs, passfile, ...) has no JDBC twin: ignored
    properties.setdefault("connectTimeout", "10")
    where = f"{','.join(hosts)}/{database}"
    url = f"jdbc:postgresql://{','.join(hosts)}/{_jdbc_quote(database)}"
    return JdbcTarget(url, properties, where)


def _jdbc_quote(database: str) -> str:
    return re.sub(
        r"[^A-Za-z0-9._~-]", lambda m: "".join(f"%{b:02X}" for b in m[0].encode()), database
    )


def find_jdbc_jar() -> str:
    """The PostgreSQL JDBC driver: $KAFKAESQUE_JDBC_JAR, else the first known install path.
    Raises JdbcDriverMissing with what to do."""
    configured = os.environ.get(JAR_ENV)
    if configured:
        if not os.path.isfile(configured):
            raise JdbcDriverMissing(f"{JAR_ENV}={configured}: no such file")
        return configured
    for pattern in KNOWN_JARS:
        found = sorted(glob.glob(pattern))
        if found:
            return found[-1]
    raise JdbcDriverMissing(
        "the PostgreSQL JDBC driver is missing: install it (Debian: apt-get install "
        f"libpostgresql-jdbc-java) or set {JAR_ENV} to the jar's path"
    )


# --- the JVM's errors ---------------------------------------------------------------------


def first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0].strip()


def _java_chain(exc: BaseException) -> list[tuple[str, str, str | None]]:
    """(class name, message, SQL state) of the Java exception behind exc and its causes."""
    throwable = getattr(exc, "java_exception", None) or getattr(exc, "_origin", None)
    chain: list[tuple[str, str, str | None]] = []
    try:
        while throwable is not None and len(chain) < 20:
            name = throwable.getClass().getName()
            state = throwable.getSQLState() if name.endswith("PSQLException") else None
            chain.append((name, str(throwable.getMessage() or "").strip(), state))
            throwable = throwable.getCause()
    except Exception:  # the JVM is gone, or not a Java object after all
        pass
    return chain


def _translate(exc: BaseException, target: JdbcTarget) -> SparkJobError:
    chain = _java_chain(exc)
    text = str(exc) + "\n" + "\n".join(f"{name}: {message}" for name, message, _ in chain)
    if f"ClassNotFoundException: {JDBC_DRIVER}" in text or "No suitable driver" in text:
        return JdbcDriverMissing(
            f"the PostgreSQL JDBC driver is not on Spark's class path: set {JAR_ENV} or "
            "pass --jars to spark-submit"
        )
    for name, message, state in chain:
        message = message.splitlines()[0] if message else name
        if name == "org.postgresql.util.PSQLException":
            if state and (state[:2] in ("08", "28") or state == "3D000"):
                return ArchiveUnreachable(f"cannot reach the archive at {target.where}: {message}")
            if state == "42P01":  # undefined table
                return SparkJobError(
                    f"no kafkaesque archive in {target.where} ({message}): run the archiver first"
                )
            return SparkJobError(f"archive query failed: {message}")
        if name.startswith("java.net.") or name == "java.sql.SQLTimeoutException":
            return ArchiveUnreachable(f"cannot reach the archive at {target.where}: {message}")
    return SparkJobError(f"Spark job failed: {first_line(exc)}")


@contextlib.contextmanager
def spark_errors(target: JdbcTarget) -> Iterator[None]:
    """Turn the JVM's exceptions (Py4J or PySpark's captured ones) into one-line errors."""
    try:
        yield
    except SparkJobError:
        raise
    except Exception as exc:
        module = type(exc).__module__ or ""
        if module.startswith(("py4j", "pyspark")):
            raise _translate(exc, target) from None
        raise
