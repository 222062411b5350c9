package broker

// Schema registry.
//
// A topic's schemas belong to its base name: every partition of a
// partitioned topic shares them. They are versions 0, 1, 2, … of
// (type, data, properties), kept in one metadata node per topic and changed
// only by compare-and-set on that node, so brokers need no lock between
// them and nothing is cached here (another broker may have written):
//
//	/schemas/<tenant>/<namespace>/persistent/<local name>
//
//	{"format":1,"versions":[
//	  {"version":0,"type":4,"data":"<base64>","properties":{"k":"v"},"hash":"<hex SHA-256 of data>"},
//	  …]}
//
// Versions are stored in ascending order, each one more than the one
// before; the next version is the last plus one. Delete removes the node,
// so numbering starts again at 0 (Pulsar does the same when a topic is
// deleted: it deletes the schema storage, not just marks it deleted). The
// whole node is at most meta.MaxValueSize bytes: a schema that would not
// fit is refused with ErrInvalidSchema.
//
// What follows Pulsar (SchemaRegistryServiceImpl, ServerCnx):
//
//   - A schema is already registered when a version has the same type and
//     the same data (SHA-256), or, for AVRO, JSON and PROTOBUF, whose data
//     are Avro definitions, the same parsed Avro schema (so a Java and a Go
//     client sending the same record in different JSON spellings share a
//     version). Properties are not compared, as in Pulsar: the properties
//     of the first registration stay.
//   - Otherwise the new schema is checked against the latest version
//     (BACKWARD, FORWARD, FULL) or all versions (the _TRANSITIVE
//     strategies). A different type is incompatible, unless the strategy
//     is ALWAYS_COMPATIBLE. For AVRO and JSON, Avro schema resolution
//     decides; a schema of any other type is compatible with earlier ones
//     of its type (Pulsar's default check: no deep check for PROTOBUF,
//     PROTOBUF_NATIVE, KEY_VALUE or primitives), except under
//     ALWAYS_INCOMPATIBLE, which refuses every new schema.
//   - Data are validated first (SchemaDataValidator): AVRO, JSON and
//     PROTOBUF must be Avro definitions; primitive types carry no data
//     (STRING may carry "null", as the Python client sends); AUTO_CONSUME
//     is a client-side type and is refused.
//   - A schema of type NONE (what pulsar-client-go sends for its bytes
//     schema) is never stored: it is the "no schema" case, like Pulsar's
//     handleGetOrCreateSchema.
//
// On the wire (the protocol layer's job, recorded here for it):
//
//   - Schema versions are 8-byte big-endian int64s (Pulsar's
//     LongSchemaVersion); an empty version means "no schema" (Pulsar's
//     SchemaVersion.Empty). See EncodeSchemaVersion. A producer without a
//     schema must get an empty schema_version in CommandProducerSuccess:
//     pulsar-client-go (v0.19) files a non-empty one under the producer's
//     schema, and without one it dereferences nil.
//   - ErrIncompatibleSchema and ErrInvalidSchema are answered with
//     ServerError IncompatibleSchema (18); Pulsar maps invalid schema data
//     to that code too, for old clients.
//   - ErrSchemaNotFound, for CommandGetSchema, is answered with a
//     CommandGetSchemaResponse with error_code TopicNotFound (11) and
//     error_message "Topic not found or no-schema", as ServerCnx does.
//     pulsar-client-go (v0.19) ignores that code: it sees no schema in the
//     response and fails with "schema not found for topic".
//   - The schema name in a GetSchema answer is the base topic's
//     "<tenant>/<namespace>/<local name>", as Pulsar's getSchemaName.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/hamba/avro/v2"

	"github.com/magnetar-io/magnetar/meta"
)

// SchemaType is a schema's type, numbered as Schema.Type in the Pulsar
// protocol (PulsarApi.proto). Wire format: the numbers must not change.
// (Java's SchemaType differs: BYTES is -1 there and travels as None.)
type SchemaType int32

const (
	SchemaTypeNone           SchemaType = 0 // no schema: raw bytes
	SchemaTypeString         SchemaType = 1
	SchemaTypeJSON           SchemaType = 2 // data: an Avro definition
	SchemaTypeProtobuf       SchemaType = 3 // data: an Avro definition
	SchemaTypeAvro           SchemaType = 4
	SchemaTypeBool           SchemaType = 5
	SchemaTypeInt8           SchemaType = 6
	SchemaTypeInt16          SchemaType = 7
	SchemaTypeInt32          SchemaType = 8
	SchemaTypeInt64          SchemaType = 9
	SchemaTypeFloat          SchemaType = 10
	SchemaTypeDouble         SchemaType = 11
	SchemaTypeDate           SchemaType = 12
	SchemaTypeTime           SchemaType = 13
	SchemaTypeTimestamp      SchemaType = 14
	SchemaTypeKeyValue       SchemaType = 15
	SchemaTypeInstant        SchemaType = 16
	SchemaTypeLocalDate      SchemaType = 17
	SchemaTypeLocalTime      SchemaType = 18
	SchemaTypeLocalDateTime  SchemaType = 19
	SchemaTypeProtobufNative SchemaType = 20
	SchemaTypeAutoConsume    SchemaType = 21 // client side only: never stored
	SchemaTypeExternal       SchemaType = 22 // not supported
)

var schemaTypeNames = [...]string{
	"NONE", "STRING", "JSON", "PROTOBUF", "AVRO", "BOOLEAN", "INT8", "INT16", "INT32", "INT64",
	"FLOAT", "DOUBLE", "DATE", "TIME", "TIMESTAMP", "KEY_VALUE", "INSTANT", "LOCAL_DATE",
	"LOCAL_TIME", "LOCAL_DATE_TIME", "PROTOBUF_NATIVE", "AUTO_CONSUME", "EXTERNAL",
}

// String is the type's name as Pulsar's admin API writes it ("AVRO").
func (t SchemaType) String() string {
	if t >= 0 && int(t) < len(schemaTypeNames) {
		return schemaTypeNames[t]
	}
	return fmt.Sprintf("SchemaType(%d)", int32(t))
}

// Schema is a schema as clients send it. Data is the definition (for AVRO,
// JSON and PROTOBUF an Avro schema in JSON; empty for primitive types).
type Schema struct {
	Type       SchemaType
	Data       []byte
	Properties map[string]string
}

// SchemaVersion numbers a topic's schemas from 0. NoSchemaVersion (-1)
// stands for "no schema" (or, in Get, "the latest").
type SchemaVersion int64

// NoSchemaVersion is the version of a producer without a schema.
const NoSchemaVersion SchemaVersion = -1

// EncodeSchemaVersion is v as the protocol's schema_version bytes: 8
// bytes, big-endian (Pulsar's LongSchemaVersion). A negative v (no schema)
// is empty, as Pulsar's SchemaVersion.Empty.
func EncodeSchemaVersion(v SchemaVersion) []byte {
	if v < 0 {
		return nil
	}
	return binary.BigEndian.AppendUint64(make([]byte, 0, 8), uint64(v))
}

// DecodeSchemaVersion parses schema_version bytes: empty is
// NoSchemaVersion; otherwise exactly 8 bytes of a non-negative big-endian
// int64, or ErrInvalidSchemaVersion.
func DecodeSchemaVersion(b []byte) (SchemaVersion, error) {
	switch {
	case len(b) == 0:
		return NoSchemaVersion, nil
	case len(b) != 8:
		return NoSchemaVersion, fmt.Errorf("%w: %d bytes, want 8", ErrInvalidSchemaVersion, len(b))
	}
	v := int64(binary.BigEndian.Uint64(b))
	if v < 0 {
		return NoSchemaVersion, fmt.Errorf("%w: %d is negative", ErrInvalidSchemaVersion, v)
	}
	return SchemaVersion(v), nil
}

// CompatibilityStrategy says which schema changes a topic accepts. In the
// Avro sense: BACKWARD means the new schema can read data written with the
// old one (consumers upgrade first), FORWARD that the old schema can read
// data written with the new one (producers upgrade first), FULL both. The
// plain strategies compare with the latest version, the _TRANSITIVE ones
// with every version.
type CompatibilityStrategy int

const (
	// CompatibilityUndefined (the zero value) means the default,
	// DefaultCompatibilityStrategy.
	CompatibilityUndefined CompatibilityStrategy = iota
	CompatibilityAlwaysIncompatible
	CompatibilityAlwaysCompatible
	CompatibilityBackward
	CompatibilityForward
	CompatibilityFull
	CompatibilityBackwardTransitive
	CompatibilityForwardTransitive
	CompatibilityFullTransitive
)

// DefaultCompatibilityStrategy is Pulsar's default (broker
// schemaCompatibilityStrategy and AbstractTopic): FULL.
const DefaultCompatibilityStrategy = CompatibilityFull

var compatibilityNames = [...]string{
	"UNDEFINED", "ALWAYS_INCOMPATIBLE", "ALWAYS_COMPATIBLE", "BACKWARD", "FORWARD", "FULL",
	"BACKWARD_TRANSITIVE", "FORWARD_TRANSITIVE", "FULL_TRANSITIVE",
}

// String is the strategy's name as Pulsar writes it ("FULL_TRANSITIVE").
func (s CompatibilityStrategy) String() string {
	if s >= 0 && int(s) < len(compatibilityNames) {
		return compatibilityNames[s]
	}
	return fmt.Sprintf("CompatibilityStrategy(%d)", int(s))
}

// ParseCompatibilityStrategy parses a strategy name as Pulsar writes it
// ("BACKWARD_TRANSITIVE"), ignoring case, "_" and "-" (so Pulsar's older
// spellings such as "BackwardTransitive" are accepted too).
func ParseCompatibilityStrategy(s string) (CompatibilityStrategy, error) {
	norm := func(v string) string {
		return strings.NewReplacer("_", "", "-", "").Replace(strings.ToUpper(v))
	}
	for i, name := range compatibilityNames {
		if norm(s) == norm(name) {
			return CompatibilityStrategy(i), nil
		}
	}
	return 0, fmt.Errorf("schema compatibility strategy %q: want one of %s", s, strings.Join(compatibilityNames[1:], ", "))
}

func (s CompatibilityStrategy) transitive() bool {
	return s == CompatibilityBackwardTransitive || s == CompatibilityForwardTransitive || s == CompatibilityFullTransitive
}

// Errors of the schema registry, wrapped with the topic and the reason.
var (
	// ErrSchemaNotFound: the topic has no schema, or not that version.
	// Answered to GetSchema with error_code TopicNotFound (see above).
	ErrSchemaNotFound = errors.New("schema not found")
	// ErrIncompatibleSchema: the schema is not compatible with the topic's
	// schemas under the strategy, or a producer without a schema was
	// refused (ValidationEnforced). ServerError IncompatibleSchema.
	ErrIncompatibleSchema = errors.New("incompatible schema")
	// ErrInvalidSchema: the schema's data are not valid for its type, the
	// type cannot be stored, or it does not fit in the metadata node.
	// ServerError IncompatibleSchema, as Pulsar answers.
	ErrInvalidSchema = errors.New("invalid schema")
	// ErrInvalidSchemaVersion: schema_version bytes that are not a version.
	ErrInvalidSchemaVersion = errors.New("invalid schema version")
	// ErrSchemaCorrupt: a stored schema node cannot be decoded or breaks
	// its invariants; the message names the node. Not the client's fault.
	ErrSchemaCorrupt = errors.New("schema registry: corrupt node")
)

// maxSchemaUpdateAttempts bounds GetOrCreate's compare-and-set retries.
// Each conflict means another registration won; the loop re-reads, so
// registrations of one schema converge in two rounds and distinct ones in
// one round per competitor.
const maxSchemaUpdateAttempts = 32

// schemaNodeFormat is the "format" of the node's JSON (on-disk format).
const schemaNodeFormat = 1

// SchemaRegistryConfig configures a SchemaRegistry.
type SchemaRegistryConfig struct {
	// Meta holds the schemas. Required.
	Meta meta.Store
	// Strategy applies to every topic; CompatibilityUndefined means
	// DefaultCompatibilityStrategy (FULL).
	Strategy CompatibilityStrategy
	// ValidationEnforced refuses producers without a schema on topics that
	// have one (Pulsar's schemaValidationEnforced, default false).
	ValidationEnforced bool
	// Logger; nil means slog.Default().
	Logger *slog.Logger
}

// SchemaRegistry keeps topics' schemas in the metadata store. It is safe
// for concurrent use, also by several brokers on one store. Schemas it
// returns belong to the caller.
type SchemaRegistry struct {
	store    meta.Store
	strategy CompatibilityStrategy
	enforced bool
	log      *slog.Logger
}

// NewSchemaRegistry returns a registry.
func NewSchemaRegistry(cfg SchemaRegistryConfig) (*SchemaRegistry, error) {
	if cfg.Meta == nil {
		return nil, errors.New("broker: SchemaRegistryConfig.Meta is required")
	}
	if cfg.Strategy == CompatibilityUndefined {
		cfg.Strategy = DefaultCompatibilityStrategy
	}
	if cfg.Strategy < 0 || int(cfg.Strategy) >= len(compatibilityNames) {
		return nil, fmt.Errorf("broker: schema compatibility strategy %d is not one of %s", int(cfg.Strategy), strings.Join(compatibilityNames[1:], ", "))
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &SchemaRegistry{store: cfg.Meta, strategy: cfg.Strategy, enforced: cfg.ValidationEnforced, log: cfg.Logger}, nil
}

// Strategy is the registry's compatibility strategy.
func (r *SchemaRegistry) Strategy() CompatibilityStrategy { return r.strategy }

// Get returns version of topic's schema, or the latest if version < 0.
// ErrSchemaNotFound if the topic has no schema or not that version.
func (r *SchemaRegistry) Get(ctx context.Context, topic TopicName, version SchemaVersion) (Schema, SchemaVersion, error) {
	n, _, err := r.load(ctx, topic)
	if err != nil {
		return Schema{}, NoSchemaVersion, err
	}
	if len(n.Versions) == 0 {
		return Schema{}, NoSchemaVersion, fmt.Errorf("%w: topic %s has no schema", ErrSchemaNotFound, topic.Base())
	}
	if version < 0 {
		v := n.Versions[len(n.Versions)-1]
		return v.schema(), v.Version, nil
	}
	for _, v := range n.Versions {
		if v.Version == version {
			return v.schema(), v.Version, nil
		}
	}
	return Schema{}, NoSchemaVersion, fmt.Errorf("%w: topic %s has no schema version %d", ErrSchemaNotFound, topic.Base(), version)
}

// GetOrCreate returns the version of s on topic, registering it as the
// next version if the topic does not have it and it is compatible with the
// topic's schemas (a topic without schemas accepts any). ErrInvalidSchema
// if s is not valid, ErrIncompatibleSchema if it is not compatible.
//
// A schema of type NONE is the "no schema" case: it returns
// NoSchemaVersion, or ErrIncompatibleSchema if AcceptsNoSchema refuses.
func (r *SchemaRegistry) GetOrCreate(ctx context.Context, topic TopicName, s Schema) (SchemaVersion, error) {
	if s.Type == SchemaTypeNone {
		ok, err := r.AcceptsNoSchema(ctx, topic)
		if err != nil {
			return NoSchemaVersion, err
		}
		if !ok {
			return NoSchemaVersion, fmt.Errorf("%w: topic %s has a schema and schema validation is enforced: producers must have one", ErrIncompatibleSchema, topic.Base())
		}
		return NoSchemaVersion, nil
	}
	c, err := newSchemaCandidate(s)
	if err != nil {
		return NoSchemaVersion, fmt.Errorf("%w: topic %s: %v", ErrInvalidSchema, topic.Base(), err)
	}
	path := schemaPath(topic)
	for range maxSchemaUpdateAttempts {
		n, stat, err := r.load(ctx, topic)
		if err != nil {
			return NoSchemaVersion, err
		}
		if v, ok := n.find(c); ok {
			return v, nil
		}
		if len(n.Versions) > 0 {
			if err := checkCompatible(n.Versions, c, r.strategy); err != nil {
				r.log.Info("schema refused", "topic", topic.Base().String(), "type", s.Type.String(), "strategy", r.strategy.String(), "reason", err.Error())
				return NoSchemaVersion, fmt.Errorf("%w: topic %s: %v", ErrIncompatibleSchema, topic.Base(), err)
			}
		}
		next := SchemaVersion(0)
		if len(n.Versions) > 0 {
			next = n.Versions[len(n.Versions)-1].Version + 1
		}
		n.Versions = append(n.Versions, c.stored(next))
		value, err := json.Marshal(n)
		if err != nil {
			return NoSchemaVersion, fmt.Errorf("schema registry: encode %s: %w", path, err)
		}
		if len(value) > meta.MaxValueSize {
			return NoSchemaVersion, fmt.Errorf("%w: topic %s: its schemas would take %d bytes with this one (%d bytes of data), more than the %d a metadata node holds",
				ErrInvalidSchema, topic.Base(), len(value), len(s.Data), meta.MaxValueSize)
		}
		if stat == nil {
			if err = meta.EnsurePath(ctx, r.store, meta.Parent(path)); err == nil {
				_, err = r.store.Create(ctx, path, value, 0)
			}
		} else {
			_, err = r.store.Set(ctx, path, value, stat.Version)
		}
		switch {
		case errors.Is(err, meta.ErrExists), errors.Is(err, meta.ErrBadVersion), errors.Is(err, meta.ErrNotFound):
			continue // another registration or a Delete got there first
		case err != nil:
			return NoSchemaVersion, fmt.Errorf("schema registry: topic %s: %w", topic.Base(), err)
		}
		r.log.Info("schema registered", "topic", topic.Base().String(), "version", int64(next), "type", s.Type.String())
		return next, nil
	}
	return NoSchemaVersion, fmt.Errorf("schema registry: topic %s: gave up after %d conflicting concurrent updates", topic.Base(), maxSchemaUpdateAttempts)
}

// CheckConsumerSchema checks the schema of a consumer subscribing to a
// topic that is in use, without registering it (Pulsar's
// checkConsumerCompatibility; on an idle topic Pulsar registers the
// consumer's schema with GetOrCreate instead). The consumer must be able
// to read what the topic holds: under BACKWARD, FORWARD, FORWARD_TRANSITIVE
// and FULL its schema must read data of the latest version; under the
// other strategies the strategy applies against every version. A topic
// without schemas, a consumer without a schema (NONE) or with AUTO_CONSUME
// passes, and so does a copy of the latest version. ErrInvalidSchema,
// ErrIncompatibleSchema.
func (r *SchemaRegistry) CheckConsumerSchema(ctx context.Context, topic TopicName, s Schema) error {
	if s.Type == SchemaTypeNone || s.Type == SchemaTypeAutoConsume {
		return nil
	}
	c, err := newSchemaCandidate(s)
	if err != nil {
		return fmt.Errorf("%w: topic %s: %v", ErrInvalidSchema, topic.Base(), err)
	}
	n, _, err := r.load(ctx, topic)
	if err != nil || len(n.Versions) == 0 {
		return err
	}
	latest := n.Versions[len(n.Versions)-1:]
	if c.sameAs(latest[0]) {
		return nil
	}
	switch r.strategy {
	case CompatibilityAlwaysCompatible:
		return nil
	case CompatibilityBackward, CompatibilityForward, CompatibilityForwardTransitive, CompatibilityFull:
		err = checkCompatible(latest, c, CompatibilityBackward)
	default:
		err = checkCompatible(n.Versions, c, r.strategy)
	}
	if err != nil {
		return fmt.Errorf("%w: topic %s: consumer schema: %v", ErrIncompatibleSchema, topic.Base(), err)
	}
	return nil
}

// AcceptsNoSchema says whether a producer without a schema may join topic:
// always, unless ValidationEnforced is set and the topic has a schema
// (Pulsar's tryAddSchema with schemaValidationEnforced).
func (r *SchemaRegistry) AcceptsNoSchema(ctx context.Context, topic TopicName) (bool, error) {
	if !r.enforced {
		return true, nil
	}
	n, _, err := r.load(ctx, topic)
	if err != nil {
		return false, err
	}
	return len(n.Versions) == 0, nil
}

// Delete removes every version of topic's schema (the topic is being
// deleted). Deleting a topic without schemas is not an error.
func (r *SchemaRegistry) Delete(ctx context.Context, topic TopicName) error {
	err := r.store.Delete(ctx, schemaPath(topic), meta.AnyVersion)
	if err != nil && !errors.Is(err, meta.ErrNotFound) {
		return fmt.Errorf("schema registry: delete schemas of %s: %w", topic.Base(), err)
	}
	if err == nil {
		r.log.Info("schemas deleted", "topic", topic.Base().String())
	}
	return nil
}

// schemaPath is topic's schema node.
func schemaPath(topic TopicName) string {
	return meta.SchemasRoot + "/" + topic.Base().metaPath()
}

// schemaNode is the stored JSON of a topic's schemas (format above).
type schemaNode struct {
	Format   int            `json:"format"`
	Versions []storedSchema `json:"versions"`
}

type storedSchema struct {
	Version    SchemaVersion     `json:"version"`
	Type       SchemaType        `json:"type"`
	Data       []byte            `json:"data"`
	Properties map[string]string `json:"properties,omitempty"`
	Hash       string            `json:"hash"`
}

func (v storedSchema) schema() Schema {
	return Schema{Type: v.Type, Data: v.Data, Properties: v.Properties}
}

// load reads topic's node. stat is nil if there is no node.
func (r *SchemaRegistry) load(ctx context.Context, topic TopicName) (schemaNode, *meta.Stat, error) {
	path := schemaPath(topic)
	value, stat, err := r.store.Get(ctx, path)
	if errors.Is(err, meta.ErrNotFound) {
		return schemaNode{Format: schemaNodeFormat}, nil, nil
	}
	if err != nil {
		return schemaNode{}, nil, fmt.Errorf("schema registry: topic %s: %w", topic.Base(), err)
	}
	n := schemaNode{Format: schemaNodeFormat}
	if len(value) == 0 {
		return n, &stat, nil
	}
	if err := json.Unmarshal(value, &n); err != nil {
		return schemaNode{}, nil, fmt.Errorf("%w %s: %v", ErrSchemaCorrupt, path, err)
	}
	if err := n.check(); err != nil {
		return schemaNode{}, nil, fmt.Errorf("%w %s: %v", ErrSchemaCorrupt, path, err)
	}
	return n, &stat, nil
}

// check verifies the node's invariants: known format, versions ascending
// by one from the first, hashes matching the data.
func (n schemaNode) check() error {
	if n.Format != schemaNodeFormat {
		return fmt.Errorf("format %d, want %d", n.Format, schemaNodeFormat)
	}
	for i, v := range n.Versions {
		switch {
		case v.Version < 0:
			return fmt.Errorf("negative version %d", v.Version)
		case i > 0 && v.Version != n.Versions[i-1].Version+1:
			return fmt.Errorf("version %d follows version %d", v.Version, n.Versions[i-1].Version)
		case v.Hash != schemaHash(v.Data):
			return fmt.Errorf("version %d: data do not match their hash", v.Version)
		}
	}
	return nil
}

// find returns the version of a stored schema identical to c.
func (n schemaNode) find(c *schemaCandidate) (SchemaVersion, bool) {
	for _, v := range n.Versions {
		if c.sameAs(v) {
			return v.Version, true
		}
	}
	return NoSchemaVersion, false
}

// schemaCandidate is a validated schema offered for registration.
type schemaCandidate struct {
	s    Schema
	hash string
	avro avro.Schema // parsed, for the types whose data are Avro definitions
	norm []byte      // avro re-encoded: equal for equal schemas however spelt
}

func newSchemaCandidate(s Schema) (*schemaCandidate, error) {
	if len(s.Data) > meta.MaxValueSize {
		return nil, fmt.Errorf("%s schema of %d bytes, more than the %d a metadata node holds", s.Type, len(s.Data), meta.MaxValueSize)
	}
	c := &schemaCandidate{s: s, hash: schemaHash(s.Data)}
	switch s.Type {
	case SchemaTypeAvro, SchemaTypeJSON, SchemaTypeProtobuf:
		a, err := parseAvroSchema(s.Data)
		if err != nil {
			return nil, fmt.Errorf("invalid schema definition data for %s schema: %v", s.Type, err)
		}
		norm, err := json.Marshal(a)
		if err != nil {
			return nil, fmt.Errorf("%s schema: %v", s.Type, err)
		}
		c.avro, c.norm = a, norm
	case SchemaTypeString:
		// Pulsar's Python client sends "null" as a STRING schema's data.
		if len(s.Data) > 0 && string(s.Data) != "null" {
			return nil, fmt.Errorf("invalid schema definition data for STRING schema: %q", truncate(s.Data, 64))
		}
	case SchemaTypeBool, SchemaTypeInt8, SchemaTypeInt16, SchemaTypeInt32, SchemaTypeInt64,
		SchemaTypeFloat, SchemaTypeDouble, SchemaTypeDate, SchemaTypeTime, SchemaTypeTimestamp,
		SchemaTypeInstant, SchemaTypeLocalDate, SchemaTypeLocalTime, SchemaTypeLocalDateTime:
		if len(s.Data) > 0 {
			return nil, fmt.Errorf("invalid schema definition data for %s schema: a primitive schema has no data, found %d bytes", s.Type, len(s.Data))
		}
	case SchemaTypeProtobufNative:
		// What both the Java and the Go client send: JSON naming a
		// FileDescriptorSet (base64) and the root message. Not parsed
		// further; no deep compatibility check either.
		var d struct {
			FileDescriptorSet   []byte `json:"fileDescriptorSet"`
			RootMessageTypeName string `json:"rootMessageTypeName"`
		}
		if err := json.Unmarshal(s.Data, &d); err != nil || len(d.FileDescriptorSet) == 0 || d.RootMessageTypeName == "" {
			return nil, errors.New("invalid schema definition data for PROTOBUF_NATIVE schema: want JSON with fileDescriptorSet and rootMessageTypeName")
		}
	case SchemaTypeKeyValue:
		// Opaque: stored and compared as bytes.
	case SchemaTypeNone:
		return nil, errors.New("a NONE schema is not stored")
	case SchemaTypeAutoConsume:
		return nil, errors.New("AUTO_CONSUME is a client-side schema type")
	default:
		return nil, fmt.Errorf("schema type %s is not supported", s.Type)
	}
	return c, nil
}

func (c *schemaCandidate) stored(v SchemaVersion) storedSchema {
	return storedSchema{Version: v, Type: c.s.Type, Data: c.s.Data, Properties: c.s.Properties, Hash: c.hash}
}

// sameAs says whether v is c already registered: same type and same data,
// or the same parsed Avro schema.
func (c *schemaCandidate) sameAs(v storedSchema) bool {
	if v.Type != c.s.Type {
		return false
	}
	if v.Hash == c.hash {
		return true
	}
	if c.avro == nil {
		return false
	}
	a, err := parseAvroSchema(v.Data)
	if err != nil {
		return false
	}
	norm, err := json.Marshal(a)
	return err == nil && bytes.Equal(norm, c.norm)
}

// checkCompatible checks c under strategy against all, a topic's versions
// oldest first: against the latest, or every one for a transitive
// strategy. The error says why not.
func checkCompatible(all []storedSchema, c *schemaCandidate, strategy CompatibilityStrategy) error {
	if strategy == CompatibilityAlwaysCompatible {
		return nil
	}
	against := all[len(all)-1:]
	if strategy.transitive() {
		against = all
	}
	for _, v := range against {
		if v.Type != c.s.Type {
			return fmt.Errorf("version %d is a %s schema, the new schema is %s", v.Version, v.Type, c.s.Type)
		}
	}
	if strategy == CompatibilityAlwaysIncompatible {
		return errors.New("the compatibility strategy is ALWAYS_INCOMPATIBLE")
	}
	if c.s.Type != SchemaTypeAvro && c.s.Type != SchemaTypeJSON {
		return nil // Pulsar checks no further (PROTOBUF included)
	}
	backward := strategy == CompatibilityBackward || strategy == CompatibilityBackwardTransitive ||
		strategy == CompatibilityFull || strategy == CompatibilityFullTransitive
	forward := strategy == CompatibilityForward || strategy == CompatibilityForwardTransitive ||
		strategy == CompatibilityFull || strategy == CompatibilityFullTransitive
	for _, v := range against {
		if v.Hash == c.hash {
			continue
		}
		old, err := parseAvroSchema(v.Data)
		if err != nil {
			return fmt.Errorf("version %d cannot be parsed to compare with: %v", v.Version, err)
		}
		if backward {
			if err := avroCanRead(c.avro, old); err != nil {
				return fmt.Errorf("%s: the new schema cannot read data written with version %d: %v", strategy, v.Version, err)
			}
		}
		if forward {
			if err := avroCanRead(old, c.avro); err != nil {
				return fmt.Errorf("%s: version %d cannot read data written with the new schema: %v", strategy, v.Version, err)
			}
		}
	}
	return nil
}

// avroCanRead says whether data written with writer can be read with
// reader, by the Avro specification's schema resolution: names match (or
// reader aliases), reader fields missing in writer have defaults, enum
// symbols are known unless the reader enum has a default, fixed sizes
// match, unions resolve branch by branch, and int→long→float→double and
// string↔bytes promote. That is what Pulsar gets from Avro's
// SchemaValidatorBuilder (canRead → SchemaCompatibility), and what
// hamba/avro's SchemaCompatibility.Compatible(reader, writer) implements.
//
// A SchemaCompatibility is made per call on purpose: it caches results by
// the schemas' canonical-form fingerprints, which leave out defaults, so a
// shared one would answer for a reader with a default what it had found
// for the same reader without (or the other way round).
func avroCanRead(reader, writer avro.Schema) error {
	return avro.NewSchemaCompatibility().Compatible(reader, writer)
}

// parseAvroSchema parses an Avro definition with a cache of its own:
// hamba's default cache is global, and would let one topic's schema
// resolve named types another topic defined.
func parseAvroSchema(data []byte) (avro.Schema, error) {
	if !json.Valid(data) {
		return nil, errors.New("not JSON")
	}
	return avro.ParseBytesWithCache(data, "", &avro.SchemaCache{})
}

func schemaHash(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

func truncate(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}
