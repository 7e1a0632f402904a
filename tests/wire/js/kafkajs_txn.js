// kafkajs transactions for tests/wire/test_transactions.py, in one node process.
//
// Usage: node kafkajs_txn.js OPTIONS_JSON
// Options: bootstrap, transactional_id, source (a topic of `count` records, read in
// `group`), sink (2 partitions), group, count, step (true: after each stage, wait for a
// line on stdin before going on, so the caller can look at the coordinator in between).
// A transactional producer ({transactionalId, idempotent: true, maxInFlightRequests: 1}):
//   1. a transaction of 4 records "commit-I" to the sink, committed;   -> {"ev": "committed"}
//   2. a transaction of 3 records "abort-I", aborted;                   -> {"ev": "aborted"}
//   3. consume-transform-produce: a consumer of `group` (autoCommit off) reads the source;
//      each batch is one transaction: its values + "!" to the sink and the batch's next
//      offset sent to the transaction as the group's. The first of them stops before its
//      commit                                                           -> {"ev": "pending",
//      "offsets": [[partition, offset]]}; once the source is read        -> {"ev": "transformed",
//      "offsets": [[partition, offset]]} (the group's consumer has left by then);
//   4. a transaction of "late" with the offset count + 100 for every source partition sent,
//      aborted;                                                         -> {"ev": "offsets-aborted"}
// then {"ev": "done"}. One JSON object a line on stdout; kafkajs logs go to stderr.
'use strict'

process.env.KAFKAJS_NO_PARTITIONER_WARNING = '1'
const readline = require('readline')
const { Kafka, logLevel } = require('kafkajs')

const o = JSON.parse(process.argv[2])

function emit(ev, fields = {}) {
  process.stdout.write(JSON.stringify({ ev, ...fields }) + '\n')
}

const lines = []
let waiting = null
readline.createInterface({ input: process.stdin }).on('line', line => {
  if (waiting) {
    const resolve = waiting
    waiting = null
    resolve(line)
  } else {
    lines.push(line)
  }
})

// Emit the stage's event; in step mode, wait for the caller's go-ahead.
async function stage(ev, fields = {}) {
  emit(ev, fields)
  if (!o.step) return
  const line = lines.length ? lines.shift() : await new Promise(resolve => (waiting = resolve))
  if (line.trim() !== 'next') throw new Error(`expected "next", got ${JSON.stringify(line)}`)
}

const kafka = new Kafka({
  clientId: 'wire-tests-kafkajs-txn',
  brokers: [o.bootstrap],
  connectionTimeout: 10000,
  requestTimeout: 30000,
  retry: { retries: 5, initialRetryTime: 100, maxRetryTime: 1000 },
  logLevel: logLevel.WARN,
  logCreator: () => ({ namespace, label, log }) => {
    process.stderr.write(JSON.stringify({ level: label, namespace, ...log }) + '\n')
  },
})

const values = (prefix, n) =>
  Array.from({ length: n }, (_, i) => ({ partition: i % 2, value: `${prefix}-${i}` }))

async function main() {
  const producer = kafka.producer({
    transactionalId: o.transactional_id,
    idempotent: true,
    maxInFlightRequests: 1,
  })
  await producer.connect()
  try {
    let txn = await producer.transaction()
    await txn.send({ topic: o.sink, messages: values('commit', 4), acks: -1 })
    await txn.commit()
    await stage('committed')

    txn = await producer.transaction()
    await txn.send({ topic: o.sink, messages: values('abort', 3), acks: -1 })
    await txn.abort()
    await stage('aborted')

    const offsets = await transform(producer)
    await stage('transformed', { offsets: Object.entries(offsets).map(([p, n]) => [+p, n]) })

    txn = await producer.transaction()
    await txn.send({ topic: o.sink, messages: [{ partition: 0, value: 'late' }], acks: -1 })
    const partitions = Object.keys(offsets).map(p => ({
      partition: +p,
      offset: String(o.count + 100),
    }))
    await txn.sendOffsets({ consumerGroupId: o.group, topics: [{ topic: o.source, partitions }] })
    await txn.abort()
    await stage('offsets-aborted')
  } finally {
    await producer.disconnect()
  }
  emit('done')
}

// Read the source in the group; each batch is one transaction. Returns partition -> the
// offset committed with the last transaction on it.
async function transform(producer) {
  const consumer = kafka.consumer({
    groupId: o.group,
    sessionTimeout: 30000,
    maxWaitTimeInMs: 100,
    retry: { retries: 5, initialRetryTime: 100, maxRetryTime: 1000 },
  })
  await consumer.connect()
  const offsets = {}
  let seen = 0
  let first = true
  let finish
  let fail
  const finished = new Promise((resolve, reject) => {
    finish = resolve
    fail = reject
  })
  consumer.on(consumer.events.CRASH, e => fail(e.payload.error))
  try {
    await consumer.subscribe({ topics: [o.source], fromBeginning: true })
    await consumer.run({
      autoCommit: false,
      eachBatch: async ({ batch }) => {
        if (batch.messages.length === 0) return
        const next = Number(batch.lastOffset()) + 1
        const txn = await producer.transaction()
        try {
          await txn.send({
            topic: o.sink,
            messages: batch.messages.map(m => ({
              partition: batch.partition,
              value: `${m.value.toString()}!`,
            })),
            acks: -1,
          })
          const partitions = [{ partition: batch.partition, offset: String(next) }]
          await txn.sendOffsets({ consumerGroupId: o.group, topics: [{ topic: o.source, partitions }] })
          if (first) {
            first = false
            await stage('pending', { offsets: [[batch.partition, next]] })
          }
          await txn.commit()
        } catch (e) {
          if (txn.isActive()) await txn.abort()
          fail(e)
          throw e
        }
        offsets[batch.partition] = next
        seen += batch.messages.length
        if (seen >= o.count) finish()
      },
    })
    await finished
  } finally {
    await consumer.disconnect()
  }
  return offsets
}

main().then(
  () => process.exit(0),
  e => {
    process.stderr.write(`${e && e.stack ? e.stack : e}\n`)
    emit('error', { what: String(e) })
    process.exit(1)
  }
)
