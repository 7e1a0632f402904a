"""One exception hierarchy, one table to Kafka error codes, one parser of Lua replies."""

from __future__ import annotations

import re
from importlib.resources import files

import pytest
from kio.schema.errors import ErrorCode
from redis.exceptions import ResponseError

from kafkaesque import errors
from kafkaesque.errors import Code
from kafkaesque.hot import redis_errors
from wire.errors import ERROR_CODES, error_code

TABLED = [cls for cls in errors.all_errors() if not issubclass(cls, errors.Refused)]


@pytest.mark.parametrize("cls", TABLED, ids=lambda c: c.__name__)
def test_every_core_exception_has_its_own_kafka_code(cls: type[errors.KafkaesqueError]) -> None:
    assert cls in ERROR_CODES, f"{cls.__name__} has no entry in wire/errors.py"
    assert error_code(cls("x")) is ERROR_CODES[cls]


@pytest.mark.parametrize("code", list(errors.Code), ids=lambda c: c.name)
def test_a_refusal_answers_the_code_its_coordinator_chose(code: errors.Code) -> None:
    """Refused carries its code (a heartbeat's, a share session's); each of the core's
    codes is Kafka's code of the same name."""
    answered = error_code(errors.Refused(code, "x"))
    assert answered == int(code) and answered.name.upper() == code.name


def test_the_core_exceptions_are_all_found() -> None:
    """all_errors walks the hierarchy: the table test above sees every class."""
    defined = {
        obj
        for obj in vars(errors).values()
        if isinstance(obj, type) and issubclass(obj, errors.KafkaesqueError)
    }
    assert defined <= set(errors.all_errors())
    assert len(defined) > 20


def test_refusals_only_the_client_can_fix_are_not_internal_errors() -> None:
    assert error_code(errors.UnknownTopic("t")) == ErrorCode.unknown_topic_or_partition
    assert error_code(errors.CorruptBatch("crc")) == ErrorCode.corrupt_message
    assert error_code(errors.NeedsRecovery("lost")) == ErrorCode.kafka_storage_error
    assert error_code(errors.GroupBusy("busy")) == ErrorCode.non_empty_group
    assert error_code(None) == ErrorCode.none


def test_an_exception_outside_the_core_has_no_code() -> None:
    with pytest.raises(TypeError):
        error_code(RuntimeError("bug"))


@pytest.mark.parametrize("error", list(Code), ids=lambda e: e.name)
def test_coordinator_outcomes_are_the_kafka_codes_of_their_names(error: Code) -> None:
    assert error_code(error).name == error.name.lower()


def test_every_lua_error_reply_parses_to_its_exception() -> None:
    """Each "NAME message" a script can reply with is in the parser's table."""
    lua = files("kafkaesque.hot") / "lua"
    names = set()
    for script in lua.iterdir():
        for line in script.read_text().splitlines():
            if "error_reply(" in line or "refuse(" in line:
                names |= set(re.findall(r"'([A-Z][A-Z_]{3,})[' ]", line))
    assert names and names <= set(errors.LUA_ERRORS), names - set(errors.LUA_ERRORS)
    for name, cls in errors.LUA_ERRORS.items():
        parsed = redis_errors.from_lua(ResponseError(f"{name} what happened"))
        assert type(parsed) is cls and str(parsed) == "what happened"
    other = ResponseError("OOM command not allowed when used memory > 'maxmemory'.")
    assert redis_errors.from_lua(other) is other


@pytest.mark.parametrize(
    "message,described",
    [
        (
            "Error 111 connecting to 127.0.0.1:1. Connect call failed ('127.0.0.1', 1).",
            "127.0.0.1:1 (connection refused)",
        ),
        (  # rediss://: 1 is OpenSSL's SSL_ERROR_SSL, not EPERM ("operation not permitted")
            "Error 1 connecting to 127.0.0.1:6380. [SSL: CERTIFICATE_VERIFY_FAILED] certificate"
            " verify failed: unable to get local issuer certificate (_ssl.c:1006).",
            "127.0.0.1:6380 ([SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed:"
            " unable to get local issuer certificate)",
        ),
        (  # a server that went away mid-reply
            "Error while reading from 127.0.0.1:28780 : (104, 'Connection reset by peer')",
            "127.0.0.1:28780 (connection reset by peer)",
        ),
    ],
)
def test_redis_connection_errors_in_one_sentence(message: str, described: str) -> None:
    from redis.exceptions import ConnectionError as RedisConnectionError

    assert redis_errors.describe_redis_error(RedisConnectionError(message)) == described
