package kafkagroup

import (
	"encoding/json"
	"fmt"
	"time"
)

// A group's record is what survives a restart: its generation, protocol,
// leader and members with their assignments, and the topics it has
// committed offsets on. JSON (a stored format):
//
//	{"format":1,"group":"g","generation":3,"protocolType":"consumer","protocol":"range",
//	 "leader":"m1","members":[{"id":"m1","instanceId":"","clientId":"c","clientHost":"/10.0.0.1",
//	   "protocolType":"consumer","sessionTimeoutMs":45000,"rebalanceTimeoutMs":60000,
//	   "protocols":[{"name":"range","metadata":"<base64>"}],"assignment":"<base64>"}],
//	 "topics":["persistent://public/default/t"]}
type record struct {
	Format       int            `json:"format"`
	Group        string         `json:"group"`
	Generation   int32          `json:"generation"`
	ProtocolType string         `json:"protocolType,omitempty"`
	Protocol     string         `json:"protocol,omitempty"`
	Leader       string         `json:"leader,omitempty"`
	Members      []memberRecord `json:"members"`
	Topics       []string       `json:"topics,omitempty"`
}

type memberRecord struct {
	ID                 string     `json:"id"`
	InstanceID         string     `json:"instanceId,omitempty"`
	ClientID           string     `json:"clientId"`
	ClientHost         string     `json:"clientHost"`
	ProtocolType       string     `json:"protocolType"`
	SessionTimeoutMs   int64      `json:"sessionTimeoutMs"`
	RebalanceTimeoutMs int64      `json:"rebalanceTimeoutMs"`
	Protocols          []Protocol `json:"protocols"`
	Assignment         []byte     `json:"assignment"`
}

const recordFormat = 1

// Marshal writes g's record with the topics it committed on. Members of
// a group still rebalancing are stored with no assignment: after a
// restart they rejoin.
func Marshal(g *Group, topics []string) ([]byte, error) {
	r := record{Format: recordFormat, Group: g.ID, Generation: g.Generation, ProtocolType: g.ProtocolType,
		Protocol: g.Protocol, Leader: g.Leader, Members: []memberRecord{}, Topics: topics}
	for _, m := range g.Members {
		r.Members = append(r.Members, memberRecord{ID: m.ID, InstanceID: m.InstanceID, ClientID: m.ClientID,
			ClientHost: m.ClientHost, ProtocolType: m.ProtocolType, SessionTimeoutMs: m.SessionTimeout.Milliseconds(),
			RebalanceTimeoutMs: m.RebalanceTimeout.Milliseconds(), Protocols: m.Protocols, Assignment: m.Assignment})
	}
	return json.Marshal(r)
}

// Unmarshal reads a record: the group (to Restore) and its topics.
func Unmarshal(b []byte) (*Group, []string, error) {
	var r record
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, nil, fmt.Errorf("kafkagroup: bad group record: %w", err)
	}
	if r.Format != recordFormat || r.Group == "" {
		return nil, nil, fmt.Errorf("kafkagroup: group record of format %d for group %q", r.Format, r.Group)
	}
	g := &Group{ID: r.Group, Generation: r.Generation, ProtocolType: r.ProtocolType, Protocol: r.Protocol, Leader: r.Leader}
	for _, m := range r.Members {
		g.Members = append(g.Members, &Member{ID: m.ID, InstanceID: m.InstanceID, ClientID: m.ClientID, ClientHost: m.ClientHost,
			ProtocolType: m.ProtocolType, SessionTimeout: time.Duration(m.SessionTimeoutMs) * time.Millisecond,
			RebalanceTimeout: time.Duration(m.RebalanceTimeoutMs) * time.Millisecond, Protocols: m.Protocols, Assignment: m.Assignment})
	}
	return g, r.Topics, nil
}
