package broker

import (
	"errors"
	"strconv"
	"strings"
	"testing"
)

func TestParseTopicName(t *testing.T) {
	long := strings.Repeat("a", maxNameLength)
	tests := []struct {
		in   string
		want TopicName // ignored when err
		full string    // String() of the result
		err  bool
	}{
		// Short and full forms.
		{in: "my-topic", want: TopicName{"public", "default", "my-topic", -1}, full: "persistent://public/default/my-topic"},
		{in: "tn/ns/my-topic", want: TopicName{"tn", "ns", "my-topic", -1}, full: "persistent://tn/ns/my-topic"},
		{in: "persistent://tn/ns/my-topic", want: TopicName{"tn", "ns", "my-topic", -1}, full: "persistent://tn/ns/my-topic"},
		{in: "persistent://public/default/a.b_c=d:e-f", want: TopicName{"public", "default", "a.b_c=d:e-f", -1}, full: "persistent://public/default/a.b_c=d:e-f"},
		{in: "persistent://tn/ns/" + long, want: TopicName{"tn", "ns", long, -1}, full: "persistent://tn/ns/" + long},

		// Partition suffix.
		{in: "persistent://tn/ns/t-partition-3", want: TopicName{"tn", "ns", "t", 3}, full: "persistent://tn/ns/t-partition-3"},
		{in: "t-partition-0", want: TopicName{"public", "default", "t", 0}, full: "persistent://public/default/t-partition-0"},
		{in: "tn/ns/t-partition-12", want: TopicName{"tn", "ns", "t", 12}, full: "persistent://tn/ns/t-partition-12"},
		{in: "a-partition-1-partition-2", want: TopicName{"public", "default", "a-partition-1", 2}, full: "persistent://public/default/a-partition-1-partition-2"},
		// Not partition suffixes: the name is the local name as it is.
		{in: "t-partition-03", want: TopicName{"public", "default", "t-partition-03", -1}, full: "persistent://public/default/t-partition-03"},
		{in: "t-partition-", want: TopicName{"public", "default", "t-partition-", -1}, full: "persistent://public/default/t-partition-"},
		{in: "t-partition--1", want: TopicName{"public", "default", "t-partition--1", -1}, full: "persistent://public/default/t-partition--1"},
		{in: "t-partition-x", want: TopicName{"public", "default", "t-partition-x", -1}, full: "persistent://public/default/t-partition-x"},
		{in: "-partition-1", want: TopicName{"public", "default", "-partition-1", -1}, full: "persistent://public/default/-partition-1"},

		// Refused.
		{in: "", err: true},
		{in: "non-persistent://tn/ns/t", err: true},
		{in: "http://tn/ns/t", err: true},
		{in: "://tn/ns/t", err: true},
		{in: "persistent://tn/cluster/ns/t", err: true}, // v1 name
		{in: "tn/cluster/ns/t", err: true},              // v1 name, short form
		{in: "persistent://t", err: true},
		{in: "persistent://tn/ns", err: true},
		{in: "tn/t", err: true},
		{in: "persistent://tn/ns/t/x/y", err: true},
		{in: "persistent:///ns/t", err: true},
		{in: "persistent://tn//t", err: true},
		{in: "persistent://tn/ns/", err: true},
		{in: "tn/ns/", err: true},
		{in: "/ns/t", err: true},
		{in: "a b", err: true},
		{in: "persistent://tn/ns/a?b", err: true},
		{in: "persistent://tn/ns/a#b", err: true},
		{in: "persistent://tn/ns/a%2Fb", err: true},
		{in: "persistent://tn/n s/t", err: true},
		{in: "persistent://t\x00n/ns/t", err: true},
		{in: "tópico", err: true},
		{in: "persistent://tn/ns/..", err: true},
		{in: "persistent://tn/./t", err: true},
		{in: "persistent://../ns/t", err: true},
		{in: "persistent://tn/ns/" + long + "a", err: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseTopicName(tt.in)
			if tt.err {
				if err == nil {
					t.Fatalf("ParseTopicName(%q) = %+v, want an error", tt.in, got)
				}
				if !errors.Is(err, ErrInvalidTopicName) {
					t.Fatalf("ParseTopicName(%q): %v, want ErrInvalidTopicName", tt.in, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseTopicName(%q): %v", tt.in, err)
			}
			if got != tt.want {
				t.Fatalf("ParseTopicName(%q) = %+v, want %+v", tt.in, got, tt.want)
			}
			if s := got.String(); s != tt.full {
				t.Fatalf("String() = %q, want %q", s, tt.full)
			}
			// Round trip: the full name parses back to the same name.
			again, err := ParseTopicName(got.String())
			if err != nil || again != got {
				t.Fatalf("ParseTopicName(%q) = %+v, %v; want %+v", got.String(), again, err, got)
			}
		})
	}
}

func TestTopicNameParts(t *testing.T) {
	tests := []struct {
		in                         string
		local, base, ml, namespace string
		partition                  bool
	}{
		{in: "t", local: "t", base: "persistent://public/default/t", ml: "public/default/persistent/t", namespace: "public/default"},
		{in: "persistent://tn/ns/t-partition-7", local: "t-partition-7", base: "persistent://tn/ns/t",
			ml: "tn/ns/persistent/t-partition-7", namespace: "tn/ns", partition: true},
		{in: "tn/ns/t-partition-x", local: "t-partition-x", base: "persistent://tn/ns/t-partition-x",
			ml: "tn/ns/persistent/t-partition-x", namespace: "tn/ns"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			tn := mustParse(t, tt.in)
			if got := tn.LocalName(); got != tt.local {
				t.Errorf("LocalName() = %q, want %q", got, tt.local)
			}
			if got := tn.Base().String(); got != tt.base {
				t.Errorf("Base() = %q, want %q", got, tt.base)
			}
			if tn.Base().IsPartition() {
				t.Errorf("Base() is a partition")
			}
			if got := tn.ManagedLedgerName(); got != tt.ml {
				t.Errorf("ManagedLedgerName() = %q, want %q", got, tt.ml)
			}
			if got := tn.NamespaceName(); got != tt.namespace {
				t.Errorf("NamespaceName() = %q, want %q", got, tt.namespace)
			}
			if got := tn.IsPartition(); got != tt.partition {
				t.Errorf("IsPartition() = %v, want %v", got, tt.partition)
			}
			// Base and PartitionName are inverse: partition i of the base
			// parses back to a partition i of the same base.
			for _, i := range []int{0, 1, 9, 10, 123} {
				p := tn.Base().PartitionName(i)
				want := tt.base + "-partition-" + strconv.Itoa(i)
				if p.String() != want {
					t.Errorf("PartitionName(%d) = %q, want %q", i, p.String(), want)
				}
				back := mustParse(t, p.String())
				if back != p || back.Partition != i || back.Base() != tn.Base() {
					t.Errorf("ParseTopicName(%q) = %+v, want %+v", p.String(), back, p)
				}
				if got, want := back.ManagedLedgerName(), tn.Base().ManagedLedgerName()+"-partition-"+strconv.Itoa(i); got != want {
					t.Errorf("ManagedLedgerName of partition %d = %q, want %q", i, got, want)
				}
			}
		})
	}
}

func TestParseAutoTopicCreation(t *testing.T) {
	tests := []struct {
		in   string
		want AutoTopicCreation
		err  bool
	}{
		{in: "non-partitioned", want: AutoCreateNonPartitioned},
		{in: "Partitioned", want: AutoCreatePartitioned},
		{in: "off", want: AutoCreateOff},
		{in: "false", want: AutoCreateOff},
		{in: "sometimes", err: true},
		{in: "", err: true},
	}
	for _, tt := range tests {
		got, err := ParseAutoTopicCreation(tt.in)
		if (err != nil) != tt.err || (!tt.err && got != tt.want) {
			t.Errorf("ParseAutoTopicCreation(%q) = %v, %v; want %v (error %v)", tt.in, got, err, tt.want, tt.err)
		}
		if !tt.err {
			if back, err := ParseAutoTopicCreation(got.String()); err != nil || back != got {
				t.Errorf("ParseAutoTopicCreation(%q.String()) = %v, %v", got, back, err)
			}
		}
	}
}
