package kafka

import (
	"context"
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/magnetar-io/magnetar/bookie/bookietest"
	"github.com/magnetar-io/magnetar/broker/brokertest"
	"github.com/magnetar-io/magnetar/ledger"
	"github.com/magnetar-io/magnetar/meta"
)

// Storage that cannot take writes is answered with Kafka's retriable
// codes, so producers retry, as they do against a Kafka broker whose
// replicas are too few or whose log directory failed.
func TestErrCodeStorage(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want int16
	}{
		{fmt.Errorf("ledger: managed ledger x: %w", ledger.ErrNotEnoughBookies), errNotEnoughReplicas},
		{fmt.Errorf("ledger: managed ledger x: %w", ledger.ErrBookieReadOnly), errKafkaStorage},
		{fmt.Errorf("ledger: managed ledger x: %w", ledger.ErrCorrupt), errKafkaStorage},
		{fmt.Errorf("something else"), errUnknownServer},
	} {
		if got := errCode(tc.err); got != tc.want {
			t.Errorf("errCode(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}

// A Produce on a standalone whose only bookie's disk filled, or went
// above its usage threshold: the bookie refuses adds as read-only, the
// Produce is refused with NOT_ENOUGH_REPLICAS (or KAFKA_STORAGE_ERROR),
// and retries neither succeed nor create a ledger each; what was
// acknowledged before reads back.
func TestProduceOnFullDisk(t *testing.T) {
	for _, tc := range []struct {
		name string
		// fill returns the bookie's file system and what fills it.
		fill func() (vfs.FS, func(*testing.T, *testServer))
	}{
		{"writes fail with ENOSPC", func() (vfs.FS, func(*testing.T, *testServer)) {
			fs, full := bookietest.FullDisk(vfs.NewMem())
			return fs, func(*testing.T, *testServer) { full.On() }
		}},
		{"above the disk-usage threshold", func() (vfs.FS, func(*testing.T, *testServer)) {
			fs := vfs.NewMem()
			fs.TestingSetDiskUsage(vfs.DiskUsage{TotalBytes: 1000, UsedBytes: 500, AvailBytes: 500})
			return fs, func(t *testing.T, s *testServer) {
				fs.TestingSetDiskUsage(vfs.DiskUsage{TotalBytes: 1000, UsedBytes: 960, AvailBytes: 40})
				if err := s.bookie.Storage.CheckDisks(); err == nil {
					t.Fatal("a disk check at 96 % found room")
				}
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs, fill := tc.fill()
			s := startServerOn(t, brokertest.Options{Bootstrap: true, Local: true, BookieFS: fs}, nil)
			c := s.dial(t)
			createTopic(t, c, "full", 1)
			if p := produce(t, c, "full", plainBatch("a", "b")); p.ErrorCode != 0 {
				t.Fatalf("produce before the disk filled: error %d %v", p.ErrorCode, p.ErrorMessage)
			}
			fill(t, s)
			retriable := func(code int16) bool { return code == errNotEnoughReplicas || code == errKafkaStorage }
			if p := produce(t, c, "full", plainBatch("c")); !retriable(p.ErrorCode) {
				t.Fatalf("produce on a full disk: error %d %v, want %d or %d", p.ErrorCode, str(p.ErrorMessage), errNotEnoughReplicas, errKafkaStorage)
			}
			ids := func() string {
				b, _, err := s.meta.Get(context.Background(), meta.LedgerIDCounterPath)
				if err != nil {
					t.Fatal(err)
				}
				return string(b)
			}
			before := ids()
			for i := range 20 {
				p := produce(t, c, "full", plainBatch("d"))
				if !retriable(p.ErrorCode) {
					t.Fatalf("retry %d: error %d %v, want %d or %d", i, p.ErrorCode, str(p.ErrorMessage), errNotEnoughReplicas, errKafkaStorage)
				}
			}
			if after := ids(); after != before {
				t.Errorf("20 refused retries allocated ledger ids: counter %q, then %q", before, after)
			}
			resp := roundTrip[*kmsg.FetchResponse](c, fetchReq("full", 0, 0))
			p := resp.Topics[0].Partitions[0]
			if p.ErrorCode != 0 || p.HighWatermark != 2 {
				t.Fatalf("fetch after the refusals: error %d high watermark %d, want 0 and 2", p.ErrorCode, p.HighWatermark)
			}
		})
	}
}

func str(p *string) string {
	if p == nil {
		return "<nil>"
	}
	return *p
}
