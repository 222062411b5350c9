package broker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/magnetar-io/magnetar/meta"
	"github.com/magnetar-io/magnetar/meta/local"
)

// Avro record definitions of one evolving record type.
const (
	userV0 = `{"type":"record","name":"User","namespace":"example","fields":[
		{"name":"name","type":"string"}]}`
	// userV0Respelt is userV0 as hamba/avro (pulsar-client-go) writes it.
	userV0Respelt = `{"name":"example.User","type":"record","fields":[{"name":"name","type":"string"}]}`
	// userAgeDefault adds a field with a default: FULL-compatible.
	userAgeDefault = `{"type":"record","name":"User","namespace":"example","fields":[
		{"name":"name","type":"string"},{"name":"age","type":"int","default":0}]}`
	// userAgeRequired adds a field without a default: FORWARD only.
	userAgeRequired = `{"type":"record","name":"User","namespace":"example","fields":[
		{"name":"name","type":"string"},{"name":"age","type":"int"}]}`
	// userNameInt changes a field's type: incompatible both ways.
	userNameInt = `{"type":"record","name":"User","namespace":"example","fields":[
		{"name":"name","type":"int"}]}`
	// userNoName removes a field that has no default: BACKWARD only.
	userNoName = `{"type":"record","name":"User","namespace":"example","fields":[]}`
	// userAgeLong after userAgeRequired promotes int to long: BACKWARD only.
	userAgeLong = `{"type":"record","name":"User","namespace":"example","fields":[
		{"name":"name","type":"string"},{"name":"age","type":"long"}]}`
)

func avroSchema(def string) Schema { return Schema{Type: SchemaTypeAvro, Data: []byte(def)} }

func newSchemaTestStore(t *testing.T) meta.Store {
	t.Helper()
	s, err := local.Open(t.TempDir(), local.Options{NoSync: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func newSchemaTestRegistry(t *testing.T, store meta.Store, strategy CompatibilityStrategy, enforced bool) *SchemaRegistry {
	t.Helper()
	r, err := NewSchemaRegistry(SchemaRegistryConfig{Meta: store, Strategy: strategy, ValidationEnforced: enforced, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func schemaTopic(t *testing.T, name string) TopicName {
	t.Helper()
	tn, err := ParseTopicName(name)
	if err != nil {
		t.Fatal(err)
	}
	return tn
}

// mustRegister registers s and checks it got version want.
func mustRegister(t *testing.T, r *SchemaRegistry, topic TopicName, s Schema, want SchemaVersion) {
	t.Helper()
	got, err := r.GetOrCreate(context.Background(), topic, s)
	if err != nil {
		t.Fatalf("GetOrCreate(%s): %v", topic, err)
	}
	if got != want {
		t.Fatalf("GetOrCreate(%s) = version %d, want %d", topic, got, want)
	}
}

func TestSchemaFirstVersionAndSameSchema(t *testing.T) {
	ctx := context.Background()
	r := newSchemaTestRegistry(t, newSchemaTestStore(t), CompatibilityUndefined, false)
	if r.Strategy() != CompatibilityFull {
		t.Fatalf("default strategy %s, want FULL", r.Strategy())
	}
	topic := schemaTopic(t, "orders")
	mustRegister(t, r, topic, avroSchema(userV0), 0)

	for _, tc := range []struct {
		name string
		s    Schema
	}{
		{"same bytes", avroSchema(userV0)},
		{"same schema spelt differently", avroSchema(userV0Respelt)},
		{"different properties", Schema{Type: SchemaTypeAvro, Data: []byte(userV0), Properties: map[string]string{"k": "v"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mustRegister(t, r, topic, tc.s, 0)
		})
	}
	if _, _, err := r.Get(ctx, topic, 1); !errors.Is(err, ErrSchemaNotFound) {
		t.Fatalf("Get version 1 = %v, want ErrSchemaNotFound: nothing new was stored", err)
	}

	// An identical schema is found among older versions too, not only the
	// latest.
	mustRegister(t, r, topic, avroSchema(userAgeDefault), 1)
	mustRegister(t, r, topic, avroSchema(userV0), 0)
}

func TestSchemaCompatibilityStrategies(t *testing.T) {
	const ok = true
	for _, tc := range []struct {
		name     string
		strategy CompatibilityStrategy
		old, new string
		ok       bool
	}{
		{"add field with default/FULL", CompatibilityFull, userV0, userAgeDefault, ok},
		{"add field with default/BACKWARD", CompatibilityBackward, userV0, userAgeDefault, ok},
		{"add field with default/FORWARD", CompatibilityForward, userV0, userAgeDefault, ok},
		{"add field without default/FULL", CompatibilityFull, userV0, userAgeRequired, !ok},
		{"add field without default/BACKWARD", CompatibilityBackward, userV0, userAgeRequired, !ok},
		{"add field without default/FORWARD", CompatibilityForward, userV0, userAgeRequired, ok},
		{"add field without default/ALWAYS_COMPATIBLE", CompatibilityAlwaysCompatible, userV0, userAgeRequired, ok},
		{"remove field without default/BACKWARD", CompatibilityBackward, userV0, userNoName, ok},
		{"remove field without default/FORWARD", CompatibilityForward, userV0, userNoName, !ok},
		{"remove field without default/FULL", CompatibilityFull, userV0, userNoName, !ok},
		{"change field type/FULL", CompatibilityFull, userV0, userNameInt, !ok},
		{"change field type/BACKWARD", CompatibilityBackward, userV0, userNameInt, !ok},
		{"change field type/FORWARD", CompatibilityForward, userV0, userNameInt, !ok},
		{"change field type/ALWAYS_COMPATIBLE", CompatibilityAlwaysCompatible, userV0, userNameInt, ok},
		{"promote int to long/BACKWARD", CompatibilityBackward, userAgeRequired, userAgeLong, ok},
		{"promote int to long/FORWARD", CompatibilityForward, userAgeRequired, userAgeLong, !ok},
		{"add field with default/ALWAYS_INCOMPATIBLE", CompatibilityAlwaysIncompatible, userV0, userAgeDefault, !ok},
		{"add field with default/FULL_TRANSITIVE", CompatibilityFullTransitive, userV0, userAgeDefault, ok},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newSchemaTestRegistry(t, newSchemaTestStore(t), tc.strategy, false)
			topic := schemaTopic(t, "t")
			mustRegister(t, r, topic, avroSchema(tc.old), 0)
			v, err := r.GetOrCreate(context.Background(), topic, avroSchema(tc.new))
			switch {
			case tc.ok && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.ok && v != 1:
				t.Fatalf("version %d, want 1", v)
			case !tc.ok && !errors.Is(err, ErrIncompatibleSchema):
				t.Fatalf("GetOrCreate = %d, %v; want ErrIncompatibleSchema", v, err)
			case !tc.ok && !strings.Contains(err.Error(), "persistent://public/default/t"):
				t.Fatalf("error %q does not name the topic", err)
			}
			// The old schema is still registered, whatever happened.
			mustRegister(t, r, topic, avroSchema(tc.old), 0)
		})
	}
}

// v2 is compatible with v1, v1 with v0, but v2 not with v0: only the
// transitive strategies see it.
func TestSchemaTransitive(t *testing.T) {
	const (
		v0 = `{"type":"record","name":"R","fields":[{"name":"a","type":"string"}]}`
		v1 = `{"type":"record","name":"R","fields":[{"name":"a","type":"string"},{"name":"b","type":"int","default":0}]}`
		v2 = `{"type":"record","name":"R","fields":[{"name":"a","type":"string"},{"name":"b","type":"int"}]}`
	)
	for _, tc := range []struct {
		strategy CompatibilityStrategy
		v2OK     bool
	}{
		{CompatibilityBackward, true},
		{CompatibilityBackwardTransitive, false},
		{CompatibilityFull, true},
		{CompatibilityFullTransitive, false},
	} {
		t.Run(tc.strategy.String(), func(t *testing.T) {
			r := newSchemaTestRegistry(t, newSchemaTestStore(t), tc.strategy, false)
			topic := schemaTopic(t, "t")
			mustRegister(t, r, topic, avroSchema(v0), 0)
			mustRegister(t, r, topic, avroSchema(v1), 1)
			v, err := r.GetOrCreate(context.Background(), topic, avroSchema(v2))
			if tc.v2OK && (err != nil || v != 2) {
				t.Fatalf("v2: %d, %v; want version 2", v, err)
			}
			if !tc.v2OK && !errors.Is(err, ErrIncompatibleSchema) {
				t.Fatalf("v2: %d, %v; want ErrIncompatibleSchema", v, err)
			}
			if !tc.v2OK && !strings.Contains(err.Error(), "version 0") {
				t.Fatalf("error %q does not name version 0", err)
			}
		})
	}
}

// JSON schemas carry Avro definitions; pulsar-client-go sends hamba/avro's
// rendering of the user's definition.
func TestSchemaJSON(t *testing.T) {
	ctx := context.Background()
	r := newSchemaTestRegistry(t, newSchemaTestStore(t), CompatibilityFull, false)
	topic := schemaTopic(t, "json-topic")
	js := func(def string) Schema { return Schema{Type: SchemaTypeJSON, Data: []byte(def)} }
	mustRegister(t, r, topic, js(userV0Respelt), 0)
	mustRegister(t, r, topic, js(userV0), 0)
	mustRegister(t, r, topic, js(userAgeDefault), 1)
	if _, err := r.GetOrCreate(ctx, topic, js(userNameInt)); !errors.Is(err, ErrIncompatibleSchema) {
		t.Fatalf("incompatible JSON schema: %v, want ErrIncompatibleSchema", err)
	}
	// A JSON Schema (not Avro) definition, as Pulsar clients before 2.1
	// sent, is not accepted.
	if _, err := r.GetOrCreate(ctx, schemaTopic(t, "json-topic-2"), js(`{"type":"object","properties":{"name":{"type":"string"}}}`)); !errors.Is(err, ErrInvalidSchema) {
		t.Fatalf("JSON Schema definition: %v, want ErrInvalidSchema", err)
	}
}

func TestSchemaTypes(t *testing.T) {
	ctx := context.Background()
	store := newSchemaTestStore(t)
	full := newSchemaTestRegistry(t, store, CompatibilityFull, false)

	avroTopic := schemaTopic(t, "avro")
	mustRegister(t, full, avroTopic, avroSchema(userV0), 0)
	for _, s := range []Schema{
		{Type: SchemaTypeJSON, Data: []byte(userV0)}, // same definition, other type
		{Type: SchemaTypeString},
		{Type: SchemaTypeInt64},
	} {
		if _, err := full.GetOrCreate(ctx, avroTopic, s); !errors.Is(err, ErrIncompatibleSchema) {
			t.Errorf("%s on an AVRO topic: %v, want ErrIncompatibleSchema", s.Type, err)
		}
	}
	always := newSchemaTestRegistry(t, store, CompatibilityAlwaysCompatible, false)
	mustRegister(t, always, avroTopic, Schema{Type: SchemaTypeString}, 1)

	// Same type, different data: no deep check but for AVRO and JSON.
	proto := func(def string) Schema { return Schema{Type: SchemaTypeProtobuf, Data: []byte(def)} }
	protoTopic := schemaTopic(t, "proto")
	mustRegister(t, full, protoTopic, proto(userV0), 0)
	mustRegister(t, full, protoTopic, proto(userNameInt), 1)
	never := newSchemaTestRegistry(t, store, CompatibilityAlwaysIncompatible, false)
	if _, err := never.GetOrCreate(ctx, protoTopic, proto(userAgeRequired)); !errors.Is(err, ErrIncompatibleSchema) {
		t.Fatalf("ALWAYS_INCOMPATIBLE: %v, want ErrIncompatibleSchema", err)
	}
	mustRegister(t, never, protoTopic, proto(userV0), 0)

	// Primitive schemas.
	strTopic := schemaTopic(t, "str")
	mustRegister(t, full, strTopic, Schema{Type: SchemaTypeString}, 0)
	mustRegister(t, full, strTopic, Schema{Type: SchemaTypeString, Data: []byte("null")}, 1)
	mustRegister(t, full, strTopic, Schema{Type: SchemaTypeString, Data: []byte{}}, 0)
}

func TestSchemaInvalid(t *testing.T) {
	ctx := context.Background()
	r := newSchemaTestRegistry(t, newSchemaTestStore(t), CompatibilityAlwaysCompatible, false)
	for _, tc := range []struct {
		name string
		s    Schema
	}{
		{"AVRO not JSON", avroSchema("garbage")},
		{"AVRO empty", avroSchema("")},
		{"AVRO record without fields", avroSchema(`{"type":"record","name":"R"}`)},
		{"AVRO unknown named type", avroSchema(`{"type":"array","items":"example.User"}`)},
		{"JSON not Avro", Schema{Type: SchemaTypeJSON, Data: []byte(`{"a":1}`)}},
		{"PROTOBUF not Avro", Schema{Type: SchemaTypeProtobuf, Data: []byte(`message M {}`)}},
		{"INT32 with data", Schema{Type: SchemaTypeInt32, Data: []byte("x")}},
		{"STRING with data", Schema{Type: SchemaTypeString, Data: []byte("utf8")}},
		{"PROTOBUF_NATIVE not JSON", Schema{Type: SchemaTypeProtobufNative, Data: []byte("x")}},
		{"AUTO_CONSUME", Schema{Type: SchemaTypeAutoConsume}},
		{"EXTERNAL", Schema{Type: SchemaTypeExternal}},
		{"unknown type", Schema{Type: 99}},
		{"too large", Schema{Type: SchemaTypeKeyValue, Data: make([]byte, meta.MaxValueSize+1)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			topic := schemaTopic(t, "invalid")
			// example.User exists on another topic: it must not leak.
			mustRegister(t, r, schemaTopic(t, "other"), avroSchema(userV0), 0)
			v, err := r.GetOrCreate(ctx, topic, tc.s)
			if !errors.Is(err, ErrInvalidSchema) || v != NoSchemaVersion {
				t.Fatalf("GetOrCreate = %d, %v; want ErrInvalidSchema", v, err)
			}
			if _, _, err := r.Get(ctx, topic, -1); !errors.Is(err, ErrSchemaNotFound) {
				t.Fatalf("Get after refusal: %v, want ErrSchemaNotFound", err)
			}
		})
	}
}

// The node holds every version; one that would overflow it is refused.
func TestSchemaNodeFull(t *testing.T) {
	ctx := context.Background()
	r := newSchemaTestRegistry(t, newSchemaTestStore(t), CompatibilityFull, false)
	topic := schemaTopic(t, "big")
	kv := func(b byte) Schema {
		return Schema{Type: SchemaTypeKeyValue, Data: bytes.Repeat([]byte{b}, 500_000)}
	}
	mustRegister(t, r, topic, kv('a'), 0)
	_, err := r.GetOrCreate(ctx, topic, kv('b'))
	if !errors.Is(err, ErrInvalidSchema) || !strings.Contains(err.Error(), "metadata node") {
		t.Fatalf("second large schema: %v, want ErrInvalidSchema about the node's size", err)
	}
	mustRegister(t, r, topic, kv('a'), 0)
}

func TestSchemaGet(t *testing.T) {
	ctx := context.Background()
	r := newSchemaTestRegistry(t, newSchemaTestStore(t), CompatibilityFull, false)
	base := schemaTopic(t, "persistent://acme/prod/events")
	if _, _, err := r.Get(ctx, base, -1); !errors.Is(err, ErrSchemaNotFound) {
		t.Fatalf("Get on a topic without schema: %v, want ErrSchemaNotFound", err)
	}
	v0 := Schema{Type: SchemaTypeAvro, Data: []byte(userV0), Properties: map[string]string{"owner": "team-a"}}
	mustRegister(t, r, base.PartitionName(3), v0, 0)                         // partitions share
	mustRegister(t, r, base.PartitionName(1), avroSchema(userAgeDefault), 1) // the base's schemas

	for _, tc := range []struct {
		topic   TopicName
		version SchemaVersion
		want    SchemaVersion
		data    string
	}{
		{base, -1, 1, userAgeDefault},
		{base, NoSchemaVersion, 1, userAgeDefault},
		{base, 0, 0, userV0},
		{base, 1, 1, userAgeDefault},
		{base.PartitionName(0), 0, 0, userV0},
	} {
		s, v, err := r.Get(ctx, tc.topic, tc.version)
		if err != nil || v != tc.want || s.Type != SchemaTypeAvro || string(s.Data) != tc.data {
			t.Errorf("Get(%s, %d) = %d, %s %q, %v; want version %d", tc.topic, tc.version, v, s.Type, s.Data, err, tc.want)
		}
	}
	s, _, err := r.Get(ctx, base, 0)
	if err != nil || s.Properties["owner"] != "team-a" {
		t.Fatalf("Get(0) properties = %v, %v", s.Properties, err)
	}
	if _, _, err := r.Get(ctx, base, 2); !errors.Is(err, ErrSchemaNotFound) {
		t.Fatalf("Get(2): %v, want ErrSchemaNotFound", err)
	}
}

func TestSchemaDelete(t *testing.T) {
	ctx := context.Background()
	r := newSchemaTestRegistry(t, newSchemaTestStore(t), CompatibilityFull, false)
	topic := schemaTopic(t, "doomed")
	if err := r.Delete(ctx, topic); err != nil {
		t.Fatalf("Delete without schemas: %v", err)
	}
	mustRegister(t, r, topic, avroSchema(userV0), 0)
	mustRegister(t, r, topic, avroSchema(userAgeDefault), 1)
	if err := r.Delete(ctx, topic.PartitionName(0)); err != nil {
		t.Fatal(err)
	}
	for _, v := range []SchemaVersion{-1, 0, 1} {
		if _, _, err := r.Get(ctx, topic, v); !errors.Is(err, ErrSchemaNotFound) {
			t.Fatalf("Get(%d) after Delete: %v, want ErrSchemaNotFound", v, err)
		}
	}
	// A new life: any schema, numbered from 0.
	mustRegister(t, r, topic, avroSchema(userNameInt), 0)
}

func TestSchemaConcurrentGetOrCreate(t *testing.T) {
	const n = 8
	ctx := context.Background()
	store := newSchemaTestStore(t)
	// Registries of their own, as on separate brokers.
	regs := make([]*SchemaRegistry, n)
	for i := range regs {
		regs[i] = newSchemaTestRegistry(t, store, CompatibilityFull, false)
	}
	topic := schemaTopic(t, "race")
	run := func(schema func(i int) Schema) []SchemaVersion {
		versions := make([]SchemaVersion, n)
		errs := make([]error, n)
		var start, wg sync.WaitGroup
		start.Add(1)
		for i := range n {
			wg.Go(func() {
				start.Wait()
				versions[i], errs[i] = regs[i].GetOrCreate(ctx, topic, schema(i))
			})
		}
		start.Done()
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		return versions
	}

	t.Run("same schema", func(t *testing.T) {
		for i, v := range run(func(int) Schema { return avroSchema(userV0) }) {
			if v != 0 {
				t.Fatalf("goroutine %d got version %d, want 0", i, v)
			}
		}
		if _, _, err := regs[0].Get(ctx, topic, 1); !errors.Is(err, ErrSchemaNotFound) {
			t.Fatalf("Get(1) = %v: more than one version was stored", err)
		}
	})

	t.Run("distinct compatible schemas", func(t *testing.T) {
		// Each adds its own field with a default: all FULL-compatible
		// with each other, so each gets its own version 1..n.
		versions := run(func(i int) Schema {
			return avroSchema(fmt.Sprintf(`{"type":"record","name":"User","namespace":"example","fields":[
				{"name":"name","type":"string"},{"name":"f%d","type":"int","default":%d}]}`, i, i))
		})
		seen := map[SchemaVersion]bool{}
		for _, v := range versions {
			if v < 1 || v > n || seen[v] {
				t.Fatalf("versions %v: want each of 1..%d once", versions, n)
			}
			seen[v] = true
		}
		if _, v, err := regs[0].Get(ctx, topic, -1); err != nil || v != n {
			t.Fatalf("latest = %d, %v; want %d", v, err, n)
		}
	})
}

func TestSchemaNoSchemaProducers(t *testing.T) {
	ctx := context.Background()
	store := newSchemaTestStore(t)
	lenient := newSchemaTestRegistry(t, store, CompatibilityFull, false)
	strict := newSchemaTestRegistry(t, store, CompatibilityFull, true)
	topic := schemaTopic(t, "mixed")
	none := Schema{Type: SchemaTypeNone}

	for _, r := range []*SchemaRegistry{lenient, strict} {
		if ok, err := r.AcceptsNoSchema(ctx, topic); !ok || err != nil {
			t.Fatalf("AcceptsNoSchema on a topic without schema = %v, %v", ok, err)
		}
		if v, err := r.GetOrCreate(ctx, topic, none); v != NoSchemaVersion || err != nil {
			t.Fatalf("GetOrCreate(NONE) = %d, %v; want NoSchemaVersion", v, err)
		}
	}
	mustRegister(t, lenient, topic, avroSchema(userV0), 0) // NONE was not stored
	if ok, err := lenient.AcceptsNoSchema(ctx, topic); !ok || err != nil {
		t.Fatalf("lenient AcceptsNoSchema = %v, %v; want true", ok, err)
	}
	if ok, err := strict.AcceptsNoSchema(ctx, topic); ok || err != nil {
		t.Fatalf("enforced AcceptsNoSchema = %v, %v; want false", ok, err)
	}
	if _, err := strict.GetOrCreate(ctx, topic, none); !errors.Is(err, ErrIncompatibleSchema) {
		t.Fatalf("enforced GetOrCreate(NONE): %v, want ErrIncompatibleSchema", err)
	}
}

func TestSchemaConsumerCheck(t *testing.T) {
	ctx := context.Background()
	r := newSchemaTestRegistry(t, newSchemaTestStore(t), CompatibilityFull, false)
	topic := schemaTopic(t, "consumed")
	if err := r.CheckConsumerSchema(ctx, topic, avroSchema(userNameInt)); err != nil {
		t.Fatalf("topic without schema: %v", err)
	}
	mustRegister(t, r, topic, avroSchema(userV0), 0)
	mustRegister(t, r, topic, avroSchema(userAgeDefault), 1)
	for _, tc := range []struct {
		name string
		s    Schema
		ok   bool
	}{
		{"latest", avroSchema(userAgeDefault), true},
		{"reads latest", avroSchema(userV0), true},
		{"NONE", Schema{Type: SchemaTypeNone}, true},
		{"AUTO_CONSUME", Schema{Type: SchemaTypeAutoConsume}, true},
		{"needs a field latest lacks", avroSchema(`{"type":"record","name":"User","namespace":"example","fields":[
			{"name":"name","type":"string"},{"name":"email","type":"string"}]}`), false},
		{"other type", Schema{Type: SchemaTypeString}, false},
	} {
		err := r.CheckConsumerSchema(ctx, topic, tc.s)
		if tc.ok && err != nil || !tc.ok && !errors.Is(err, ErrIncompatibleSchema) {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
	if _, v, err := r.Get(ctx, topic, -1); err != nil || v != 1 {
		t.Fatalf("latest = %d, %v: the check must not register", v, err)
	}
}

// The stored node is the documented format; a damaged one is reported as
// corruption, naming the node.
func TestSchemaStoredFormat(t *testing.T) {
	ctx := context.Background()
	store := newSchemaTestStore(t)
	r := newSchemaTestRegistry(t, store, CompatibilityFull, false)
	topic := schemaTopic(t, "persistent://acme/prod/stored-partition-2")
	mustRegister(t, r, topic, Schema{Type: SchemaTypeAvro, Data: []byte(userV0), Properties: map[string]string{"k": "v"}}, 0)

	const path = "/schemas/acme/prod/persistent/stored"
	value, stat, err := store.Get(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	var node struct {
		Format   int `json:"format"`
		Versions []struct {
			Version    int64             `json:"version"`
			Type       int32             `json:"type"`
			Data       []byte            `json:"data"`
			Properties map[string]string `json:"properties"`
			Hash       string            `json:"hash"`
		} `json:"versions"`
	}
	if err := json.Unmarshal(value, &node); err != nil {
		t.Fatal(err)
	}
	if node.Format != 1 || len(node.Versions) != 1 {
		t.Fatalf("node %s", value)
	}
	v := node.Versions[0]
	if v.Version != 0 || v.Type != 4 || string(v.Data) != userV0 || v.Properties["k"] != "v" || len(v.Hash) != 64 {
		t.Fatalf("node %s", value)
	}

	for _, bad := range []string{
		`{"format":1,"versions":[`,
		`{"format":2,"versions":[]}`,
		strings.Replace(string(value), `"version":0`, `"version":-3`, 1),
		strings.Replace(string(value), `"hash":"`, `"hash":"00`, 1),
	} {
		if stat, err = store.Set(ctx, path, []byte(bad), stat.Version); err != nil {
			t.Fatal(err)
		}
		_, _, err := r.Get(ctx, topic, -1)
		if !errors.Is(err, ErrSchemaCorrupt) || !strings.Contains(err.Error(), path) {
			t.Errorf("Get of %s: %v, want ErrSchemaCorrupt naming the node", bad, err)
		}
	}
}

func TestSchemaVersionEncoding(t *testing.T) {
	for _, v := range []SchemaVersion{0, 1, 258, 1 << 40, 1<<63 - 1} {
		b := EncodeSchemaVersion(v)
		if len(b) != 8 {
			t.Fatalf("Encode(%d) = %x: want 8 bytes", v, b)
		}
		got, err := DecodeSchemaVersion(b)
		if err != nil || got != v {
			t.Fatalf("Decode(Encode(%d)) = %d, %v", v, got, err)
		}
	}
	if b := EncodeSchemaVersion(258); !bytes.Equal(b, []byte{0, 0, 0, 0, 0, 0, 1, 2}) {
		t.Fatalf("Encode(258) = %x: want big-endian", b)
	}
	if b := EncodeSchemaVersion(NoSchemaVersion); len(b) != 0 {
		t.Fatalf("Encode(NoSchemaVersion) = %x: want empty", b)
	}
	if v, err := DecodeSchemaVersion(nil); v != NoSchemaVersion || err != nil {
		t.Fatalf("Decode(empty) = %d, %v", v, err)
	}
	for _, b := range [][]byte{{1}, make([]byte, 7), make([]byte, 64), {0x80, 0, 0, 0, 0, 0, 0, 0}} {
		if _, err := DecodeSchemaVersion(b); !errors.Is(err, ErrInvalidSchemaVersion) {
			t.Fatalf("Decode(%x): %v, want ErrInvalidSchemaVersion", b, err)
		}
	}
}

func TestSchemaCompatibilityStrategyNames(t *testing.T) {
	for s := CompatibilityAlwaysIncompatible; s <= CompatibilityFullTransitive; s++ {
		for _, name := range []string{s.String(), strings.ToLower(s.String())} {
			got, err := ParseCompatibilityStrategy(name)
			if err != nil || got != s {
				t.Fatalf("Parse(%q) = %v, %v; want %v", name, got, err, s)
			}
		}
	}
	for name, want := range map[string]CompatibilityStrategy{
		"FULL_TRANSITIVE":    CompatibilityFullTransitive,
		"BackwardTransitive": CompatibilityBackwardTransitive,
		"always_compatible":  CompatibilityAlwaysCompatible,
		"UNDEFINED":          CompatibilityUndefined,
	} {
		if got, err := ParseCompatibilityStrategy(name); err != nil || got != want {
			t.Fatalf("Parse(%q) = %v, %v; want %v", name, got, err, want)
		}
	}
	if _, err := ParseCompatibilityStrategy("NONE"); err == nil {
		t.Fatal("Parse(NONE) succeeded")
	}
	if _, err := NewSchemaRegistry(SchemaRegistryConfig{Meta: newSchemaTestStore(t), Strategy: 42}); err == nil {
		t.Fatal("NewSchemaRegistry accepted strategy 42")
	}
	if _, err := NewSchemaRegistry(SchemaRegistryConfig{}); err == nil {
		t.Fatal("NewSchemaRegistry accepted no store")
	}
}
