"""The command line's wire mode (``-b ... --command-config FILE``) against a kafkaesque
broker with SASL_SSL (SCRAM-SHA-512) and ACLs: alice, allowed her topic and group,
creates, produces, consumes with the group, lists, describes and deletes the group; bob,
allowed nothing, gets an authorization error in one line, exit 1."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.servers import RedisServer
from tests.wire.certificates import make_certificates
from tests.wire.cli_wire import as_json, json_lines, ok, one_line_error, values, wire, write_config
from tests.wire.conftest import Broker
from tests.wire.secure import USERS, Secured, checked, start_with_users

pytest.importorskip("confluent_kafka")


@pytest.fixture(scope="module")
def secured_module(
    redis_server: RedisServer,
    broker_factory: Callable[..., Broker],
    tmp_path_factory: pytest.TempPathFactory,
) -> Secured:
    secured = start_with_users(
        redis_server.url,
        broker_factory,
        make_certificates(tmp_path_factory.mktemp("certs")),
        ("SASL_SSL",),
        "--authorizer", "acl", "--super-user", "User:admin",
    )  # fmt: skip
    secured.add_user("admin", *ADMIN)
    return secured


@pytest.fixture
def secured(secured_module: Secured, request: pytest.FixtureRequest) -> Iterator[Secured]:
    yield from checked(secured_module, request)


ADMIN = ("SCRAM-SHA-512", "admin-secret")


def config_of(secured: Secured, user: str, path: Path) -> Path:
    mechanism, password = ADMIN if user == "admin" else USERS[user]
    return write_config(
        path,
        {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": mechanism,
            "sasl.username": user,
            "sasl.password": password,
            "ssl.ca.location": secured.certs.ca,
        },
    )


def test_a_user_with_acls_works_over_sasl_ssl(secured: Secured, topic_name, tmp_path) -> None:
    topic, group = topic_name(), f"group-{topic_name()}"
    bootstrap = secured.address("SASL_SSL")
    admin = config_of(secured, "admin", tmp_path / "admin.properties")
    for resource in (["--topic", topic], ["--group", group]):
        granted = ["--allow-principal", "User:alice", "--operation", "All", *resource]
        ok(wire(bootstrap, "acls", "add", *granted, config=admin))
    listing = ["acls", "list", "--topic", topic, "--format", "json"]
    listed = as_json(wire(bootstrap, *listing, config=admin))
    held = as_json(secured.broker.cli("acls", "list", "--topic", topic, "--format", "json"))
    assert listed == held and len(listed) == 1
    config = config_of(secured, "alice", tmp_path / "alice.properties")

    def cli(*args: str, input: bytes | None = None):
        return wire(bootstrap, *args, config=config, input=input)

    ok(cli("create", topic, "--partitions", "2"))
    lines = b"".join(b"k%d:v%d\n" % (i, i) for i in range(10))
    result = cli("produce", topic, "--key-separator", ":", input=lines)
    assert "produced 10 records" in ok(result) + result.stderr.decode()
    records = json_lines(ok(cli("consume", topic, "--group", group, "--format", "json")))
    assert values(records) == sorted(f"v{i}" for i in range(10))
    assert {r["key"] for r in records} == {f"k{i}" for i in range(10)}
    assert topic in ok(cli("topics")).split()
    described = as_json(cli("describe", topic, "--format", "json"))
    assert described["partitions"] == 2
    assert sum(p["end_offset"] for p in described["partition_states"]) == 10
    listed = as_json(cli("groups", "--format", "json"))
    assert [g["group"] for g in listed] == [group]
    document = as_json(cli("group", group, "--format", "json"))
    assert document["state"] == "Empty"
    assert sum(row["current_offset"] for row in document["offsets"]) == 10
    assert all(row["lag"] == 0 for row in document["offsets"])
    assert "CURRENT-OFFSET" in ok(cli("group", group))
    ok(cli("group", group, "--delete"))
    one_line_error(cli("group", group), 1, f"no such group: {group}")
    # the records are still there, read without a group
    assert len(json_lines(ok(cli("consume", topic, "--format", "json")))) == 10
    ok(cli("delete", topic))
    assert topic not in ok(cli("topics")).split()


def test_a_user_without_acls_gets_one_line(secured: Secured, topic_name, tmp_path) -> None:
    topic = topic_name()
    secured.broker.cli("create", topic)
    bootstrap = secured.address("SASL_SSL")
    config = config_of(secured, "bob", tmp_path / "bob.properties")
    for args in (["describe", topic], ["consume", topic], ["create", topic_name()]):
        result = wire(bootstrap, *args, config=config)
        one_line_error(result, 1, "AUTHORIZATION_FAILED")
    result = wire(bootstrap, "produce", topic, config=config, input=b"x\n")
    one_line_error(result, 1, "AUTHORIZATION_FAILED")


def test_a_wrong_password_is_one_line(secured: Secured, tmp_path) -> None:
    config = config_of(secured, "alice", tmp_path / "alice.properties")
    config.write_text(config.read_text().replace("alice-secret", "wrong"))
    result = wire(secured.address("SASL_SSL"), "topics", config=config)
    one_line_error(result, 1, "authentication failed")


def test_users_and_acls_over_the_wire(secured: Secured, tmp_path) -> None:
    bootstrap = secured.address("SASL_SSL")
    admin = config_of(secured, "admin", tmp_path / "admin.properties")

    def cli(*args: str, input: bytes | None = None):
        return wire(bootstrap, *args, config=admin, input=input)

    ok(cli("users", "add", "carol", "--password-stdin", input=b"carol-secret\n"))
    users = as_json(cli("users", "list", "--format", "json"))
    assert {"user": "carol", "mechanism": "SCRAM-SHA-512", "iterations": 4096} in users
    assert users == as_json(secured.broker.cli("users", "list", "--format", "json"))
    ok(cli("users", "delete", "carol"))
    assert "carol" not in ok(cli("users", "list"))
    ok(cli("acls", "add", "--allow-principal", "User:carol", "--operation", "Read",
           "--group", "carols"))  # fmt: skip
    assert "User:carol" in ok(cli("acls", "list", "--group", "carols"))
    ok(cli("acls", "remove", "--group", "carols", "--force"))
    one_line_error(cli("acls", "remove", "--group", "carols", "--force"), 1, "no ACL matches")
