// The admin client against one topic, $TOPIC: createTopics (3
// partitions), createTopics again, fetchTopicMetadata, a producer writing
// i+1 messages to partition i, fetchTopicOffsets, describeConfigs,
// listTopics, deleteTopics, listTopics. Prints every answer; the Go test
// judges them.
'use strict'

const { ConfigResourceTypes } = require('kafkajs')
const { client, main } = require('./common')

main(async () => {
  const topic = process.env.TOPIC
  if (!topic) throw new Error('TOPIC is not set')
  const kafka = client()
  const admin = kafka.admin()
  await admin.connect()
  try {
    const out = {}
    out.created = await admin.createTopics({ topics: [{ topic, numPartitions: 3 }], waitForLeaders: true })
    out.createdAgain = await admin.createTopics({ topics: [{ topic, numPartitions: 3 }], waitForLeaders: true })
    out.metadata = await admin.fetchTopicMetadata({ topics: [topic] })

    const producer = kafka.producer({ allowAutoTopicCreation: false })
    await producer.connect()
    try {
      for (let p = 0; p < 3; p++) {
        const messages = []
        for (let i = 0; i <= p; i++) messages.push({ partition: p, value: `p${p}-${i}` })
        await producer.send({ topic, acks: -1, messages })
      }
    } finally {
      await producer.disconnect()
    }

    out.offsets = await admin.fetchTopicOffsets(topic)
    out.configs = await admin.describeConfigs({
      resources: [{ type: ConfigResourceTypes.TOPIC, name: topic }],
      includeSynonyms: false,
    })
    out.listedBefore = (await admin.listTopics()).includes(topic)
    await admin.deleteTopics({ topics: [topic] })
    out.listedAfter = (await admin.listTopics()).includes(topic)
    return out
  } finally {
    await admin.disconnect()
  }
})
