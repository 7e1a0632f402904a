"""The checks a group request passes before it acts, as Kafka 4's group coordinator makes
them (GroupMetadataManager, ClassicGroup): whether a member may heartbeat, sync, commit,
join a full group, whether offsets may be deleted, and when committed offsets expire.

Pure functions of a ``Group`` (or None: no such group) and the request's fields.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kafkaesque.errors import Code
from kafkaesque.groups.consumer_protocol import decode_subscription
from kafkaesque.groups.types import GroupState

if TYPE_CHECKING:
    from kafkaesque.groups.state import Group

CONSUMER_PROTOCOL = "consumer"  # the protocol type of Kafka consumers' groups
FIRST_EPOCH_AWARE_COMMIT = 9  # OffsetCommit v9: GROUP_ID_NOT_FOUND, STALE_MEMBER_EPOCH


def member_error(group: Group, member_id: str, instance_id: str | None) -> Code:
    """Whether the request's member is in the group (Kafka's validateMember): a static
    member is known by its instance id, and an older id under it is fenced."""
    if instance_id is not None:
        owner = group.instance_owner(instance_id)
        if owner is None:
            return Code.UNKNOWN_MEMBER_ID
        return Code.NONE if owner == member_id else Code.FENCED_INSTANCE_ID
    return Code.NONE if member_id in group.members else Code.UNKNOWN_MEMBER_ID


def check_member(
    group: Group | None, member_id: str, instance_id: str | None, generation: int
) -> Code:
    """Whether a request of this member and generation may act on the group."""
    if group is None:
        return Code.UNKNOWN_MEMBER_ID
    error = member_error(group, member_id, instance_id)
    if error:
        return error
    if generation != group.generation:
        return Code.ILLEGAL_GENERATION
    return Code.NONE


def sync_error(
    group: Group | None,
    member_id: str,
    instance_id: str | None,
    generation: int,
    protocol_type: str | None = None,
    protocol_name: str | None = None,
) -> Code:
    """Whether a SyncGroup may act; v5 names the protocol type and name the member got
    from its JoinGroup, which must be the group's (when both sides have one)."""
    error = check_member(group, member_id, instance_id, generation)
    if error:
        return error
    assert group is not None
    for sent, current in ((protocol_type, group.protocol_type), (protocol_name, group.protocol)):
        if sent is not None and current and sent != current:
            return Code.INCONSISTENT_GROUP_PROTOCOL
    return Code.NONE


def sync_outcome(
    group: Group | None, member_id: str, instance_id: str | None, generation: int, late: bool
) -> Code | None:
    """A follower waiting for the leader's assignment: its answer, or None to wait on.
    ``late``: the member's session timeout passed while it waited."""
    error = check_member(group, member_id, instance_id, generation)
    if error:
        return error
    assert group is not None
    if group.state == GroupState.STABLE:
        return Code.NONE
    if group.state != GroupState.COMPLETING or late:
        return Code.REBALANCE_IN_PROGRESS
    return None


def heartbeat_error(
    group: Group | None, member_id: str, instance_id: str | None, generation: int
) -> Code:
    """A Heartbeat's answer: REBALANCE_IN_PROGRESS tells the member to join again."""
    error = check_member(group, member_id, instance_id, generation)
    if error:
        return error
    assert group is not None
    return Code.REBALANCE_IN_PROGRESS if group.state == GroupState.PREPARING else Code.NONE


def commit_error(
    group: Group | None,
    member_id: str,
    instance_id: str | None,
    generation: int,
    api_version: int = FIRST_EPOCH_AWARE_COMMIT,
) -> Code:
    """Whether an OffsetCommit may store its offsets (Kafka's validateOffsetCommit). A
    negative generation is a standalone commit (admin tools, the CLI, consumers that
    assign themselves), allowed while the group has no members."""
    if group is None:
        if generation < 0:
            return Code.NONE
        # v9 says what happened; older versions keep the code their clients expect.
        if api_version >= FIRST_EPOCH_AWARE_COMMIT:
            return Code.GROUP_ID_NOT_FOUND
        return Code.ILLEGAL_GENERATION
    if generation < 0 and group.state == GroupState.EMPTY:
        return Code.NONE
    if generation >= 0 or member_id or instance_id is not None:
        error = check_member(group, member_id, instance_id, generation)
        if error:
            return error
    elif group.state != GroupState.EMPTY:
        return Code.UNKNOWN_MEMBER_ID
    # As Kafka: commits of the current generation are kept while a rebalance is being
    # prepared (members learn of it by heartbeat); between the join and the sync the
    # generation is not settled yet.
    if group.state == GroupState.COMPLETING:
        return Code.REBALANCE_IN_PROGRESS
    return Code.NONE


def consumer_member_epoch_error(
    received_epoch: int,
    member_epoch: int,
    *,
    classic_member: bool,
    commit_version: int | None = None,
) -> Code:
    """For KIP-848 (consumer-protocol) groups: whether an OffsetCommit (``commit_version``
    its api version) or an OffsetFetch (None) of a member whose epoch is ``member_epoch``
    may go on with ``received_epoch`` (OffsetCommit's generation_id_or_member_epoch,
    OffsetFetch v9's member_epoch), as Kafka's ConsumerGroup.validateOffsetCommit/Fetch.
    ``classic_member``: the member joined with JoinGroup (a classic client in a consumer
    group), which keeps the classic codes. The caller answers UNKNOWN_MEMBER_ID for a
    member it does not know, and lets a negative epoch through while the group is empty."""
    new_protocol = not classic_member
    if commit_version is not None and new_protocol and commit_version < FIRST_EPOCH_AWARE_COMMIT:
        return Code.UNSUPPORTED_VERSION  # KIP-848 members must commit with v9+
    if received_epoch == member_epoch:
        return Code.NONE
    old_commit = commit_version is not None and commit_version < FIRST_EPOCH_AWARE_COMMIT
    if classic_member or old_commit:
        return Code.ILLEGAL_GENERATION
    return Code.STALE_MEMBER_EPOCH


def accepts_member(group: Group, member_id: str, max_size: int) -> bool:
    """Whether a JoinGroup may go on in a group of at most ``max_size`` members (Kafka's
    acceptJoiningMember): members already in the round always, new ones while there is
    room. While a round is prepared only the members that joined it count, so a group
    over a lowered limit sheds the members that rejoin last."""
    member = group.members.get(member_id)
    if group.state == GroupState.EMPTY:
        return True
    if group.state == GroupState.PREPARING:
        if member is not None and member.joined:
            return True
        return sum(m.joined for m in group.members.values()) < max_size
    return member is not None or len(group.members) < max_size


def subscribed_topics(group: Group) -> set[str] | None:
    """The topics the members of a "consumer" group subscribe to; None if unknown (a
    member's metadata does not parse)."""
    topics: set[str] = set()
    for m in group.members.values():
        data = m.metadata_for(group.protocol) if group.protocol else m.protocols[0][1]
        subscribed = decode_subscription(data)
        if subscribed is None:
            return None
        topics.update(subscribed)
    return topics


def is_subscribed(group: Group, topic: str) -> bool:
    """Whether a member of the group may consume ``topic`` (Kafka's isSubscribedToTopic):
    only "consumer" groups say; when their metadata cannot be read, assume so."""
    if group.protocol_type != CONSUMER_PROTOCOL:
        return False
    topics = subscribed_topics(group)
    return topic in topics if topics is not None else True


def offset_delete_error(group: Group | None) -> Code:
    """Whether OffsetDelete may delete a group's offsets at all (per topic, it is also
    refused while a member subscribes to it: GROUP_SUBSCRIBED_TO_TOPIC)."""
    if group is None:
        return Code.GROUP_ID_NOT_FOUND
    if group.members and group.protocol_type != CONSUMER_PROTOCOL:
        return Code.NON_EMPTY_GROUP  # no way to know which topics its members use
    return Code.NONE


def offset_expires_from(group: Group, topic: str, commit_ms: int) -> int | None:
    """When a committed offset starts its retention (offsets.retention.minutes), or None
    while it is kept (Kafka's offsetExpirationCondition): a standalone group's offsets
    from their commit; an empty group's from when it became empty; a stable consumer
    group's offsets of topics no member subscribes to from their commit."""
    if not group.protocol_type:
        return commit_ms
    if group.state == GroupState.EMPTY:
        return group.empty_since_ms if group.empty_since_ms is not None else commit_ms
    if (
        group.state == GroupState.STABLE
        and group.protocol_type == CONSUMER_PROTOCOL
        and (topics := subscribed_topics(group)) is not None
        and topic not in topics
    ):
        return commit_ms
    return None
