"""SCRAM and PLAIN as the server computes them: RFC 7677's test vector, refusals, and the
credential store on fakeredis."""

from __future__ import annotations

import asyncio
import base64

import fakeredis
import pytest

from kafkaesque.errors import AuthenticationFailed, CredentialNotFound, UnacceptableCredential
from kafkaesque.hot.credentials import CredentialStore
from kafkaesque.hot.keys import Keys
from kafkaesque.security.scram import (
    SCRAM_SHA_256,
    SCRAM_SHA_512,
    Credential,
    ScramExchange,
    new_credential,
    parse_client_first,
    parse_plain,
)
from tests.sasl_client import ScramClient

# RFC 7677, section 3: user "user", password "pencil".
CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
SERVER_FIRST = (
    b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
)
CLIENT_FINAL = (
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
)
SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def rfc_exchange() -> ScramExchange:
    credential = new_credential(SCRAM_SHA_256, "pencil", 4096, SALT)
    return ScramExchange(parse_client_first(CLIENT_FIRST), credential, SERVER_NONCE)


def test_rfc7677_vector() -> None:
    exchange = rfc_exchange()
    assert exchange.server_first_message() == SERVER_FIRST
    assert exchange.final(CLIENT_FINAL) == SERVER_FINAL


@pytest.mark.parametrize(
    "final",
    [
        CLIENT_FINAL.replace(b"p=dHzb", b"p=dHzc"),  # a wrong proof
        CLIENT_FINAL.replace(b"%hvYD", b"%hvYE"),  # a wrong nonce
        CLIENT_FINAL.replace(b"c=biws", b"c=eSws"),  # another channel binding header
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",  # no proof
        b"garbage",
        b"\xff\xfe",
    ],
    ids=["proof", "nonce", "channel", "no-proof", "garbage", "not-utf8"],
)
def test_a_bad_client_final_is_refused(final: bytes) -> None:
    with pytest.raises(AuthenticationFailed):
        rfc_exchange().final(final)


@pytest.mark.parametrize(
    "first", [b"p=tls-unique,,n=user,r=abc", b"n,,r=abc,n=user", b"n,,n=,r=abc", b"n,,n=a=b,r=x"]
)
def test_a_bad_client_first_is_refused(first: bytes) -> None:
    with pytest.raises(AuthenticationFailed):
        parse_client_first(first)


def test_user_names_are_decoded() -> None:
    assert parse_client_first(b"n,,n=a=2Cb=3Dc,r=xyz").user == "a,b=c"


@pytest.mark.parametrize("mechanism", [SCRAM_SHA_256, SCRAM_SHA_512])
def test_an_independent_client_agrees(mechanism) -> None:
    credential = new_credential(mechanism, "s3cret", 5000)
    client = ScramClient(mechanism.name, "bob", "s3cret")
    exchange = ScramExchange(parse_client_first(client.first()), credential)
    assert client.verify(exchange.final(client.final(exchange.server_first_message())))
    wrong = ScramClient(mechanism.name, "bob", "other")
    exchange = ScramExchange(parse_client_first(wrong.first()), credential)
    with pytest.raises(AuthenticationFailed):
        exchange.final(wrong.final(exchange.server_first_message()))


def test_plain_tokens() -> None:
    assert parse_plain(b"\0alice\0pw") == ("alice", "pw")
    assert parse_plain(b"alice\0alice\0pw") == ("alice", "pw")
    for bad in (b"bob\0alice\0pw", b"\0alice\0", b"\0\0pw", b"alice\0pw", b"\xff\0a\0b"):
        with pytest.raises(AuthenticationFailed):
            parse_plain(bad)


def test_a_credential_keeps_no_password_and_checks_one() -> None:
    credential = new_credential(SCRAM_SHA_512, "correct horse", 4096)
    packed = credential.pack()
    assert "correct horse" not in packed
    again = Credential.unpack(SCRAM_SHA_512, packed)
    assert again == credential
    assert again.verify_password("correct horse")
    assert not again.verify_password("correct horsE")


@pytest.mark.parametrize("iterations", [4095, 16385])
def test_iterations_out_of_kafkas_range_are_refused(iterations: int) -> None:
    with pytest.raises(UnacceptableCredential):
        new_credential(SCRAM_SHA_512, "pw", iterations)


def test_the_store_on_fakeredis() -> None:
    async def scenario() -> None:
        redis = fakeredis.FakeAsyncRedis()
        store = CredentialStore(redis)
        await store.put("alice", new_credential(SCRAM_SHA_512, "a", 4096))
        await store.put("alice", new_credential(SCRAM_SHA_256, "b", 8192))
        await store.put("bob", new_credential(SCRAM_SHA_256, "c", 4096))
        users = await store.users()
        assert {u: [(c.mechanism.name, c.iterations) for c in cs] for u, cs in users.items()} == {
            "alice": [("SCRAM-SHA-256", 8192), ("SCRAM-SHA-512", 4096)],
            "bob": [("SCRAM-SHA-256", 4096)],
        }
        assert (await store.get("alice", SCRAM_SHA_256)).verify_password("b")
        await store.delete("alice", SCRAM_SHA_512)
        with pytest.raises(CredentialNotFound):
            await store.delete("alice", SCRAM_SHA_512)
        with pytest.raises(CredentialNotFound):
            await store.describe("carol")
        assert set(await redis.keys()) == {Keys().scram_credentials.encode()}

    asyncio.run(scenario())


def test_a_final_nonce_ending_with_the_servers_is_accepted() -> None:
    """Kafka checks endsWith: librdkafka 2.0 (Debian's kcat) sends the client nonce, then
    the combined one. The proof still covers exactly what the client sent."""
    credential = new_credential(SCRAM_SHA_512, "pw")
    client = ScramClient("SCRAM-SHA-512", "u", "pw")
    exchange = ScramExchange(parse_client_first(client.first()), credential)
    server_first = exchange.server_first_message()
    doubled = client.nonce + exchange.nonce
    assert client.verify(exchange.final(client.final(server_first, nonce=doubled)))
    exchange = ScramExchange(parse_client_first(client.first()), credential)
    server_first = exchange.server_first_message()
    with pytest.raises(AuthenticationFailed, match="nonce"):
        exchange.final(client.final(server_first, nonce=exchange.nonce + "x"))
