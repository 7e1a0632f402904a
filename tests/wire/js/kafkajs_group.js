// One kafkajs consumer group member for tests/wire/test_groups_kafkajs.py (see
// tests/wire/groups_common.py: MemberProcess).
//
// Usage: node kafkajs_group.js OPTIONS_JSON
// Options: bootstrap, topic, group, client_id, session_ms, heartbeat_ms, commit ("sync":
// commit after every batch, "none"), max_records (unused), wait_go.
// Prints one JSON object a line on stdout: {"ev": "ready"}, {"ev": "assignment",
// "partitions": [...]} after every join (kafkajs' GROUP_JOIN), {"ev": "records", "items":
// [[partition, offset, value], ...]} before committing them, {"ev": "error", "what": ...},
// {"ev": "closed"}. Reads "go" (subscribe and run) and "stop" (disconnect: LeaveGroup) on
// stdin; SIGTERM stops too. kafkajs logs go to stderr.
'use strict'

process.env.KAFKAJS_NO_PARTITIONER_WARNING = '1'
const readline = require('readline')
const { Kafka, logLevel } = require('kafkajs')

const o = JSON.parse(process.argv[2])

function emit(ev, fields = {}) {
  process.stdout.write(JSON.stringify({ ev, t: Date.now() / 1000, ...fields }) + '\n')
}

const kafka = new Kafka({
  clientId: o.client_id,
  brokers: [o.bootstrap],
  connectionTimeout: 10000,
  requestTimeout: 30000,
  retry: { retries: 10, initialRetryTime: 100, maxRetryTime: 1000 },
  logLevel: logLevel.WARN,
  logCreator: () => ({ namespace, label, log }) => {
    process.stderr.write(JSON.stringify({ level: label, namespace, ...log }) + '\n')
  },
})

const consumer = kafka.consumer({
  groupId: o.group,
  sessionTimeout: o.session_ms,
  rebalanceTimeout: 10000,
  heartbeatInterval: o.heartbeat_ms,
  maxWaitTimeInMs: 100,
  retry: { retries: 10, initialRetryTime: 100, maxRetryTime: 1000 },
})

let stopping = null
async function stop() {
  if (stopping) return stopping
  stopping = (async () => {
    try {
      await consumer.disconnect()
    } catch (e) {
      emit('error', { what: `disconnect: ${e}` })
    }
    emit('closed')
    process.exit(0)
  })()
  return stopping
}

async function start() {
  await consumer.connect()
  consumer.on(consumer.events.GROUP_JOIN, e => {
    const partitions = (e.payload.memberAssignment[o.topic] || []).slice().sort((a, b) => a - b)
    emit('assign', { partitions })
    emit('assignment', { partitions, generation: e.payload.generationId })
  })
  consumer.on(consumer.events.CRASH, e => emit('error', { what: `crash: ${e.payload.error}` }))
  await consumer.subscribe({ topics: [o.topic], fromBeginning: true })
  emit('subscribed')
  await consumer.run({
    autoCommit: o.commit !== 'none',
    autoCommitThreshold: 1,
    eachBatchAutoResolve: false,
    eachBatch: async ({ batch, resolveOffset, heartbeat, commitOffsetsIfNecessary, isRunning }) => {
      const items = []
      for (const m of batch.messages) {
        if (!isRunning() || stopping) break
        items.push([batch.partition, Number(m.offset), m.value.toString()])
      }
      if (items.length) {
        emit('records', { items })
        resolveOffset(String(items[items.length - 1][1]))
        await commitOffsetsIfNecessary()
      }
      await heartbeat()
    },
  })
}

emit('ready')
let started = false
const go = () => {
  if (started) return
  started = true
  start().catch(e => {
    emit('error', { what: `start: ${e}` })
    process.exit(1)
  })
}
if (!o.wait_go) go()
readline.createInterface({ input: process.stdin }).on('line', line => {
  const command = line.trim()
  if (command === 'go') go()
  else if (command === 'stop') stop()
}).on('close', () => stop())
process.on('SIGTERM', () => stop())
