package kafka

import (
	"maps"
	"slices"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// ApiVersions: v0–v4.
//
// The table below is what the broker serves and advertises. Ranges reach
// down to what real clients send: kafkajs uses non-flexible versions only,
// segmentio/kafka-go hard-codes some v0/v1 requests, librdkafka wants
// Produce from v0. Fetch starts at v4 (record batches; older versions
// would need the message-set format) and stops at v12 and Produce at v12:
// from v13 they name topics by id. A request for a later ApiVersions than
// we serve is answered at v0 with UNSUPPORTED_VERSION and our table, so
// the client retries at a version we serve.

const (
	produceKey     = 0
	apiVersionsKey = 18
)

type api struct {
	min, max int16
	handle   func(c *conn, sl *slot, req kmsg.Request)
}

var apis map[int16]api

func init() {
	apis = map[int16]api{
		0:  {0, 12, handleProduce},
		1:  {4, 12, handleFetch},
		2:  {0, 11, handleListOffsets},
		3:  {0, 13, handleMetadata},
		8:  {0, 9, handleOffsetCommit},
		9:  {0, 9, handleOffsetFetch},
		10: {0, 4, handleFindCoordinator},
		11: {0, 9, handleJoinGroup},
		12: {0, 4, handleHeartbeat},
		13: {0, 5, handleLeaveGroup},
		14: {0, 5, handleSyncGroup},
		15: {0, 5, handleDescribeGroups},
		16: {0, 4, handleListGroups},
		18: {0, 4, handleAPIVersions},
		19: {0, 7, handleCreateTopics},
		20: {0, 6, handleDeleteTopics},
		22: {0, 5, handleInitProducerID},
		32: {0, 4, handleDescribeConfigs},
		33: {0, 2, handleAlterConfigs},
		37: {0, 3, handleCreatePartitions},
		42: {0, 2, handleDeleteGroups},
		47: {0, 0, handleOffsetDelete},
		44: {0, 1, handleIncrementalAlterConfigs},
		60: {0, 1, handleDescribeCluster},
		61: {0, 0, handleDescribeProducers},
	}
}

func apiVersionsResponse(version int16, code int16) *kmsg.ApiVersionsResponse {
	resp := kmsg.NewPtrApiVersionsResponse()
	resp.Version = version
	resp.ErrorCode = code
	for _, key := range slices.Sorted(maps.Keys(apis)) {
		a := apis[key]
		k := kmsg.NewApiVersionsResponseApiKey()
		k.ApiKey, k.MinVersion, k.MaxVersion = key, a.min, a.max
		resp.ApiKeys = append(resp.ApiKeys, k)
	}
	return resp
}

func handleAPIVersions(c *conn, sl *slot, req kmsg.Request) {
	sl.finish(apiVersionsResponse(req.GetVersion(), 0))
}
