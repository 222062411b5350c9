package ledger

import (
	"bytes"
	"errors"
	"testing"
)

func TestHeaderRoundTrip(t *testing.T) {
	h := Header{Format: FormatKafka, FirstOffset: 1 << 40, Messages: 500, PublishTime: 1764450000123}
	b := append(AppendHeader(nil, h), "payload"...)
	got, payload, err := ParseHeader(b)
	if err != nil || got != h || string(payload) != "payload" || got.NextOffset() != 1<<40+500 {
		t.Fatalf("ParseHeader = %+v %q %v", got, payload, err)
	}
	if len(AppendHeader(nil, h)) != HeaderSize {
		t.Fatalf("encoded header is %d bytes", len(AppendHeader(nil, h)))
	}
}

func TestBadHeaders(t *testing.T) {
	good := AppendHeader(nil, Header{Format: FormatPulsar, FirstOffset: 0, Messages: 1})
	mutate := func(i int, v byte) []byte { b := bytes.Clone(good); b[i] = v; return b }
	for name, b := range map[string][]byte{
		"short":        good[:HeaderSize-1],
		"magic":        mutate(0, 0),
		"version":      mutate(1, 9),
		"format":       mutate(2, 7),
		"no messages":  AppendHeader(nil, Header{Format: FormatPulsar, Messages: 0}),
		"negative off": AppendHeader(nil, Header{Format: FormatPulsar, Messages: 1, FirstOffset: -1}),
	} {
		if _, _, err := ParseHeader(b); !errors.Is(err, ErrBadHeader) {
			t.Errorf("%s: %v, want ErrBadHeader", name, err)
		}
	}
}
