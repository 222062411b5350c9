// Produces the messages given on stdin in one producer.send and prints
// the RecordMetadata kafkajs returns.
//
// stdin: {"topic": "...", "partition": 0, "codec": "none|gzip|snappy|lz4",
//         "idempotent": false,
//         "messages": [{"key": base64|null, "value": base64|null,
//                       "headers": [[name, value], ...]}]}
// stdout: {"results": [{"topicName", "partition", "errorCode", "baseOffset", ...}]}
'use strict'

const { client, codecs, readStdin, main } = require('./common')

main(async () => {
  const input = await readStdin()
  if (!(input.codec in codecs)) throw new Error(`unknown codec ${input.codec}`)
  const producer = client().producer({
    idempotent: !!input.idempotent,
    maxInFlightRequests: input.idempotent ? 1 : undefined,
    allowAutoTopicCreation: true,
  })
  await producer.connect()
  try {
    const messages = input.messages.map((m) => ({
      partition: input.partition,
      key: m.key === null ? null : Buffer.from(m.key, 'base64'),
      value: m.value === null ? null : Buffer.from(m.value, 'base64'),
      headers: Object.fromEntries((m.headers || []).map(([k, v]) => [k, v])),
    }))
    const results = await producer.send({
      topic: input.topic,
      acks: -1,
      compression: codecs[input.codec],
      messages,
    })
    return { results }
  } finally {
    await producer.disconnect()
  }
})
