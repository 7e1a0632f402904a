"""DescribeUserScramCredentials refused (no DESCRIBE on the cluster): the error in a result
per user asked, so a client fails each user's describe rather than crash."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from kio.schema.errors import ErrorCode

from tests.kafka_client import Connection, request

pytest.importorskip("confluent_kafka")


def test_a_denied_describe_answers_each_user(broker_factory) -> None:
    """confluent-kafka 2.16 (librdkafka) aborted the process on the bare top-level error
    with no results; here its AdminClient raises CLUSTER_AUTHORIZATION_FAILED in each
    user's future and the process goes on. Raw: the error per named user; asked for all
    users, the top-level code (no user to carry it)."""
    broker = broker_factory("--authorizer", "acl", "--super-user", "User:admin")
    denied = ErrorCode.cluster_authorization_failed
    script = textwrap.dedent(
        f"""
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient
        admin = AdminClient({{"bootstrap.servers": "{broker.bootstrap}"}})
        futures = admin.describe_user_scram_credentials(["alice", "bob"])
        for user, future in futures.items():
            try:
                future.result(30)
            except KafkaException as exc:
                print(user, exc.args[0].name())
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr  # not SIGABRT (-6)
    assert sorted(done.stdout.splitlines()) == [
        "alice CLUSTER_AUTHORIZATION_FAILED",
        "bob CLUSTER_AUTHORIZATION_FAILED",
    ], done.stdout
    with Connection(broker.bootstrap) as conn:
        answer = conn.request(request(50, 0, users=[{"name": "alice"}, {"name": "bob"}]))
        assert [(r.user, r.error_code) for r in answer.results] == [
            ("alice", denied),
            ("bob", denied),
        ]
        everyone = conn.request(request(50, 0, users=None))
        assert (everyone.error_code, everyone.results) == (denied, ())
