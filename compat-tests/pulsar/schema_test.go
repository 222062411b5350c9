package pulsar_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/apache/pulsar-client-go/pulsar"
)

// user is the record of the schema tests, in the shape of userV1.
type user struct {
	Name string `json:"name" avro:"name"`
	Age  int32  `json:"age" avro:"age"`
}

// userWithEmail is user with the optional field of userOptionalEmail.
type userWithEmail struct {
	Name  string  `json:"name" avro:"name"`
	Age   int32   `json:"age" avro:"age"`
	Email *string `json:"email" avro:"email"`
}

const (
	userV1 = `{"type":"record","name":"User","namespace":"magnetar.compat","fields":[
		{"name":"name","type":"string"},
		{"name":"age","type":"int"}]}`
	// A new required field: data written with userV1 cannot be read with
	// it, so it is not backward (and so not fully) compatible.
	userRequiredEmail = `{"type":"record","name":"User","namespace":"magnetar.compat","fields":[
		{"name":"name","type":"string"},
		{"name":"age","type":"int"},
		{"name":"email","type":"string"}]}`
	// A new optional field with a default: fully compatible.
	userOptionalEmail = `{"type":"record","name":"User","namespace":"magnetar.compat","fields":[
		{"name":"name","type":"string"},
		{"name":"age","type":"int"},
		{"name":"email","type":["null","string"],"default":null}]}`
)

// schemaKinds are the struct schemas tested: JSON and Avro, both defined
// by an Avro record.
var schemaKinds = []struct {
	name string
	make func(def string) pulsar.Schema
}{
	{"JSON", func(def string) pulsar.Schema { return pulsar.NewJSONSchema(def, nil) }},
	{"Avro", func(def string) pulsar.Schema { return pulsar.NewAvroSchema(def, nil) }},
}

// TestSchemaRoundTrip: values produced with a JSON or Avro schema are
// consumed as equal values (decoded with the schema version the message
// carries, fetched with CommandGetSchema), and the topic's schema is the
// producer's.
func TestSchemaRoundTrip(t *testing.T) {
	for _, kind := range schemaKinds {
		t.Run(kind.name, func(t *testing.T) {
			c := sharedClient(t)
			topic := topicName(t)
			schema := kind.make(userV1)
			cons := subscribe(t, c, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "sub", Schema: schema})
			// Batching stays on: pulsar-client-go v0.19.0 leaves schema_version
			// out of the metadata of messages sent with DisableBatching (its
			// genMetadata never sets it), whatever the broker answers.
			p := createProducer(t, c, pulsar.ProducerOptions{Topic: topic, Schema: schema})
			users := []user{{"ada", 36}, {"grace", 85}, {"linus", 54}}
			for _, u := range users {
				send(t, p, &pulsar.ProducerMessage{Value: u})
			}
			var version []byte
			for i, want := range users {
				msg := receive(t, cons)
				var got user
				if err := msg.GetSchemaValue(&got); err != nil {
					t.Fatalf("message %d: GetSchemaValue: %v", i, err)
				}
				if got != want {
					t.Errorf("message %d: %+v, want %+v", i, got, want)
				}
				if len(msg.SchemaVersion()) == 0 {
					t.Errorf("message %d has no schema version", i)
				} else if version != nil && !bytes.Equal(version, msg.SchemaVersion()) {
					t.Errorf("message %d: schema version %x, the first had %x", i, msg.SchemaVersion(), version)
				}
				version = msg.SchemaVersion()
				ackMsg(t, cons, msg)
			}
		})
	}
}

// TestSchemaCompatibility: under Pulsar's default compatibility strategy
// (FULL), a producer whose schema adds a required field is refused with
// IncompatibleSchema, as is one with a schema of another type; one that
// adds an optional field with a default is accepted, registers a new
// schema version, and its values decode with it.
func TestSchemaCompatibility(t *testing.T) {
	for _, kind := range schemaKinds {
		t.Run(kind.name, func(t *testing.T) {
			c := sharedClient(t)
			topic := topicName(t)
			cons := subscribe(t, c, pulsar.ConsumerOptions{Topic: topic, SubscriptionName: "sub", Schema: kind.make(userV1)})
			p1 := createProducer(t, c, pulsar.ProducerOptions{Topic: topic, Schema: kind.make(userV1)})
			send(t, p1, &pulsar.ProducerMessage{Value: user{"ada", 36}})

			refused := func(what string, schema pulsar.Schema) {
				t.Helper()
				p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic, Schema: schema})
				if err == nil {
					p.Close()
					t.Errorf("a producer with %s was accepted; want IncompatibleSchema", what)
					return
				}
				if !strings.Contains(err.Error(), "IncompatibleSchema") {
					t.Errorf("a producer with %s was refused with %q; want an IncompatibleSchema error", what, err)
				}
			}
			refused("a new required field", kind.make(userRequiredEmail))
			refused("a STRING schema", pulsar.NewStringSchema(nil))

			p2 := createProducer(t, c, pulsar.ProducerOptions{Topic: topic, Schema: kind.make(userOptionalEmail)})
			email := "grace@example.com"
			send(t, p2, &pulsar.ProducerMessage{Value: userWithEmail{"grace", 85, &email}})

			first := receive(t, cons)
			var u1 user
			if err := first.GetSchemaValue(&u1); err != nil || u1 != (user{"ada", 36}) {
				t.Errorf("first message: %+v, %v; want {ada 36}", u1, err)
			}
			ackMsg(t, cons, first)
			second := receive(t, cons)
			if bytes.Equal(first.SchemaVersion(), second.SchemaVersion()) {
				t.Errorf("both messages carry schema version %x; the compatible new schema should be a new version", first.SchemaVersion())
			}
			var u2 userWithEmail
			if err := second.GetSchemaValue(&u2); err != nil {
				t.Fatalf("second message: GetSchemaValue: %v", err)
			}
			if u2.Name != "grace" || u2.Age != 85 || u2.Email == nil || *u2.Email != email {
				t.Errorf("second message: %+v, want grace 85 %s", u2, email)
			}
			ackMsg(t, cons, second)
		})
	}
}
