"""Share sessions (KIP-932's ShareFetch sessions), kept per broker process as Kafka's
ShareSessionCache keeps them: keyed by (group, member); epoch 0 opens one (replacing the
member's previous one), each later ShareFetch or ShareAcknowledge must bring the
session's epoch and moves it on, -1 closes it. Errors: SHARE_SESSION_NOT_FOUND,
INVALID_SHARE_SESSION_EPOCH, INVALID_REQUEST (acknowledgements in an opening fetch,
partitions to fetch in a closing one)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from kafkaesque.errors import Code, Refused
from kafkaesque.types import TopicPartition

INITIAL_EPOCH, FINAL_EPOCH = 0, -1
MAX_SESSIONS = 10_000  # the least recently used goes beyond


@dataclass(slots=True)
class ShareSession:
    group_id: str
    member_id: str
    epoch: int  # the epoch the next request must bring
    partitions: list[TopicPartition] = field(default_factory=list)

    def update(self, added: Iterable[TopicPartition], forgotten: Iterable[TopicPartition]) -> None:
        gone = set(forgotten)
        kept = [tp for tp in self.partitions if tp not in gone]
        for tp in added:
            if tp not in kept:
                kept.append(tp)
        self.partitions = kept

    def advance(self) -> None:
        self.epoch = 1 if self.epoch >= 2**31 - 1 else self.epoch + 1


class ShareSessions:
    """This process's share sessions; ``on_closed`` hears of a session that ended (closed,
    replaced or evicted): the member's acquired records there go back to the group."""

    def __init__(self, on_closed: Callable[[ShareSession], None] | None = None) -> None:
        self._sessions: OrderedDict[tuple[str, str], ShareSession] = OrderedDict()
        self.on_closed = on_closed

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, group_id: str, member_id: str) -> ShareSession | None:
        return self._sessions.get((group_id, member_id))

    def open(
        self, group_id: str, member_id: str, partitions: Iterable[TopicPartition]
    ) -> ShareSession:
        """A new session (epoch 0), replacing the member's previous one."""
        old = self._sessions.pop((group_id, member_id), None)
        if old is not None:
            self._closed(old)
        session = ShareSession(group_id, member_id, 1, list(dict.fromkeys(partitions)))
        self._sessions[(group_id, member_id)] = session
        while len(self._sessions) > MAX_SESSIONS:
            _, evicted = self._sessions.popitem(last=False)
            self._closed(evicted)
        return session

    def find(self, group_id: str, member_id: str, epoch: int) -> ShareSession:
        """The session a request at ``epoch`` (not 0) continues; its epoch moves on unless
        the request closes it (-1). Raises Refused."""
        session = self._sessions.get((group_id, member_id))
        if session is None:
            raise Refused(
                Code.SHARE_SESSION_NOT_FOUND,
                f"no share session for member {member_id} of group {group_id}",
            )
        if epoch == FINAL_EPOCH:
            return session
        if epoch != session.epoch:
            raise Refused(
                Code.INVALID_SHARE_SESSION_EPOCH,
                f"share session epoch {epoch}, expected {session.epoch}",
            )
        session.advance()
        self._sessions.move_to_end((group_id, member_id))
        return session

    def drop(self, group_id: str, member_id: str) -> None:
        """Forget the member's session (it left the group; its records were released)."""
        self._sessions.pop((group_id, member_id), None)

    def close(self, session: ShareSession) -> None:
        if self._sessions.pop((session.group_id, session.member_id), None) is not None:
            self._closed(session)

    def _closed(self, session: ShareSession) -> None:
        if self.on_closed is not None:
            self.on_closed(session)
