// Runs one kafkajs scenario for tests/wire/test_kafkajs.py.
//
// Usage: node kafkajs_client.js < command.json > result.json
// The command is {"action": "produce" | "fetch" | "admin", "brokers": "HOST:PORT", ...};
// bytes travel as base64 (null stays null). kafkajs logs go to stderr, one JSON object a line.
// The consumer side uses kafkajs' cluster and broker objects with explicit partitions and
// offsets, because kafkajs' Consumer always joins a consumer group.
'use strict'

process.env.KAFKAJS_NO_PARTITIONER_WARNING = '1'
const { Kafka, CompressionTypes, logLevel } = require('kafkajs')

const b64 = buf => (buf === null || buf === undefined ? null : Buffer.from(buf).toString('base64'))
const unb64 = s => (s === null || s === undefined ? null : Buffer.from(s, 'base64'))

function kafkaFor(cmd) {
  return new Kafka({
    clientId: 'wire-tests-kafkajs',
    brokers: [cmd.brokers],
    connectionTimeout: 10000,
    requestTimeout: 30000,
    retry: { retries: 3, initialRetryTime: 100 },
    logLevel: logLevel.WARN,
    logCreator: () => ({ namespace, label, log }) => {
      process.stderr.write(JSON.stringify({ level: label, namespace, ...log }) + '\n')
    },
  })
}

// messages: [{partition, key, value, headers: [[name, value]], timestamp}] (base64 bytes)
async function produce(cmd) {
  const kafka = kafkaFor(cmd)
  const producer = kafka.producer({
    idempotent: !!cmd.idempotent,
    maxInFlightRequests: cmd.idempotent ? 1 : undefined,
    allowAutoTopicCreation: cmd.allowAutoTopicCreation !== false,
  })
  await producer.connect()
  try {
    const messages = cmd.messages.map(m => {
      const headers = {}
      for (const [name, value] of m.headers) {
        const v = unb64(value)
        if (name in headers) {
          headers[name] = [].concat(headers[name], [v])
        } else {
          headers[name] = v
        }
      }
      return {
        partition: m.partition,
        key: unb64(m.key),
        value: unb64(m.value),
        headers,
        timestamp: m.timestamp === null ? undefined : String(m.timestamp),
      }
    })
    const compression = { none: CompressionTypes.None, gzip: CompressionTypes.GZIP }[cmd.compression]
    if (compression === undefined) throw new Error(`compression ${cmd.compression}`)
    const sent = await producer.send({ topic: cmd.topic, messages, compression, acks: -1 })
    return sent.map(r => ({ partition: r.partition, errorCode: r.errorCode, baseOffset: r.baseOffset }))
  } finally {
    await producer.disconnect()
  }
}

function createCluster(kafka) {
  const symbol = Object.getOwnPropertySymbols(kafka).find(
    s => s.description === 'private:Kafka:createCluster'
  )
  return kafka[symbol]({ allowAutoTopicCreation: false })
}

function headerPairs(headers) {
  const pairs = []
  for (const [name, value] of Object.entries(headers || {})) {
    for (const v of Array.isArray(value) ? value : [value]) pairs.push([name, b64(v)])
  }
  return pairs
}

// Every record of the partitions from fetchOffset up to the high watermark.
async function fetch(cmd) {
  const kafka = kafkaFor(cmd)
  const cluster = createCluster(kafka)
  await cluster.connect()
  try {
    await cluster.addTargetTopic(cmd.topic)
    const metadata = cluster.findTopicPartitionMetadata(cmd.topic)
    const records = []
    for (const { partitionId, leader } of metadata) {
      const broker = await cluster.findBroker({ nodeId: String(leader) })
      let offset = BigInt(cmd.fromOffset || 0)
      for (;;) {
        const response = await broker.fetch({
          maxWaitTime: 100,
          minBytes: 1,
          maxBytes: 1 << 20,
          topics: [
            {
              topic: cmd.topic,
              partitions: [{ partition: partitionId, fetchOffset: String(offset), maxBytes: 1 << 20 }],
            },
          ],
        })
        const data = response.responses[0].partitions[0]
        if (data.errorCode !== 0) throw new Error(`fetch error ${data.errorCode} for ${partitionId}`)
        for (const m of data.messages) {
          if (BigInt(m.offset) < offset) continue
          records.push({
            partition: partitionId,
            offset: Number(m.offset),
            timestamp: Number(m.timestamp),
            timestampType: (m.attributes >> 3) & 1,
            magic: m.magicByte,
            key: b64(m.key),
            value: b64(m.value),
            headers: headerPairs(m.headers),
          })
          offset = BigInt(m.offset) + 1n
        }
        if (offset >= BigInt(data.highWatermark)) break
        if (data.messages.length === 0) throw new Error(`no progress at ${offset} of ${partitionId}`)
      }
    }
    return records
  } finally {
    await cluster.disconnect()
  }
}

// Admin round trip: create, list, metadata, offsets, configs, more partitions, delete.
async function admin(cmd) {
  const kafka = kafkaFor(cmd)
  const client = kafka.admin()
  await client.connect()
  const out = {}
  try {
    const topic = cmd.topic
    out.created = await client.createTopics({
      topics: [{ topic, numPartitions: 3, replicationFactor: 1 }],
      waitForLeaders: true,
    })
    out.createdAgain = await client.createTopics({ topics: [{ topic, numPartitions: 3 }] })
    out.listed = (await client.listTopics()).includes(topic)
    const meta = await client.fetchTopicMetadata({ topics: [topic] })
    out.partitions = meta.topics[0].partitions.map(p => p.partitionId).sort()
    out.leaders = meta.topics[0].partitions.map(p => p.leader)
    out.offsets = (await client.fetchTopicOffsets(topic)).map(o => [o.partition, o.low, o.high])
    const configs = await client.describeConfigs({
      resources: [{ type: 2, name: topic }], // 2: TOPIC
      includeSynonyms: false,
    })
    out.configErrors = configs.resources.map(r => r.errorCode)
    out.configNames = configs.resources[0].configEntries.map(e => e.configName)
    const cluster = await client.describeCluster()
    out.brokers = cluster.brokers.map(b => [b.nodeId, b.host, b.port])
    out.controller = cluster.controller
    await client.createPartitions({ topicPartitions: [{ topic, count: 5 }] })
    const more = await client.fetchTopicMetadata({ topics: [topic] })
    out.partitionsAfter = more.topics[0].partitions.map(p => p.partitionId).sort()
    await client.deleteTopics({ topics: [topic] })
    out.listedAfterDelete = (await client.listTopics()).includes(topic)
    return out
  } finally {
    await client.disconnect()
  }
}

// A topic created with configEntries, described, then altered (kafkajs' alterConfigs).
async function configs(cmd) {
  const kafka = kafkaFor(cmd)
  const client = kafka.admin()
  await client.connect()
  const out = {}
  try {
    const topic = cmd.topic
    out.created = await client.createTopics({
      topics: [{ topic, numPartitions: 1, configEntries: [{ name: 'cleanup.policy', value: 'compact' }] }],
    })
    const value = async name => {
      const described = await client.describeConfigs({
        resources: [{ type: 2, name: topic, configNames: [name] }],
        includeSynonyms: false,
      })
      return described.resources[0].configEntries[0].configValue
    }
    out.cleanupPolicy = await value('cleanup.policy')
    await client.alterConfigs({
      resources: [{ type: 2, name: topic, configEntries: [{ name: 'retention.ms', value: '1000' }] }],
    })
    out.retentionMs = await value('retention.ms')
    return out
  } finally {
    await client.disconnect()
  }
}

async function main() {
  const chunks = []
  for await (const chunk of process.stdin) chunks.push(chunk)
  const cmd = JSON.parse(Buffer.concat(chunks).toString())
  const actions = { produce, fetch, admin, configs }
  const result = await actions[cmd.action](cmd)
  process.stdout.write(JSON.stringify(result) + '\n')
}

main().then(
  () => process.exit(0),
  err => {
    process.stderr.write(`FAILED: ${err.name}: ${err.message}\n${err.stack}\n`)
    process.exit(1)
  }
)
