// A long-running kafkajs group member: joins groupId, subscribes to topic
// from the beginning and, for each message, prints it as a JSON line and
// then commits the offset after it (autoCommit off), until SIGTERM, on
// which it disconnects (leaving the group) and exits 0.
//
// stdin: {"topic": "...", "groupId": "..."}
// stdout, one JSON object a line:
//   {"event": "join", "memberId": "...", "assigned": [0, 1]}
//   {"event": "message", "partition": 0, "offset": "0", "value": "..."}
//   {"event": "left"}
'use strict'

const { client, readStdin } = require('./common')

function print (obj) {
  process.stdout.write(JSON.stringify(obj) + '\n')
}

async function run () {
  const input = await readStdin()
  const consumer = client().consumer({
    groupId: input.groupId,
    sessionTimeout: 10000,
    rebalanceTimeout: 10000,
    heartbeatInterval: 500,
    maxWaitTimeInMs: 500,
  })
  consumer.on(consumer.events.GROUP_JOIN, (e) => {
    const assigned = (e.payload.memberAssignment[input.topic] || []).slice().sort((a, b) => a - b)
    print({ event: 'join', memberId: e.payload.memberId, assigned })
  })
  let stopping = null
  process.on('SIGTERM', () => {
    if (stopping) return
    stopping = consumer.disconnect().then(
      () => { print({ event: 'left' }); process.exit(0) },
      (err) => { process.stderr.write(`FAILED: disconnect: ${err && err.stack ? err.stack : err}\n`); process.exit(1) },
    )
  })
  await consumer.connect()
  await consumer.subscribe({ topics: [input.topic], fromBeginning: true })
  await consumer.run({
    autoCommit: false,
    eachMessage: async ({ topic, partition, message }) => {
      print({
        event: 'message',
        partition,
        offset: message.offset,
        value: message.value === null ? null : message.value.toString('utf8'),
      })
      await consumer.commitOffsets([{ topic, partition, offset: String(Number(message.offset) + 1) }])
    },
  })
}

run().catch((err) => {
  process.stderr.write(`FAILED: ${err && err.stack ? err.stack : err}\n`)
  process.exit(1)
})
