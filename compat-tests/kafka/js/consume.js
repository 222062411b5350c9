// A kafkajs group consumer: joins groupId, subscribes to topic from the
// beginning, takes count messages (autoCommit off), commits the offset
// after the last message it took on each partition, disconnects (leaving
// the group) and prints what it took, in the order it came.
//
// stdin: {"topic": "...", "groupId": "...", "count": 20}
// stdout: {"messages": [{"partition": 0, "offset": "0", "value": "..."}],
//          "committed": [{"topic", "partition", "offset"}]}
'use strict'

const { client, readStdin, main } = require('./common')

main(async () => {
  const input = await readStdin()
  const consumer = client().consumer({
    groupId: input.groupId,
    sessionTimeout: 10000,
    heartbeatInterval: 1000,
    maxWaitTimeInMs: 500,
  })
  await consumer.connect()
  try {
    await consumer.subscribe({ topics: [input.topic], fromBeginning: true })
    const messages = []
    await new Promise((resolve, reject) => {
      consumer.run({
        autoCommit: false,
        eachMessage: async ({ partition, message }) => {
          if (messages.length >= input.count) return
          messages.push({
            partition,
            offset: message.offset,
            value: message.value === null ? null : message.value.toString('utf8'),
          })
          if (messages.length === input.count) resolve()
        },
      }).catch(reject)
    })
    const next = new Map()
    for (const m of messages) {
      next.set(m.partition, Math.max(next.get(m.partition) ?? 0, Number(m.offset) + 1))
    }
    const committed = [...next].map(([partition, offset]) => ({ topic: input.topic, partition, offset: String(offset) }))
    await consumer.commitOffsets(committed)
    return { messages, committed }
  } finally {
    await consumer.disconnect()
  }
})
