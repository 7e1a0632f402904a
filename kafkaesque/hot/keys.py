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


class _PartitionKey:
    """A partition's key named by its attribute: the partition's prefix, then the name (a
    suffix of PARTITION)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.suffix = name

    def __get__(self, keys: PartitionKeys, owner: type | None = None) -> str:
        return keys.prefix + self.suffix


class _CatalogKey:
    """A cluster-wide key: the catalog prefix, then ``suffix``. ``where`` says which layout
    holds it ("cluster" or "single": only that one; "channel": a pub/sub channel, never a
    key), for ``Keys.patterns``."""

    def __init__(self, suffix: str, where: str = "both") -> None:
        self.suffix = suffix
        self.where = where

    def __get__(self, keys: Keys, owner: type | None = None) -> str:
        return keys.catalog + self.suffix


@dataclass(frozen=True, slots=True)
class PartitionKeys:
    """One partition's keys: its prefix (hash tag included) and the suffixes of PARTITION."""

    prefix: str

    meta = _PartitionKey()
    index = _PartitionKey()
    stats = _PartitionKey()
    producers = _PartitionKey()
    producers_seen = _PartitionKey()
    epochs = _PartitionKey()

    # Open transactions: producer id -> the offset of its first transactional record.
    txn_open = _PartitionKey()

    # Aborted transactions, "pid:first:last" scored by last (the ABORT marker's) offset.
    txn_aborted = _PartitionKey()

    # Ended transactions: producer id -> the serial number of its last transaction
    # whose marker is written here; a late batch of it is refused.
    txn_ended = _PartitionKey()

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

    # -- fixed names: the catalog prefix, then a suffix (what Keys.patterns lists) ------

    # Cluster-wide:
    topics = _CatalogKey("topics")
    producer_ids = _CatalogKey("producer_ids")

    # Present while Redis holds its data: a flush or a restart without persistence
    # removes it, and appends then wait for recovery from the archive.
    incarnation = _CatalogKey("incarnation")
    archiving = _CatalogKey("archiving")
    cluster_id = _CatalogKey("cluster_id")

    # The broker's topic config defaults (``serve --config``), msgpack.
    topic_defaults = _CatalogKey("topic_defaults")

    # Hash: dynamic broker configs (AlterConfigs on a BROKER resource): field "" (the
    # cluster-wide default) or a node id -> msgpack map of config name -> value.
    broker_configs = _CatalogKey("broker_configs")

    # Consumer groups:
    groups = _CatalogKey("groups")

    # The groups with members: the only ones the periodic expiry tick visits.
    groups_active = _CatalogKey("groups:active")

    # The consumer-protocol (KIP-848) groups with members, for the expiry tick.
    consumer_groups_active = _CatalogKey("groups:consumer")

    # Share groups (KIP-932):
    # The share groups with members, for the expiry tick.
    share_groups_active = _CatalogKey("groups:share")

    # Client quotas:
    # Every client quota: field JSON ``[key, [[type, name], ...]]`` -> the value.
    quotas = _CatalogKey("quotas")

    # Grows with every quota change: brokers re-read ``quotas`` when it moved.
    quotas_version = _CatalogKey("quotas:version")

    # ACLs:
    # Every ACL binding: field JSON ``[resource type, name, pattern type, principal,
    # host, operation, permission]`` -> ``1``.
    acls = _CatalogKey("acls")

    # Grows with every ACL change: brokers re-read ``acls`` when it moved.
    acls_version = _CatalogKey("acls:version")

    # Transactions:
    # Every transactional id the coordinator knows.
    transactions = _CatalogKey("txns")

    # Sorted set: transactional id by when the coordinator must act on its own (an
    # open transaction's timeout; a prepared one's markers, at once).
    transactions_due = _CatalogKey("txns:due")

    # SCRAM users:
    # Every SCRAM credential: field "MECHANISM:user" -> "iterations salt stored_key
    # server_key" (base64); never a password.
    scram_credentials = _CatalogKey("scram")

    # The replication id of the primary the partitions' epochs were last brought to
    # (kafkaesque.hot.failover: a Sentinel failover changes it).
    primary_replid = _CatalogKey("primary_replid")

    # Brokers:
    # Every registered broker: node id -> "token\naddress\n" + its msgpack entry.
    brokers = _CatalogKey("brokers")

    # Sorted set: registered node id by its session deadline (ms, Redis' clock).
    brokers_alive = _CatalogKey("brokers:alive")

    # Grows with every broker that joins, leaves or expires.
    membership = _CatalogKey("brokers:membership")

    # The highest record sequence number a broker reported (its appends' floor).
    brokers_sequence = _CatalogKey("brokers:sequence")

    # The last node id assigned to a broker started without one.
    next_node_id = _CatalogKey("brokers:next_node_id")

    # Only on a single Redis: the global sequence counter (a cluster has one per slot).
    gseq = _CatalogKey("gseq", "single")

    # Only on a cluster, its own keys (the catalog slot):
    # The catalog's sequence floor: every new partition's slot counter starts above it.
    sequence_floor = _CatalogKey("sequence_floor", "cluster")

    # Sorted set: the markers below (their key names) of operations done in steps on
    # a cluster, by when they started (ms): what the sweep finishes.
    steps = _CatalogKey("steps", "cluster")

    # Hash: topic -> its config's version, which each partition records (a cluster).
    config_versions = _CatalogKey("config_versions", "cluster")

    # Pub/sub channel: the brokers or the partitions' leaders changed.
    membership_channel = _CatalogKey("brokers:changed", "channel")

    # -- names built from an argument ----------------------------------------------------

    # Cluster-wide:
    def topic(self, name: str) -> str:
        return f"{self.catalog}topic:{name}"

    def appended(self, topic: str) -> str:
        """Pub/sub channel: the appended partition's new log end after every append."""
        return f"{self.ns}:appended:{topic}"

    # A cluster's own keys (catalog slot, or one slot each):
    def slot_hash(self, slot: int) -> str:
        """A cluster slot's hash (field ``seq``: the slot's sequence counter), in the same
        slot as the partitions it holds (kafkaesque/hot/slots.py)."""
        return f"{self.ns}:{{{slots.tag(slot)}}}:slot"

    def creating(self, topic: str) -> str:
        """Present while a topic's partitions are being created, one step each."""
        return f"{self.catalog}creating:{topic}"

    def configuring(self, topic: str) -> str:
        """Present while a topic's new config is applied to its partitions, one step each."""
        return f"{self.catalog}configuring:{topic}"

    def deleting(self, topic: str) -> str:
        """Present while a deleted topic's partitions are deleted, one step each."""
        return f"{self.catalog}deleting:{topic}"

    # Partitions:
    def partition(self, topic: str, partition: int) -> PartitionKeys:
        """A partition's keys; Lua scripts get its ``prefix`` (see ``PARTITION``)."""
        return PartitionKeys(f"{self.ns}:{{{topic}:{partition}}}:")

    # Consumer groups:
    def group(self, group_id: str, part: str = "") -> str:
        """A group's state (``part`` ""), or its ":heartbeats", ":offsets", ":lock", or
        ":consumer" (a consumer-protocol group's state, instead of the classic one)."""
        return f"{self.ns}:group:{{{group_id}}}{part}"

    def group_configs(self, group_id: str) -> str:
        """Hash: the group's dynamic configs (IncrementalAlterConfigs on a GROUP resource),
        name -> canonical value; kept whether or not the group exists, as Kafka's."""
        return self.group(group_id, ":configs")

    # Share groups (KIP-932):
    def share_partition(self, group_id: str, topic: str, partition: int) -> tuple[str, str, str]:
        """A share-partition's keys, in the group's slot: its state hash (``spso``,
        ``speo``, counters), its in-flight records (hash: offset -> state) and its
        acquisition locks (sorted set: "first-last" by deadline ms)."""
        base = self.group(group_id, f":sp:{topic}:{partition}")
        return base, base + ":records", base + ":locks"

    def group_events(self, group_id: str) -> str:
        """Pub/sub channel announcing the group's state changes."""
        return f"{self.ns}:groupevents:{group_id}"

    # Transactions:
    def transaction(self, transactional_id: str, part: str = "") -> str:
        """A transactional id's state (hash; ``part`` "") or its ":lock"."""
        return f"{self.ns}:txn:{{{transactional_id}}}{part}"

    def group_txn_offsets(self, group_id: str) -> str:
        """A group's offsets pending on open transactions (TxnOffsetCommit)."""
        return self.group(group_id, ":txnoffsets")

    # -- the layout, for checking --------------------------------------------------------
    def patterns(self) -> dict[str, re.Pattern[str]]:
        """Every key that may exist, by name: what a full SCAN must match (the cluster
        layout's when ``cluster``)."""
        ns = re.escape(self.ns)
        catalog = re.escape(self.catalog)
        suffix = "|".join(re.escape(s).replace("N", r"\d+") for s in PARTITION)
        cluster_wide = {
            name: re.escape(key.suffix)
            for name, key in vars(Keys).items()
            if isinstance(key, _CatalogKey)
            and key.where in ("both", "cluster" if self.cluster else "single")
        }
        cluster_wide["topic"] = r"topic:.+"
        if self.cluster:
            cluster_wide |= {
                "creating": r"creating:.+",
                "configuring": r"configuring:.+",
                "deleting": r"deleting:.+",
            }
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
