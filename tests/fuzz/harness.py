"""Sending fuzz cases to a broker process and checking it and its answers.

A case is sent on a fresh connection whose write side is then shut, so the broker sees
the end of the input and must answer what it can and close; a group session is a
conversation on one connection, each request sent once the last is answered. The checks:

* every answer is a well-formed response (kio decodes all of it) to a request sent, in
  order, and carries no UNKNOWN_SERVER_ERROR (an internal error in disguise);
* the requests a case says must be answered are answered;
* the broker answers or closes within ``HANG_TIMEOUT`` (a case with a request that may
  wait, a Fetch or a group join, gets ``WAIT_GRACE`` and may simply not be answered);
* the broker is alive, logged no Traceback, no ERROR and at most one warning (for the
  connection it closed), and its peak RSS during the case stays bounded;
* after the cases, it holds no more descriptors than before (no connection left open).
"""

from __future__ import annotations

import dataclasses
import os
import re
import socket
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode
from kio.serial._introspect import EntityTupleField, classify_field
from kio.serial.errors import OutOfBoundValue

from kafkaesque.config.broker_settings import MAX_REQUEST_SIZE
from kafkaesque.records.batch import decode_values
from kafkaesque.records.build import build_batch
from tests.fuzz.strategies import POOL_TOPICS, WAITING_APIS, Case, Session
from tests.kafka_client import Connection, decode_response, parse_address
from wire.handlers import supported
from wire.protocol.codec import request_schema

if TYPE_CHECKING:
    from tests.wire.conftest import Broker

HANG_TIMEOUT = 10.0  # seconds the broker may take to answer and close
WAIT_GRACE = 1.0  # seconds a case with a waiting request waits for its answers
MAX_RSS_MB = 300
API_VERSIONS = 18
DESCRIBE_TRANSACTIONS = 65
# Serve options for fuzzing: group rounds close at once, and the short session timeouts
# the cases ask for are accepted, so joins neither wait seconds nor linger.
BROKER_ARGS = ("--group-initial-rebalance-delay-ms", "0", "--group-min-session-timeout-ms", "1")
_SIZE = struct.Struct(">i")
_HEADER = struct.Struct(">hhi")
_BAD_LOG = re.compile(r"Traceback|^\S+ \S+ (ERROR|CRITICAL) ", re.MULTILINE)
# A warning line, but not the count of a throttled kind (LogThrottle's "N more in the
# last 60 s", which comes once a minute whatever case is running).
_WARNING = re.compile(r"^\S+ \S+ WARNING (?!.*: \d+ more in the last )", re.MULTILINE)
FD_SLACK = 10  # client connections the broker may hold beyond those it had before the cases


@dataclass(frozen=True, slots=True)
class Frame:
    """A complete request frame of a case, as the broker splits the bytes."""

    api_key: int | None  # None: too short for a header
    api_version: int
    correlation_id: int


def split_frames(data: bytes) -> list[Frame]:
    """The frames the broker reads from ``data``, up to the first size it refuses."""
    frames, pos = [], 0
    while pos + 4 <= len(data):
        (size,) = _SIZE.unpack_from(data, pos)
        if not 0 < size <= MAX_REQUEST_SIZE or pos + 4 + size > len(data):
            break
        if size >= _HEADER.size:
            frames.append(Frame(*_HEADER.unpack_from(data, pos + 4)))
        else:
            frames.append(Frame(None, 0, 0))
        pos += 4 + size
    return frames


@dataclass(slots=True)
class Outcome:
    responses: list[bytes]
    timed_out: bool  # neither closed nor done answering in time
    leftover: int  # bytes of a response cut short
    sending: float = 0.0  # seconds the sending took


# The broker's request timeout (serve's default --request-timeout-ms): a request whose
# bytes take longer to come is dropped by design (a slowloris must not hold its memory).
REQUEST_TIMEOUT = 30.0


DRIBBLE_PAUSE = 0.0005  # seconds between the sends of a dribbled case


def exchange(address: tuple[str, int], data: bytes, timeout: float, dribble: int = 0) -> Outcome:
    """Send ``data`` on a new connection (``dribble`` bytes at a time, each send apart,
    if given), shut the write side, read until the broker closes or ``timeout`` passes."""
    received = bytearray()
    timed_out = False
    started = time.monotonic()
    with socket.create_connection(address, timeout=timeout) as sock:
        try:
            if dribble:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                for start in range(0, len(data), dribble):
                    sock.sendall(data[start : start + dribble])
                    time.sleep(DRIBBLE_PAUSE)
            else:
                sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the broker closed early; read what it sent before
        sending = time.monotonic() - started
        deadline = time.monotonic() + timeout  # from the end of the sending
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                timed_out = True
                break
            sock.settimeout(remaining)
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                timed_out = True
                break
            except OSError:  # reset: the broker closed with our bytes unread
                break
            if not chunk:
                break
            received += chunk
    responses, pos = [], 0
    while pos + 4 <= len(received):
        (size,) = _SIZE.unpack_from(received, pos)
        if pos + 4 + size > len(received):
            break
        responses.append(bytes(received[pos + 4 : pos + 4 + size]))
        pos += 4 + size
    return Outcome(responses, timed_out, len(received) - pos, sending)


def server_errors(entity: Any, path: str = "") -> Iterator[str]:
    """Where a decoded response says UNKNOWN_SERVER_ERROR."""
    if dataclasses.is_dataclass(entity):
        for f in dataclasses.fields(entity):
            value = getattr(entity, f.name)
            if f.name == "error_code" and value == ErrorCode.unknown_server_error:
                yield f"{path}{type(entity).__name__}"
            else:
                yield from server_errors(value, f"{path}{type(entity).__name__}.")
    elif isinstance(entity, tuple):
        for item in entity:
            yield from server_errors(item, path)


def response_problems(frame: Frame, response: bytes) -> list[str]:
    """What is wrong with ``response`` as the answer to ``frame``."""
    key, version = frame.api_key, frame.api_version
    low, high = supported().get(key, (0, -1)) if key is not None else (0, -1)
    what = f"the answer to api key {key} v{version}"
    if low <= version <= high and request_schema(key, version) is not None:
        try:
            body = decode_response(key, version, response, frame.correlation_id)
        except OutOfBoundValue as exc:
            # kio reads no negative timestamp, but Kafka sends -1 for "none": the start
            # time of a transaction not under way (DescribeTransactions).
            if key == DESCRIBE_TRANSACTIONS and "negative timestamp" in str(exc):
                return []
            return [f"{what} does not decode: {exc!r}; {response.hex()}"]
        except Exception as exc:
            return [f"{what} does not decode: {exc!r}; {response.hex()}"]
        return [f"{what} has UNKNOWN_SERVER_ERROR in {e}: {body}" for e in server_errors(body)]
    if key == API_VERSIONS:  # KIP-511: an unknown version is answered in v0
        try:
            body = decode_response(key, 0, response, frame.correlation_id)
        except Exception as exc:
            return [f"{what} does not decode as v0: {exc!r}; {response.hex()}"]
        if body.error_code != ErrorCode.unsupported_version:
            return [f"{what} has {body.error_code!r}, not UNSUPPORTED_VERSION"]
        return []
    return [f"an unsupported request (api key {key} v{version}) was answered"]


def answer_problems(case: Case, outcome: Outcome) -> list[str]:
    """Match answers to the case's frames (a produce with acks=0 has none) and check them."""
    frames = split_frames(case.data)
    waits = any(f.api_key in WAITING_APIS for f in frames)
    problems: list[str] = []
    index = 0
    for response in outcome.responses:
        if len(response) < 4:
            problems.append(f"an answer of {len(response)} bytes")
            break
        (correlation_id,) = _SIZE.unpack_from(response)
        # The next request with this correlation id the answer fits: a mutated frame may
        # share its id with a later one, and a produce with acks=0 is not answered.
        candidates = [
            i for i in range(index, len(frames)) if frames[i].correlation_id == correlation_id
        ]
        if not candidates:
            problems.append(f"an answer with correlation id {correlation_id} to no request")
            break
        found = [(i, response_problems(frames[i], response)) for i in candidates]
        answered, wrong = next(((i, p) for i, p in found if not p), found[0])
        if answered > index and index < case.answers:
            problems.append(f"request {index} was not answered, a later one was")
        problems += wrong
        index = answered + 1
    if outcome.timed_out and not waits:
        problems.append(f"the broker neither answered all nor closed in {HANG_TIMEOUT} s")
    elif index < case.answers and not (outcome.timed_out and waits):
        # A client slower than the request timeout is closed by design; on a loaded
        # machine a dribble of a large request can be that slow.
        if not (case.dribble and outcome.sending > REQUEST_TIMEOUT):
            problems.append(
                f"the broker closed the connection after {index} of {case.answers} answers"
            )
    if outcome.leftover and not outcome.timed_out:
        problems.append(f"the last answer is cut short ({outcome.leftover} bytes)")
    return problems


def fill_in(entity: Any, values: dict[str, Any]) -> Any:
    """``entity`` with the fields named in ``values`` replaced, in nested entities too."""
    changes = {}
    for f in dataclasses.fields(entity):
        value = getattr(entity, f.name)
        entities = isinstance(classify_field(f), EntityTupleField)
        if f.name in values and not entities:  # OffsetFetch v8+ `groups` holds entities
            changes[f.name] = values[f.name]
        elif dataclasses.is_dataclass(value):
            changes[f.name] = fill_in(value, values)
        elif entities and value is not None:
            changes[f.name] = tuple(fill_in(item, values) for item in value)
    return dataclasses.replace(entity, **changes)


def ask(conn: Connection, req: Any, problems: list[str]) -> Any:
    """The answer to ``req``, checked; None (and the problem, if it is one) without one."""
    name = f"{type(req).__name__} v{req.__version__}"
    waits = req.__api_key__ in WAITING_APIS
    conn.sock.settimeout(WAIT_GRACE if waits else HANG_TIMEOUT)
    try:
        answer = conn.request(req)
    except TimeoutError:
        if not waits:
            problems.append(f"no answer to {name} in {HANG_TIMEOUT} s")
        return None
    except OSError as exc:  # closed or reset
        problems.append(f"no answer to {name}: {exc!r}")
        return None
    except Exception as exc:
        problems.append(f"the answer to {name} does not decode: {exc!r}")
        return None
    problems += [f"{name}: UNKNOWN_SERVER_ERROR in {e}: {answer}" for e in server_errors(answer)]
    return answer


class Target:
    """A broker process under fuzzing: runs cases and watches it between them."""

    def __init__(self, broker: Broker, max_rss_mb: int = MAX_RSS_MB) -> None:
        self.broker = broker
        self.address = parse_address(broker.bootstrap)
        self.max_rss_kb = max_rss_mb * 1024
        self.log_position = broker.stderr_size()
        self.cases = 0
        self.peak_kb = 0  # the highest VmHWM seen
        self.fds_before = 0

    def prepare(self) -> None:
        """Create the pool topics the strategies aim at; count the broker's descriptors."""
        with Connection(self.broker.bootstrap) as conn:
            for topic, partitions in POOL_TOPICS.items():
                result = conn.create_topic(topic, partitions)
                assert result.error_code in (ErrorCode.none, ErrorCode.topic_already_exists)
        self.fds_before = self.open_fds()

    def open_fds(self) -> int:
        """The broker's descriptors that are clients' connections (sockets whose local port
        is its listener's): its archive's pool may open connections of its own as it goes."""
        pid = self.broker.proc.pid
        try:
            names = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            return 0
        inodes = set()
        for name in names:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{name}")
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
        port = f":{self.address[1]:04X}"
        count = 0
        for table in ("tcp", "tcp6"):
            try:
                lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
            except OSError:
                continue
            for line in lines:
                fields = line.split()
                # local address, state (0A: listening, not a client), inode
                if fields[1].endswith(port) and fields[3] != "0A" and fields[9] in inodes:
                    count += 1
        return count

    def leaked_fds(self, timeout: float = 5.0) -> int:
        """Descriptors (connections) beyond ``FD_SLACK`` the broker still holds after the
        cases, once waiting requests had ``timeout`` seconds to end."""
        deadline = time.monotonic() + timeout
        while (extra := self.open_fds() - self.fds_before - FD_SLACK) > 0:
            if time.monotonic() > deadline:
                return extra
            time.sleep(0.1)
        return 0

    def run(self, case: Case | Session) -> list[str]:
        """Send the case; the problems found with the answers and the broker."""
        self.cases += 1
        self.reset_peak()
        if isinstance(case, Session):
            return self.converse(case) + self.health()
        waits = any(f.api_key in WAITING_APIS for f in split_frames(case.data))
        try:
            timeout = WAIT_GRACE if waits else HANG_TIMEOUT
            outcome = exchange(self.address, case.data, timeout, case.dribble)
        except OSError as exc:
            return [f"cannot connect: {exc!r}", *self.health()]
        return answer_problems(case, outcome) + self.health()

    def converse(self, session: Session) -> list[str]:
        """Join, then send the follow-ups as the member the join made."""
        problems: list[str] = []
        with Connection(self.broker.bootstrap, timeout=HANG_TIMEOUT) as conn:
            joined = ask(conn, session.join, problems)
            if joined is not None and joined.error_code == ErrorCode.member_id_required:
                again = dataclasses.replace(session.join, member_id=joined.member_id)
                joined = ask(conn, again, problems)
            if joined is None:
                return problems
            identity = {
                "group_id": session.group,
                "groups": (session.group,),
                "member_id": joined.member_id,
                "generation_id": joined.generation_id,
                "generation_id_or_member_epoch": joined.generation_id,
            }
            for req, as_itself in session.follow_ups:
                if ask(conn, fill_in(req, identity) if as_itself else req, problems) is None:
                    break
        return problems

    def health(self) -> list[str]:
        """Dead, a Traceback or an ERROR logged since the last check, or too much memory."""
        problems = []
        if not self.broker.alive():
            problems.append(f"the broker exited with {self.broker.proc.returncode}")
        problems += self.log_problems()
        peak = self.memory()["VmHWM"]
        self.peak_kb = max(self.peak_kb, peak)
        if peak > self.max_rss_kb:
            problems.append(f"the broker's peak RSS was {peak // 1024} MB")
        return problems

    def log_problems(self) -> list[str]:
        """A Traceback or an ERROR logged since the last look, or warnings for more than the
        one connection a case is."""
        with self.broker.stderr_path.open("rb") as f:
            f.seek(self.log_position)
            logged = f.read()
        self.log_position += len(logged)
        text = logged.decode(errors="replace")
        if _BAD_LOG.search(text):
            return [f"the broker logged:\n{text}"]
        if len(_WARNING.findall(text)) > 1:
            return [f"the broker logged several warnings for one connection:\n{text}"]
        return []

    def reset_peak(self) -> None:
        """Start the broker's VmHWM afresh, so a peak is blamed on the case that made it."""
        try:
            Path(f"/proc/{self.broker.proc.pid}/clear_refs").write_text("5")
        except OSError:
            pass  # it exited: ``health`` says so

    def memory(self) -> dict[str, int]:
        """VmRSS and VmHWM (the peak) of the broker, in kB; zeros once it exited."""
        found = {"VmRSS": 0, "VmHWM": 0}
        try:
            status = Path(f"/proc/{self.broker.proc.pid}/status").read_text()
        except OSError:
            return found
        for line in status.splitlines():
            name, _, value = line.partition(":")
            if name in found:
                found[name] = int(value.split()[0])
        return found


def serves_a_client(bootstrap: str, topic: str) -> None:
    """A normal client's round: Metadata creates the topic, Produce appends a batch, Fetch
    reads it back. Raises AssertionError when any step is not served correctly."""
    values = [b"after the fuzz", None, b"x" * 1000]
    with Connection(bootstrap) as conn:
        metadata = conn.metadata([topic], auto_create=True)
        [found] = metadata.topics
        assert found.error_code == ErrorCode.none, metadata
        assert [p.partition_index for p in found.partitions] == [0], metadata
        produced = conn.produce(topic, 0, build_batch(values, [b"k", None, b"k"]))
        assert produced.error_code == ErrorCode.none and produced.base_offset == 0, produced
        fetched = conn.fetch(topic, 0, 0)
        assert fetched.error_code == ErrorCode.none and fetched.high_watermark == 3, fetched
        assert decode_values(fetched.records) == values, fetched
