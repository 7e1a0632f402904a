"""The Spark jobs' errors: each message is one line meant for people."""


class SparkJobError(RuntimeError):
    """A Spark job over the archive failed; the message is one line meant for people."""


class JdbcDriverMissing(SparkJobError):
    """The PostgreSQL JDBC driver jar is not where we (or Spark) can find it."""


class ArchiveUnreachable(SparkJobError):
    """PostgreSQL refused or never answered (host, port, password, database name)."""
