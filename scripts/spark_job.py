"""spark-submit entry point for the archive's Spark jobs: the same as `kafkaesque spark ...`.

    spark-submit scripts/spark_job.py export --out DIR [--pg-dsn DSN] [--master URL]
    spark-submit scripts/spark_job.py report [--pg-dsn DSN] [--png FILE] [--master URL]

The PostgreSQL JDBC driver is found as by the CLI ($KAFKAESQUE_JDBC_JAR, then the usual
install paths) and shipped to the executors; `spark-submit --jars JAR` works too. Under
spark-submit the session is spark-submit's (its --master wins over --master here). Only the
driver needs kafkaesque importable: from an installed kafkaesque, else from this checkout.
Exit status: 0, 1 on an error (one line on stderr), 2 on a usage mistake.
"""

from __future__ import annotations

import sys
from pathlib import Path

try:
    from kafkaesque.cli.base import Context
except ImportError:  # run from a checkout without kafkaesque installed
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from kafkaesque.cli.base import Context
from kafkaesque.cli.spark import spark

if __name__ == "__main__":
    # The data directory and the archive come from the environment, as for the CLI.
    spark.main(sys.argv[1:], prog_name="spark_job.py", obj=Context(None, None))
