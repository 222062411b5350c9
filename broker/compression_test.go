package broker

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/golang/snappy"

	"github.com/magnetar-io/magnetar/broker/msgpb"
)

// codecTestInputs are payloads every codec must round-trip: empty, tiny,
// incompressible and a compressible MiB.
func codecTestInputs() map[string][]byte {
	rnd := make([]byte, 64<<10)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range rnd {
		rnd[i] = byte(r.Uint32())
	}
	big := make([]byte, 1<<20)
	for i := range big {
		big[i] = byte(i/7 + i>>12)
	}
	return map[string][]byte{"empty": {}, "tiny": []byte("x"), "random": rnd, "1MiB": big}
}

var kafkaCodecs = []KafkaCodec{KafkaNone, KafkaGzip, KafkaSnappy, KafkaLZ4, KafkaZstd}

var pulsarCodecs = []msgpb.CompressionType{msgpb.CompressionType_NONE, msgpb.CompressionType_LZ4,
	msgpb.CompressionType_ZLIB, msgpb.CompressionType_ZSTD, msgpb.CompressionType_SNAPPY}

func TestCompressKafkaRoundTrip(t *testing.T) {
	for _, c := range kafkaCodecs {
		for name, in := range codecTestInputs() {
			t.Run(fmt.Sprintf("%v/%s", c, name), func(t *testing.T) {
				prefix := []byte("keep")
				comp, err := AppendCompressKafka(prefix, c, in)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.HasPrefix(comp, []byte("keep")) {
					t.Fatal("dst prefix lost")
				}
				out, err := DecompressKafka(c, comp[4:], len(in))
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(out, in) {
					t.Fatalf("got %d bytes, want %d", len(out), len(in))
				}
				if len(in) > 0 {
					if _, err := DecompressKafka(c, comp[4:], len(in)-1); !errors.Is(err, ErrTooLarge) {
						t.Fatalf("limit %d: err %v, want ErrTooLarge", len(in)-1, err)
					}
				}
			})
		}
	}
}

// xerial frames data as snappy-java's SnappyOutputStream does.
func xerial(data []byte, chunk int) []byte {
	out := append([]byte(nil), xerialMagic...)
	out = binary.BigEndian.AppendUint32(out, 1)
	out = binary.BigEndian.AppendUint32(out, 1)
	for len(data) > 0 {
		n := min(chunk, len(data))
		block := snappy.Encode(nil, data[:n])
		out = binary.BigEndian.AppendUint32(out, uint32(len(block)))
		out = append(out, block...)
		data = data[n:]
	}
	return out
}

func TestCompressKafkaXerial(t *testing.T) {
	in := codecTestInputs()["1MiB"]
	framed := xerial(in, 32<<10)
	out, err := DecompressKafka(KafkaSnappy, framed, len(in))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out, in) {
		t.Fatal("xerial round trip differs")
	}
	if _, err := DecompressKafka(KafkaSnappy, framed, len(in)-1); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("err %v, want ErrTooLarge", err)
	}
	if out, err := DecompressKafka(KafkaSnappy, xerial(nil, 1), 10); err != nil || len(out) != 0 {
		t.Fatalf("empty xerial: %q, %v", out, err)
	}
	for n := len(xerialMagic); n < 200; n++ {
		if n == xerialHeaderLen {
			continue // a header alone is an empty stream
		}
		if _, err := DecompressKafka(KafkaSnappy, framed[:n], len(in)); err == nil {
			t.Fatalf("truncated to %d bytes: no error", n)
		}
	}
}

func TestCompressPulsarRoundTrip(t *testing.T) {
	for _, c := range pulsarCodecs {
		for name, in := range codecTestInputs() {
			t.Run(fmt.Sprintf("%v/%s", c, name), func(t *testing.T) {
				comp, err := CompressPulsar(c, in)
				if err != nil {
					t.Fatal(err)
				}
				size := uint32(len(in))
				out, err := DecompressPulsar(c, comp, size, len(in))
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(out, in) {
					t.Fatalf("got %d bytes, want %d", len(out), len(in))
				}
				if len(in) == 0 {
					return
				}
				if _, err := DecompressPulsar(c, comp, size, len(in)-1); !errors.Is(err, ErrTooLarge) {
					t.Fatalf("limit: err %v, want ErrTooLarge", err)
				}
				if c == msgpb.CompressionType_NONE {
					return
				}
				// A wrong uncompressed_size is an error, not ErrTooLarge.
				for _, s := range []uint32{size - 1, size + 1} {
					if _, err := DecompressPulsar(c, comp, s, len(in)+1); err == nil || errors.Is(err, ErrTooLarge) {
						t.Fatalf("uncompressed_size %d of %d: err %v", s, size, err)
					}
				}
			})
		}
	}
}

// Hostile input: garbage must fail, and bombs must stop at the limit.
func TestCompressHostileInput(t *testing.T) {
	zeros := make([]byte, 16<<20)
	garbage := []byte("\x00\x01this is not compressed data at all\xff\xfe\xfd")
	for _, c := range kafkaCodecs[1:] {
		bomb, err := AppendCompressKafka(nil, c, zeros)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := DecompressKafka(c, bomb, 1<<20); !errors.Is(err, ErrTooLarge) {
			t.Errorf("%v bomb: err %v, want ErrTooLarge", c, err)
		}
		if _, err := DecompressKafka(c, garbage, 1<<20); err == nil {
			t.Errorf("%v garbage: no error", c)
		}
		for n := range min(len(bomb), 64) {
			if out, err := DecompressKafka(c, bomb[:n], 1<<20); err == nil && len(out) > 0 && c != KafkaSnappy {
				t.Errorf("%v truncated to %d: %d bytes, no error", c, n, len(out))
			}
		}
	}
	for _, c := range pulsarCodecs[1:] {
		if _, err := DecompressPulsar(c, garbage, 100, 1<<20); err == nil {
			t.Errorf("%v garbage: no error", c)
		}
		if _, err := DecompressPulsar(c, garbage, 1<<30, 1<<20); !errors.Is(err, ErrTooLarge) {
			t.Errorf("%v huge uncompressed_size: err %v, want ErrTooLarge", c, err)
		}
	}
	if _, err := DecompressKafka(7, garbage, 10); !errors.Is(err, ErrUnknownCodec) {
		t.Errorf("codec 7: err %v", err)
	}
	if _, err := DecompressPulsar(9, garbage, 10, 10); !errors.Is(err, ErrUnknownCodec) {
		t.Errorf("pulsar codec 9: err %v", err)
	}
}

// Pooled and shared codec state must be safe under concurrent use (-race).
func TestCompressConcurrent(t *testing.T) {
	in := codecTestInputs()["1MiB"][:200<<10]
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 20 {
				c := kafkaCodecs[(g+i)%len(kafkaCodecs)]
				comp, err := AppendCompressKafka(nil, c, in)
				if err != nil {
					t.Error(err)
					return
				}
				out, err := DecompressKafka(c, comp, len(in))
				if err != nil || !bytes.Equal(out, in) {
					t.Errorf("%v: %v", c, err)
					return
				}
			}
		})
	}
	wg.Wait()
}
