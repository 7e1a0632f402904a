"""Fuzzing the wire protocol: Hypothesis cases (tests/fuzz/strategies.py) sent to a broker
process over real sockets, checked by tests/fuzz/harness.py; then a normal client must
still be served. The examples are derandomized, so every run sends the same cases: each
test's share of 4,500 times ``KAFKAESQUE_FUZZ_SCALE`` (default 0.5: 2,250 cases, under a
minute; 1 or more for a longer run); scripts/fuzz.py runs the same strategies for as long
as asked."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from kio.schema.errors import ErrorCode

from tests.fuzz import harness, strategies
from tests.fuzz.harness import Target
from tests.kafka_client import Connection
from tests.wire.conftest import Broker
from wire.handlers import supported

BROKER_ARGS = harness.BROKER_ARGS
# The share of each test's examples the suite sends (see the module's docstring).
SCALE = float(os.environ.get("KAFKAESQUE_FUZZ_SCALE", "0.5"))


def examples(full: int) -> int:
    """``full`` examples scaled by ``SCALE``, at least one."""
    return max(1, round(full * SCALE))


FUZZ = settings(
    deadline=None,
    derandomize=True,
    database=None,
    # The broker is shared by all examples (a function-scoped fixture), cases are slow to
    # run and some (decompression bombs) large.
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.large_base_example,
    ],
)


@pytest.fixture(scope="module")
def target(module_broker: Broker) -> Target:
    target = Target(module_broker)
    target.prepare()
    return target


def check(target: Target, case: strategies.Case | strategies.Session) -> None:
    problems = target.run(case)
    assert not problems, "\n".join(problems)


def test_the_versions_fuzzed_are_those_advertised(broker: Broker) -> None:
    with Connection(broker.bootstrap) as conn:
        response = conn.api_versions(3)
    assert response.error_code == ErrorCode.none
    advertised = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    assert advertised == supported()
    fuzzed = {key for key, _ in strategies.api_versions()}
    assert fuzzed == set(advertised)


@settings(FUZZ, max_examples=examples(1200))
@given(case=strategies.requests())
def test_generated_requests(broker: Broker, target: Target, case: strategies.Case) -> None:
    check(target, case)


@settings(FUZZ, max_examples=examples(1500))
@given(case=strategies.mutated_frames())
def test_mutated_frames(broker: Broker, target: Target, case: strategies.Case) -> None:
    check(target, case)


@settings(FUZZ, max_examples=examples(800))
@given(case=strategies.mutated_batches())
def test_mutated_batches(broker: Broker, target: Target, case: strategies.Case) -> None:
    check(target, case)


@settings(FUZZ, max_examples=examples(250))
@given(session=strategies.group_sessions())
def test_group_sessions(broker: Broker, target: Target, session: strategies.Session) -> None:
    check(target, session)


@settings(FUZZ, max_examples=examples(500))
@given(case=strategies.odd_names())
def test_odd_names(broker: Broker, target: Target, case: strategies.Case) -> None:
    check(target, case)


@settings(FUZZ, max_examples=examples(150))
@given(case=strategies.announced_sizes())
def test_announced_sizes(broker: Broker, target: Target, case: strategies.Case) -> None:
    check(target, case)


@settings(FUZZ, max_examples=examples(100))
@given(case=strategies.dribbled())
def test_dribbled_requests(broker: Broker, target: Target, case: strategies.Case) -> None:
    check(target, case)


def test_a_normal_client_is_served_after_the_fuzz(broker: Broker, target: Target) -> None:
    harness.serves_a_client(broker.bootstrap, "after-the-fuzz")
    assert target.health() == []
    assert target.leaked_fds() == 0
    assert 0 < target.peak_kb <= harness.MAX_RSS_MB * 1024
