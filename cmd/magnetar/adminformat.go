package main

// Output of `magnetar admin`, `produce` and `consume`: the server's JSON
// as is (-o json), or readable text: lists one item a line, objects as a
// two-column table of flattened keys (subscriptions.s1.msgBacklog), and
// messages as blocks of fields.

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"
)

// writeJSONIndented writes a JSON document indented, or as it came if it
// is not JSON.
func writeJSONIndented(w io.Writer, body []byte) error {
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return nil
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, body, "", "  "); err != nil {
		buf.Reset()
		buf.Write(body)
	}
	buf.WriteByte('\n')
	_, err := w.Write(buf.Bytes())
	return err
}

// writeText writes a JSON document as text: a scalar on its own, a list
// of scalars one a line, anything else as a table of flattened keys.
func writeText(w io.Writer, body []byte) error {
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		_, err := fmt.Fprintf(w, "%s\n", body)
		return err
	}
	switch v := v.(type) {
	case []any:
		if allScalars(v) {
			for _, x := range v {
				if _, err := fmt.Fprintln(w, scalarText(x)); err != nil {
					return err
				}
			}
			return nil
		}
	case map[string]any:
	default:
		_, err := fmt.Fprintln(w, scalarText(v))
		return err
	}
	var rows [][2]string
	flatten("", v, &rows)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\n", r[0], r[1])
	}
	return tw.Flush()
}

func allScalars(list []any) bool {
	for _, x := range list {
		switch x.(type) {
		case map[string]any, []any:
			return false
		}
	}
	return true
}

func scalarText(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case string:
		return v
	case json.Number:
		return v.String()
	case bool:
		if v {
			return "true"
		}
		return "false"
	}
	return fmt.Sprint(v)
}

// flatten appends the leaves of v as (dotted key, text) rows, keys in
// order. Lists of scalars become one comma-separated value; empty lists
// and objects are shown as [] and {}.
func flatten(prefix string, v any, rows *[][2]string) {
	join := func(k string) string {
		if prefix == "" {
			return k
		}
		return prefix + "." + k
	}
	switch v := v.(type) {
	case map[string]any:
		if len(v) == 0 && prefix != "" {
			*rows = append(*rows, [2]string{prefix, "{}"})
			return
		}
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			flatten(join(k), v[k], rows)
		}
	case []any:
		if allScalars(v) {
			items := make([]string, len(v))
			for i, x := range v {
				items[i] = scalarText(x)
			}
			s := strings.Join(items, ", ")
			if len(v) == 0 {
				s = "[]"
			}
			*rows = append(*rows, [2]string{prefix, s})
			return
		}
		for i, x := range v {
			flatten(fmt.Sprintf("%s[%d]", prefix, i), x, rows)
		}
	default:
		*rows = append(*rows, [2]string{prefix, scalarText(v)})
	}
}

// shownMessage is a message as consume and peek show it.
type shownMessage struct {
	ID          string            // ledger:entry[:partition[:batch]]
	Topic       string            // consume only
	PublishTime time.Time         // zero if unknown
	Key         string            // "" if none
	Properties  map[string]string // nil if none
	Payload     []byte
}

// isPrintable tells whether a payload can be shown as text.
func isPrintable(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	for _, r := range string(b) {
		if !unicode.IsPrint(r) && !unicode.IsSpace(r) {
			return false
		}
	}
	return true
}

// writeMessageText writes m as a block headed by "----- message n -----".
// A payload that is not printable UTF-8 is shown as a hex dump.
func writeMessageText(w io.Writer, n int, m shownMessage) {
	fmt.Fprintf(w, "----- message %d -----\n", n)
	fmt.Fprintf(w, "id:           %s\n", m.ID)
	if m.Topic != "" {
		fmt.Fprintf(w, "topic:        %s\n", m.Topic)
	}
	if !m.PublishTime.IsZero() {
		fmt.Fprintf(w, "publish time: %s\n", m.PublishTime.UTC().Format(time.RFC3339Nano))
	}
	if m.Key != "" {
		fmt.Fprintf(w, "key:          %s\n", m.Key)
	}
	if len(m.Properties) > 0 {
		fmt.Fprintf(w, "properties:   %s\n", propertiesText(m.Properties))
	}
	if isPrintable(m.Payload) {
		fmt.Fprintf(w, "payload:      %s\n", m.Payload)
		return
	}
	fmt.Fprintf(w, "payload:      (%d bytes, hex)\n%s", len(m.Payload), hex.Dump(m.Payload))
}

// propertiesText is "k1=v1, k2=v2", keys in order.
func propertiesText(p map[string]string) string {
	keys := make([]string, 0, len(p))
	for k := range p {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for i, k := range keys {
		keys[i] = k + "=" + p[k]
	}
	return strings.Join(keys, ", ")
}

// messageJSON is the JSON form of a shownMessage: the payload as text if
// it is valid UTF-8, else in base64 (payloadBase64).
type messageJSON struct {
	ID            string            `json:"id"`
	Topic         string            `json:"topic,omitempty"`
	PublishTime   string            `json:"publishTime,omitempty"`
	Key           string            `json:"key,omitempty"`
	Properties    map[string]string `json:"properties,omitempty"`
	Payload       *string           `json:"payload,omitempty"`
	PayloadBase64 string            `json:"payloadBase64,omitempty"`
}

func (m shownMessage) toJSON() messageJSON {
	j := messageJSON{ID: m.ID, Topic: m.Topic, Key: m.Key, Properties: m.Properties}
	if !m.PublishTime.IsZero() {
		j.PublishTime = m.PublishTime.UTC().Format(time.RFC3339Nano)
	}
	if utf8.Valid(m.Payload) {
		s := string(m.Payload)
		j.Payload = &s
	} else {
		j.PayloadBase64 = base64.StdEncoding.EncodeToString(m.Payload)
	}
	return j
}

// writeMessageJSON writes m as one line of JSON.
func writeMessageJSON(w io.Writer, m shownMessage) error {
	b, err := json.Marshal(m.toJSON())
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}
