// Shared by the scripts kafkajs_test.go runs: a kafkajs client of
// $MAGNETAR_KAFKA (host:port) whose log goes to stderr, so stdout carries
// only the script's JSON result, and the codecs that need npm packages.
'use strict'

const { Kafka, logLevel, CompressionTypes, CompressionCodecs } = require('kafkajs')
const SnappyCodec = require('kafkajs-snappy')
const LZ4Codec = require('kafkajs-lz4')

// kafkajs has None and GZIP built in; Snappy and LZ4 come from these
// packages (pure JS and a native build of lz4). ZSTD's package,
// @kafkajs/zstd, needs cppzst 2.0.6, whose native build fails on current
// Node, so ZSTD is not tested with kafkajs.
CompressionCodecs[CompressionTypes.Snappy] = SnappyCodec
CompressionCodecs[CompressionTypes.LZ4] = new LZ4Codec().codec

const codecs = {
  none: CompressionTypes.None,
  gzip: CompressionTypes.GZIP,
  snappy: CompressionTypes.Snappy,
  lz4: CompressionTypes.LZ4,
}

function client () {
  const broker = process.env.MAGNETAR_KAFKA
  if (!broker) throw new Error('MAGNETAR_KAFKA (host:port) is not set')
  return new Kafka({
    clientId: 'magnetar-compat-kafkajs',
    brokers: [broker],
    connectionTimeout: 5000,
    requestTimeout: 30000,
    retry: { retries: 8, initialRetryTime: 100 },
    logLevel: logLevel.WARN,
    logCreator: () => ({ namespace, level, label, log }) => {
      const { message, ...extra } = log
      process.stderr.write(`kafkajs ${label} [${namespace}] ${message} ${JSON.stringify(extra)}\n`)
    },
  })
}

// readStdin returns stdin parsed as JSON.
async function readStdin () {
  const chunks = []
  for await (const c of process.stdin) chunks.push(c)
  return JSON.parse(Buffer.concat(chunks).toString('utf8'))
}

// main runs fn and prints its result as JSON; a failure exits 1 with the
// error on stderr.
function main (fn) {
  fn().then(
    (result) => { process.stdout.write(JSON.stringify(result) + '\n') },
    (err) => {
      process.stderr.write(`FAILED: ${err && err.stack ? err.stack : err}\n`)
      if (err && err.errors) process.stderr.write(`causes: ${JSON.stringify(err.errors)}\n`)
      process.exitCode = 1
    },
  )
}

module.exports = { client, codecs, readStdin, main }
