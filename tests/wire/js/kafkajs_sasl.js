// Produces and consumes over a secured listener for tests/wire/test_tls_sasl.py.
//
// Usage: node kafkajs_sasl.js < command.json > result.json
// command: {"brokers": "HOST:PORT", "topic": T, "count": N, "ca": PEM path or null,
//           "cert", "key": the client certificate and key (PEM paths) for mutual TLS, or null,
//           "mechanism": "plain" | "scram-sha-256" | "scram-sha-512" | null (no SASL),
//           "username", "password"}
// Prints {"values": [...]}: the values of the first N records, read back with a consumer group.
'use strict'

process.env.KAFKAJS_NO_PARTITIONER_WARNING = '1'
const fs = require('fs')
const { Kafka, logLevel } = require('kafkajs')

async function main() {
  const cmd = JSON.parse(fs.readFileSync(0, 'utf8'))
  let ssl = false
  if (cmd.ca) {
    ssl = { ca: [fs.readFileSync(cmd.ca, 'utf8')] }
    if (cmd.cert) {
      ssl.cert = fs.readFileSync(cmd.cert, 'utf8')
      ssl.key = fs.readFileSync(cmd.key, 'utf8')
    }
  }
  const kafka = new Kafka({
    clientId: 'wire-tests-kafkajs-sasl',
    brokers: [cmd.brokers],
    ssl,
    sasl: cmd.mechanism
      ? { mechanism: cmd.mechanism, username: cmd.username, password: cmd.password }
      : undefined,
    connectionTimeout: 10000,
    retry: { retries: 3, initialRetryTime: 100 },
    logLevel: logLevel.WARN,
    logCreator: () => ({ namespace, label, log }) => {
      process.stderr.write(JSON.stringify({ level: label, namespace, ...log }) + '\n')
    },
  })
  const producer = kafka.producer()
  await producer.connect()
  const messages = []
  for (let i = 0; i < cmd.count; i++) messages.push({ value: `value-${i}` })
  await producer.send({ topic: cmd.topic, messages })
  await producer.disconnect()

  const consumer = kafka.consumer({ groupId: cmd.topic, rebalanceTimeout: 5000 })
  await consumer.connect()
  await consumer.subscribe({ topic: cmd.topic, fromBeginning: true })
  const values = []
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`only ${values.length} records`)), 60000)
    consumer.run({
      eachMessage: async ({ message }) => {
        values.push(message.value.toString())
        if (values.length >= cmd.count) {
          clearTimeout(timer)
          resolve()
        }
      },
    })
  })
  await consumer.disconnect()
  process.stdout.write(JSON.stringify({ values: values.slice(0, cmd.count) }))
}

main().catch(err => {
  process.stderr.write(String(err && err.stack ? err.stack : err) + '\n')
  process.exit(1)
})
