"""The Redis layout: every key, channel and hash tag kafkaesque uses, named in one place.

Python builds keys through ``Keys``; the Lua scripts get them through KEYS, or get a
partition's prefix (``Keys.partition``) and append the suffixes listed in ``PARTITION``.
``Keys.patterns`` describes every key that may exist (docs/redis-layout.md).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio.cluster
import redis.cluster

from kafkaesque.hot import slots

# Suffixes after a partition's prefix "NS:{TOPIC:P}:" (the hash tag keeps a partition's keys
# in one slot, so each script touches one slot). Lua's common.lua appends the same ones.
PARTITION = {
    "meta": "hash: log end/start offsets, DeleteRecords' floor, leader epoch, leader and "
    "preferred leader, the open page's counters, settings, the primary's replication id "
    "(replid) and the archiver's barrier counter",
    "index": "sorted set: page number by its first offset",
    "page:N": "list: page N's RecordBatch v2 batches",
    "bidx:N": "string: 16 bytes per batch of page N (base offset, first global sequence)",
    "stats": "hash: closed page -> 'records bytes max_timestamp'",
    "producers": "hash: producer id -> epoch and its last 5 batches' sequences and offsets",
    "producers_seen": "sorted set: producer id by last use (ms)",
    "epochs": "hash: leader epoch -> the offset it starts at",
    "txn_open": "hash: producer id -> first offset of its open transaction",
    "txn_aborted": "sorted set: 'pid:first:last' of aborted transactions by last offset",
    "txn_ended": "hash: producer id -> serial number of its last transaction ended here",
}


@dataclass(frozen=True, slots=True)
class PartitionKeys:
    """One partition's keys: its prefix (hash tag included) and the suffixes of PARTITION."""

    prefix: str

    @property
    def meta(self) -> str:
        return self.prefix + "meta"

    @property
    def index(self) -> str:
        return self.prefix + "index"

    @property
    def stats(self) -> str:
        return self.prefix + "stats"

    @property
    def producers(self) -> str:
        return self.prefix + "producers"

    @property
    def producers_seen(self) -> str:
        return self.prefix + "producers_seen"

    @property
    def epochs(self) -> str:
        return self.prefix + "epochs"

    @property
    def txn_open(self) -> str:
        """Open transactions: producer id -> the offset of its first transactional record."""
        return self.prefix + "txn_open"

    @property
    def txn_aborted(self) -> str:
        """Aborted transactions, "pid:first:last" scored by last (the ABORT marker's) offset."""
        return self.prefix + "txn_aborted"

    @property
    def txn_ended(self) -> str:
        """Ended transactions: producer id -> the serial number of its last transaction
        whose marker is written here; a late batch of it is refused."""
        return self.prefix + "txn_ended"

    def page(self, number: int) -> str:
        return f"{self.prefix}page:{number}"

    def batch_index(self, number: int) -> str:
        return f"{self.prefix}bidx:{number}"


@dataclass(frozen=True, slots=True)
class Keys:
    """Key names under one namespace (``ks`` by default).

    With ``cluster`` (a Redis Cluster) every cluster-wide key carries the catalog hash tag
    ``{NS}`` ("ks:{ks}:topics"), so they share one slot and their scripts and MULTIs keep
    working; on a single Redis their names stay "ks:topics" and so on. A partition's tag
    ``{NAME:P}`` always holds a colon, so it never equals the catalog's."""

    ns: str = "ks"
    cluster: bool = False
    # The prefix of the cluster-wide keys: "NS:", or "NS:{NS}:" on a cluster.
    catalog: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        catalog = f"{self.ns}:{{{self.ns}}}:" if self.cluster else f"{self.ns}:"
        object.__setattr__(self, "catalog", catalog)

    @classmethod
    def of(cls, client: Any, ns: str = "ks") -> Keys:
        """The layout for a client: the cluster one for a Redis Cluster client."""
        return cls(ns, is_cluster(client))

    # -- cluster-wide ---------------------------------------------------------------
    @property
    def topics(self) -> str:
        return f"{self.catalog}topics"

    def topic(self, name: str) -> str:
        return f"{self.catalog}topic:{name}"

    @property
    def gseq(self) -> str:
        return f"{self.catalog}gseq"

    @property
    def producer_ids(self) -> str:
        return f"{self.catalog}producer_ids"

    @property
    def incarnation(self) -> str:
        """Present while Redis holds its data: a flush or a restart without persistence
        removes it, and appends then wait for recovery from the archive."""
        return f"{self.catalog}incarnation"

    @property
    def archiving(self) -> str:
        return f"{self.catalog}archiving"

    @property
    def cluster_id(self) -> str:
        return f"{self.catalog}cluster_id"

    @property
    def topic_defaults(self) -> str:
        """The broker's topic config defaults (``serve --config``), msgpack."""
        return f"{self.catalog}topic_defaults"

    @property
    def broker_configs(self) -> str:
        """Hash: dynamic broker configs (AlterConfigs on a BROKER resource): field "" (the
        cluster-wide default) or a node id -> msgpack map of config name -> value."""
        return f"{self.catalog}broker_configs"

    def appended(self, topic: str) -> str:
        """Pub/sub channel: the appended partition's new log end after every append."""
        return f"{self.ns}:appended:{topic}"

    # -- a cluster's own keys (catalog slot, or one slot each) -----------------------------
    def slot_hash(self, slot: int) -> str:
        """A cluster slot's hash (field ``seq``: the slot's sequence counter), in the same
        slot as the partitions it holds (kafkaesque/hot/slots.py)."""
        return f"{self.ns}:{{{slots.tag(slot)}}}:slot"

    @property
    def sequence_floor(self) -> str:
        """The catalog's sequence floor: every new partition's slot counter starts above it."""
        return f"{self.catalog}sequence_floor"

    @property
    def steps(self) -> str:
        """Sorted set: the markers below (their key names) of operations done in steps on
        a cluster, by when they started (ms): what the sweep finishes."""
        return f"{self.catalog}steps"

    @property
    def config_versions(self) -> str:
        """Hash: topic -> its config's version, which each partition records (a cluster)."""
        return f"{self.catalog}config_versions"

    def creating(self, topic: str) -> str:
        """Present while a topic's partitions are being created, one step each."""
        return f"{self.catalog}creating:{topic}"

    def configuring(self, topic: str) -> str:
        """Present while a topic's new config is applied to its partitions, one step each."""
        return f"{self.catalog}configuring:{topic}"

    def deleting(self, topic: str) -> str:
        """Present while a deleted topic's partitions are deleted, one step each."""
        return f"{self.catalog}deleting:{topic}"

    # -- partitions -------------------------------------------------------------------
    def partition(self, topic: str, partition: int) -> PartitionKeys:
        """A partition's keys; Lua scripts get its ``prefix`` (see ``PARTITION``)."""
        return PartitionKeys(f"{self.ns}:{{{topic}:{partition}}}:")

    # -- consumer groups ----------------------------------------------------------------
    @property
    def groups(self) -> str:
        return f"{self.catalog}groups"

    @property
    def groups_active(self) -> str:
        """The groups with members: the only ones the periodic expiry tick visits."""
        return f"{self.catalog}groups:active"

    @property
    def consumer_groups_active(self) -> str:
        """The consumer-protocol (KIP-848) groups with members, for the expiry tick."""
        return f"{self.catalog}groups:consumer"

    def group(self, group_id: str, part: str = "") -> str:
        """A group's state (``part`` ""), or its ":heartbeats", ":offsets", ":lock", or
        ":consumer" (a consumer-protocol group's state, instead of the classic one)."""
        return f"{self.ns}:group:{{{group_id}}}{part}"

    def group_configs(self, group_id: str) -> str:
        """Hash: the group's dynamic configs (IncrementalAlterConfigs on a GROUP resource),
        name -> canonical value; kept whether or not the group exists, as Kafka's."""
        return self.group(group_id, ":configs")

    # -- share groups (KIP-932) ---------------------------------------------------------
    @property
    def share_groups_active(self) -> str:
        """The share groups with members, for the expiry tick."""
        return f"{self.catalog}groups:share"

    def share_partition(self, group_id: str, topic: str, partition: int) -> tuple[str, str, str]:
        """A share-partition's keys, in the group's slot: its state hash (``spso``,
        ``speo``, counters), its in-flight records (hash: offset -> state) and its
        acquisition locks (sorted set: "first-last" by deadline ms)."""
        base = self.group(group_id, f":sp:{topic}:{partition}")
        return base, base + ":records", base + ":locks"

    def group_events(self, group_id: str) -> str:
        """Pub/sub channel announcing the group's state changes."""
        return f"{self.ns}:groupevents:{group_id}"

    # -- client quotas -------------------------------------------------------------------
    @property
    def quotas(self) -> str:
        """Every client quota: field JSON ``[key, [[type, name], ...]]`` -> the value."""
        return f"{self.catalog}quotas"

    @property
    def quotas_version(self) -> str:
        """Grows with every quota change: brokers re-read ``quotas`` when it moved."""
        return f"{self.catalog}quotas:version"

    # -- ACLs ----------------------------------------------------------------------------
    @property
    def acls(self) -> str:
        """Every ACL binding: field JSON ``[resource type, name, pattern type, principal,
        host, operation, permission]`` -> ``1``."""
        return f"{self.catalog}acls"

    @property
    def acls_version(self) -> str:
        """Grows with every ACL change: brokers re-read ``acls`` when it moved."""
        return f"{self.catalog}acls:version"

    # -- transactions ---------------------------------------------------------------------
    @property
    def transactions(self) -> str:
        """Every transactional id the coordinator knows."""
        return f"{self.catalog}txns"

    @property
    def transactions_due(self) -> str:
        """Sorted set: transactional id by when the coordinator must act on its own (an
        open transaction's timeout; a prepared one's markers, at once)."""
        return f"{self.catalog}txns:due"

    def transaction(self, transactional_id: str, part: str = "") -> str:
        """A transactional id's state (hash; ``part`` "") or its ":lock"."""
        return f"{self.ns}:txn:{{{transactional_id}}}{part}"

    def group_txn_offsets(self, group_id: str) -> str:
        """A group's offsets pending on open transactions (TxnOffsetCommit)."""
        return self.group(group_id, ":txnoffsets")

    # -- SCRAM users ---------------------------------------------------------------------
    @property
    def scram_credentials(self) -> str:
        """Every SCRAM credential: field "MECHANISM:user" -> "iterations salt stored_key
        server_key" (base64); never a password."""
        return f"{self.catalog}scram"

    @property
    def primary_replid(self) -> str:
        """The replication id of the primary the partitions' epochs were last brought to
        (kafkaesque.hot.failover: a Sentinel failover changes it)."""
        return f"{self.catalog}primary_replid"

    # -- brokers -------------------------------------------------------------------------
    @property
    def brokers(self) -> str:
        """Every registered broker: node id -> "token\\naddress\\n" + its msgpack entry."""
        return f"{self.catalog}brokers"

    @property
    def brokers_alive(self) -> str:
        """Sorted set: registered node id by its session deadline (ms, Redis' clock)."""
        return f"{self.catalog}brokers:alive"

    @property
    def membership(self) -> str:
        """Grows with every broker that joins, leaves or expires."""
        return f"{self.catalog}brokers:membership"

    @property
    def brokers_sequence(self) -> str:
        """The highest record sequence number a broker reported (its appends' floor)."""
        return f"{self.catalog}brokers:sequence"

    @property
    def next_node_id(self) -> str:
        """The last node id assigned to a broker started without one."""
        return f"{self.catalog}brokers:next_node_id"

    @property
    def membership_channel(self) -> str:
        """Pub/sub channel: the brokers or the partitions' leaders changed."""
        return f"{self.catalog}brokers:changed"

    # -- the layout, for checking --------------------------------------------------------
    def patterns(self) -> dict[str, re.Pattern[str]]:
        """Every key that may exist, by name: what a full SCAN must match (the cluster
        layout's when ``cluster``)."""
        ns = re.escape(self.ns)
        catalog = re.escape(self.catalog)
        suffix = "|".join(re.escape(s).replace("N", r"\d+") for s in PARTITION)
        cluster_wide = {
            "topics": "topics",
            "topic": r"topic:.+",
            "producer_ids": "producer_ids",
            "incarnation": "incarnation",
            "archiving": "archiving",
            "cluster_id": "cluster_id",
            "topic_defaults": "topic_defaults",
            "broker_configs": "broker_configs",
            "groups": "groups",
            "groups_active": r"groups:active",
            "consumer_groups_active": r"groups:consumer",
            "share_groups_active": r"groups:share",
            "quotas": "quotas",
            "quotas_version": r"quotas:version",
            "acls": "acls",
            "acls_version": r"acls:version",
            "transactions": "txns",
            "transactions_due": r"txns:due",
            "scram_credentials": "scram",
            "brokers": "brokers",
            "brokers_alive": r"brokers:alive",
            "membership": r"brokers:membership",
            "brokers_sequence": r"brokers:sequence",
            "next_node_id": r"brokers:next_node_id",
            "primary_replid": "primary_replid",
        }
        if self.cluster:
            cluster_wide |= {
                "sequence_floor": "sequence_floor",
                "steps": "steps",
                "config_versions": "config_versions",
                "creating": r"creating:.+",
                "configuring": r"configuring:.+",
                "deleting": r"deleting:.+",
            }
        else:
            cluster_wide["gseq"] = "gseq"
        tagged = {
            "partition": rf"\{{.+:\d+\}}:(?:{suffix})",
            "group": r"group:\{.*\}(?::heartbeats|:offsets|:lock|:consumer|:txnoffsets|:configs"
            r"|:share|:sp|:sp:[a-zA-Z0-9._-]+:\d+(?::records|:locks)?)?",
            "transaction": r"txn:\{.*\}(?::lock)?",
        }
        if self.cluster:
            tagged["slot_hash"] = r"\{[0-9a-z]+\}:slot"
        patterns = {name: rf"{catalog}{p}" for name, p in cluster_wide.items()}
        patterns |= {name: rf"{ns}:{p}" for name, p in tagged.items()}
        return {name: re.compile(rf"{p}\Z", re.S) for name, p in patterns.items()}


async def serving(client: Any, key: str) -> Any:
    """The client of the server holding ``key``: on a Redis Cluster a plain client of the
    primary of its slot (redis-py's slot map), else ``client`` itself. Waits such as WAIT
    and WAITAOF count one connection's writes, so they go to that server."""
    return await client.for_key(key) if is_cluster(client) else client


def is_cluster(client: Any) -> bool:
    """Whether ``client`` is a Redis Cluster client (asyncio or not)."""
    return isinstance(client, redis.asyncio.cluster.RedisCluster | redis.cluster.RedisCluster)
