package journal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// testEnv is a filesystem and journal directory: in memory, or on disk, where
// torn tails are cut with File.Truncate rather than by rewriting the file.
type testEnv struct {
	name string
	fs   vfs.FS
	dir  string
}

func testEnvs(t *testing.T) []testEnv {
	return []testEnv{
		{"mem", vfs.NewMem(), memDir},
		{"disk", vfs.Default, t.TempDir() + "/journal"},
	}
}

// Both ways of cutting a torn tail are tested: TestTornTail runs on a
// filesystem of each kind.
func TestTruncateKinds(t *testing.T) {
	type truncater interface{ Truncate(int64) error }
	for _, env := range testEnvs(t) {
		if err := env.fs.MkdirAll(env.dir, 0o755); err != nil {
			t.Fatal(err)
		}
		f, err := env.fs.OpenReadWrite(env.fs.PathJoin(env.dir, "f"), writeCategory)
		if err != nil {
			t.Fatal(err)
		}
		_, ok := f.(truncater)
		f.Close()
		if want := env.name == "disk"; ok != want {
			t.Errorf("%s: file has Truncate: %v, want %v", env.name, ok, want)
		}
	}
}

// writeRecords runs a journal that appends n records and stops as a crash
// would leave it: its file unfinished (Close's end cleared, as if the
// process died after the last fsync). It returns the records as
// acknowledged.
func writeRecords(t *testing.T, opts Options, n int) []rec {
	t.Helper()
	j, _ := openT(t, opts, Position{})
	var acked []rec
	for i := range n {
		body, typ := testBody(1, i, 20+i*13), testType(1, i)
		r := appendWait(t, j, typ, body)
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		acked = append(acked, rec{r.End, typ, body})
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	path := j.w.path
	data := readFile(t, opts.FS, path)
	clear(data[endOffset:headerSizeV2])
	writeFile(t, opts.FS, path, data)
	return acked
}

// checkLogged fails unless log has exactly one line at level, naming path
// and offset.
func checkLogged(t *testing.T, lb *logBuffer, level, path string, offset int64) {
	t.Helper()
	lines := lb.lines(level)
	if len(lines) != 1 || !strings.Contains(lines[0], "file="+path+" ") || !strings.Contains(lines[0], fmt.Sprintf(" offset=%d ", offset)) {
		t.Fatalf("want one %s line naming %s at offset %d; log:\n%s", level, path, offset, lb)
	}
}

func checkQuiet(t *testing.T, lb *logBuffer) {
	t.Helper()
	if n := len(lb.lines("WARN")) + len(lb.lines("ERROR")); n > 0 {
		t.Fatalf("unexpected warnings or errors:\n%s", lb)
	}
}

func TestTornTail(t *testing.T) {
	const n = 20
	// Each damage returns the damaged last file, where the damage starts and
	// how many records are intact before it. last is the last record's start,
	// end its end (with direct I/O the file goes on with zeros to a block
	// boundary).
	damages := []struct {
		name   string
		reason string // in the log line
		apply  func(data []byte, last, end int) (out []byte, at, intact int)
		// zeros: the file ends in zeros from the cut on, which is how
		// the zeros written ahead of the records look: logged at info.
		zeros bool
	}{
		{"cut mid-record", "incomplete record:", func(d []byte, last, _ int) ([]byte, int, int) { return d[:last+recordHeaderSize+5], last, n - 1 }, false},
		{"cut mid-header", "incomplete record header", func(d []byte, last, _ int) ([]byte, int, int) { return d[:last+4], last, n - 1 }, false},
		{"cut after header", "incomplete record:", func(d []byte, last, _ int) ([]byte, int, int) { return d[:last+recordHeaderSize], last, n - 1 }, false},
		{"flipped body byte", "checksum mismatch", func(d []byte, last, _ int) ([]byte, int, int) {
			d[last+recordHeaderSize+3] ^= 0x40
			return d, last, n - 1
		}, false},
		{"flipped crc byte", "checksum mismatch", func(d []byte, last, _ int) ([]byte, int, int) { d[last+1] ^= 1; return d, last, n - 1 }, false},
		{"zero type", "record type 0", func(d []byte, last, _ int) ([]byte, int, int) { d[last+8] = 0; return d, last, n - 1 }, false},
		{"impossible length", "impossible record length", func(d []byte, last, _ int) ([]byte, int, int) {
			binary.BigEndian.PutUint32(d[last+4:], MaxRecordSize+1)
			return d, last, n - 1
		}, false},
		{"zeroed last record", "", func(d []byte, last, _ int) ([]byte, int, int) {
			clear(d[last:])
			return d, last, n - 1
		}, true},
		{"zeroed block appended", "", func(d []byte, _, end int) ([]byte, int, int) {
			return append(d[:end], make([]byte, 4096)...), end, n
		}, true},
		{"zeroed block, then garbage", "zeroed record header", func(d []byte, _, end int) ([]byte, int, int) {
			return append(append(d[:end], make([]byte, 4096)...), 1), end, n
		}, false},
		{"garbage appended", "", func(d []byte, _, end int) ([]byte, int, int) {
			rng := rand.New(rand.NewPCG(1, 2))
			g := make([]byte, 100)
			for i := range g {
				g[i] = byte(rng.UintN(256))
			}
			g[0] |= 1
			return append(d[:end], g...), end, n
		}, false},
	}
	for _, env := range testEnvs(t) {
		for i, dm := range damages {
			t.Run(env.name+"/"+dm.name, func(t *testing.T) {
				dir := fmt.Sprintf("%s%d", env.dir, i)
				opts := Options{FS: env.fs, Dir: dir, Logger: discardLogger}
				acked := writeRecords(t, opts, n)
				path := env.fs.PathJoin(dir, fileName(acked[0].End.File))
				last := int(acked[n-2].End.Offset)
				damaged, at, intact := dm.apply(readFile(t, env.fs, path), last, int(acked[n-1].End.Offset))
				writeFile(t, env.fs, path, damaged)

				log2, lb2 := newLogger()
				opts.Logger = log2
				j, got := openT(t, opts, Position{})
				checkRecs(t, got, acked[:intact])
				level, what := "WARN", "torn tail"
				if dm.zeros {
					level, what = "INFO", "records end where zeros begin"
					checkQuiet(t, lb2)
				} else {
					checkLogged(t, lb2, level, path, int64(at))
				}
				var line string
				for _, l := range lb2.lines(level) {
					if strings.Contains(l, what) {
						line = l
					}
				}
				for _, want := range []string{"file=" + path + " ", fmt.Sprintf(" offset=%d ", at), fmt.Sprintf("cut_bytes=%d", len(damaged)-at), dm.reason} {
					if !strings.Contains(line, want) {
						t.Errorf("no %s line saying %q with %q (where, how many bytes were cut, why):\n%s", level, what, want, lb2)
					}
				}
				if len(lb2.lines("ERROR")) > 0 {
					t.Fatalf("unexpected error log:\n%s", lb2)
				}
				if size := fileSize(t, env.fs, path); size != int64(at) {
					t.Fatalf("damaged file is %d bytes, want it cut at %d", size, at)
				}

				// Appends go on, and a further run replays old and new.
				want := slices.Clone(acked[:intact])
				for k := range 5 {
					body := testBody(2, k, 33)
					r := appendWait(t, j, 7, body)
					if r.Err != nil {
						t.Fatal(r.Err)
					}
					want = append(want, rec{r.End, 7, body})
				}
				if err := j.Close(); err != nil {
					t.Fatal(err)
				}
				log3, lb3 := newLogger()
				opts.Logger = log3
				j, got = openT(t, opts, Position{})
				defer j.Close()
				checkRecs(t, got, want)
				checkQuiet(t, lb3)
			})
		}
	}
}

func TestBadFileHeader(t *testing.T) {
	for _, env := range testEnvs(t) {
		t.Run(env.name+"/last file shorter than a header is removed", func(t *testing.T) {
			for _, size := range []int{0, 3, fileHeaderSize - 1} {
				dir := fmt.Sprintf("%s-short%d", env.dir, size)
				opts := Options{FS: env.fs, Dir: dir, Logger: discardLogger}
				acked := writeRecords(t, opts, 3)
				path := env.fs.PathJoin(dir, fileName(2))
				h := fileHeader{version: formatV2, num: 2}.encode()
				writeFile(t, env.fs, path, h[:size])

				logger, lb := newLogger()
				opts.Logger = logger
				j, got := openT(t, opts, Position{})
				checkRecs(t, got, acked)
				checkLogged(t, lb, "WARN", path, 0)
				if _, err := env.fs.Stat(path); err == nil {
					t.Fatalf("torn file %s still exists", path)
				}
				// Its number is not reused.
				if r := appendWait(t, j, 1, []byte("x")); r.Err != nil || r.End.File != 3 {
					t.Fatalf("append: %v at %v, want file 3", r.Err, r.End)
				}
				j.Close()
			}
		})

		t.Run(env.name+"/bad header skips the file", func(t *testing.T) {
			for _, tc := range []struct {
				name   string
				file   uint64 // 1: an earlier file; 3: the last one
				damage func([]byte)
			}{
				{"magic", 1, func(d []byte) { d[0] = 'X' }},
				{"version", 1, func(d []byte) { d[5] = 3 }},
				{"number", 1, func(d []byte) { d[15]++ }},
				{"reserved", 1, func(d []byte) { d[7] = 1 }},
				{"last-file", 3, func(d []byte) { d[1] = 0 }},
			} {
				dir := env.dir + "-header-" + tc.name
				opts := Options{FS: env.fs, Dir: dir, Logger: discardLogger}
				first := writeRecords(t, opts, 3)  // file 1
				second := writeRecords(t, opts, 4) // file 2
				third := writeRecords(t, opts, 2)  // file 3
				path := env.fs.PathJoin(dir, fileName(tc.file))
				data := readFile(t, env.fs, path)
				tc.damage(data)
				writeFile(t, env.fs, path, data)

				logger, lb := newLogger()
				opts.Logger = logger
				j, got := openT(t, opts, Position{})
				want := append(slices.Clone(second), third...)
				if tc.file == 3 {
					want = append(slices.Clone(first), second...)
				}
				checkRecs(t, got, want)
				checkLogged(t, lb, "ERROR", path, 0)
				if size := fileSize(t, env.fs, path); size != int64(len(data)) {
					t.Fatalf("%s: skipped file changed size to %d", tc.name, size)
				}
				j.Close()
			}
		})
	}
}

// Damage in a file followed by newer files is corruption, not a torn tail:
// the rest of that file is skipped and logged, newer files still replay.
func TestCorruptionInEarlierFile(t *testing.T) {
	for _, env := range testEnvs(t) {
		t.Run(env.name, func(t *testing.T) {
			opts := Options{FS: env.fs, Dir: env.dir, MaxFileSize: 2000, Logger: discardLogger}
			acked := writeRecords(t, opts, 60)
			files := journalFiles(t, env.fs, env.dir)
			if len(files) < 3 {
				t.Fatalf("want 3 files or more, got %v", files)
			}
			bad := files[1]
			var inBad []int // indexes in acked of the records in file bad
			for i, r := range acked {
				if r.End.File == bad {
					inBad = append(inBad, i)
				}
			}
			k := inBad[3] // damage the fourth record of the file
			start := acked[k-1].End.Offset
			path := env.fs.PathJoin(env.dir, fileName(bad))
			data := readFile(t, env.fs, path)
			data[start+recordHeaderSize] ^= 0xff
			writeFile(t, env.fs, path, data)

			var want []rec
			for i, r := range acked {
				if r.End.File != bad || i < k {
					want = append(want, r)
				}
			}
			for range 2 { // the same every time: nothing is cut
				logger, lb := newLogger()
				opts.Logger = logger
				j, got := openT(t, opts, Position{})
				checkRecs(t, got, want)
				checkLogged(t, lb, "ERROR", path, start)
				if len(lb.lines("WARN")) > 0 {
					t.Fatalf("unexpected warning:\n%s", lb)
				}
				if size := fileSize(t, env.fs, path); size != int64(len(data)) {
					t.Fatalf("corrupt earlier file changed size to %d", size)
				}
				j.Close()
			}
		})
	}
}

// A leftover copy from an interrupted cut of a torn tail is removed.
func TestLeftoverTmpRemoved(t *testing.T) {
	fs := vfs.NewMem()
	opts := Options{FS: fs, Dir: memDir, Logger: discardLogger}
	acked := writeRecords(t, opts, 3)
	tmp := fs.PathJoin(memDir, fileName(1)+tmpSuffix)
	writeFile(t, fs, tmp, []byte("partial copy"))
	j, got := openT(t, opts, Position{})
	defer j.Close()
	checkRecs(t, got, acked)
	if _, err := fs.Stat(tmp); err == nil {
		t.Fatal("leftover tmp file not removed")
	}
}

// FuzzReplay feeds arbitrary bytes to recovery as journal file 1, the last
// one or (second) an earlier one: Open must not fail or panic, and every
// record it replays must be one the bytes really hold, checksum (salted in
// the current format) included, before the header's end if it has one.
func FuzzReplay(f *testing.F) {
	valid := func(version byte, end bool, bodies ...string) []byte {
		var b []byte
		salt := uint32(0)
		if version == formatV1 {
			b = append(b, fileMagic...)
			b = append(b, formatV1, 0, 0)
		} else {
			h := fileHeader{version: formatV2, num: 1}.encode()
			b = h[:]
			salt = fileSalt(1)
		}
		for i, body := range bodies {
			b = appendRecordCRC(b, recordCRC(byte(i+1), []byte(body))^salt, byte(i+1), []byte(body))
		}
		if end {
			binary.BigEndian.PutUint64(b[endOffset:], uint64(len(b)))
			b = appendRecord(b, 9, []byte("old data of a reused file"))
		}
		return b
	}
	v1 := valid(formatV1, false, "hello", "", "world, a longer record body", "x")
	v2 := valid(formatV2, false, "hello", "", "world, a longer record body", "x")
	for _, seed := range [][]byte{
		nil, []byte("MGJ"), v1[:headerSizeV1], v1, v1[:len(v1)-3], v1[:headerSizeV1+4],
		append(slices.Clone(v1), make([]byte, 100)...), append(slices.Clone(v1), 1, 2, 3),
		append([]byte("XGJNL\x01\x00\x00"), v1[headerSizeV1:]...),
		v2[:headerSizeV2], v2, v2[:len(v2)-3], v2[:headerSizeV2-1], append(slices.Clone(v2), 1, 2, 3),
		valid(formatV2, true, "a", "bc"), valid(formatV1, false, "a"),
	} {
		f.Add(seed, false)
		f.Add(seed, true)
	}
	f.Fuzz(func(t *testing.T, data []byte, second bool) {
		fs := vfs.NewMem()
		if err := fs.MkdirAll(memDir, 0o755); err != nil {
			t.Fatal(err)
		}
		path := fs.PathJoin(memDir, fileName(1))
		writeFile(t, fs, path, data)
		if second {
			h := fileHeader{version: formatV2, num: 2}.encode()
			writeFile(t, fs, fs.PathJoin(memDir, fileName(2)), h[:])
		}
		h, reason := parseFileHeader(data[:min(len(data), headerSizeV2)], 1)
		off, limit := h.size(), int64(len(data))
		if reason == "" && h.end != 0 && h.end <= limit {
			limit = h.end
		}
		j, err := Open(Options{FS: fs, Dir: memDir, Logger: discardLogger}, Position{}, func(end Position, typ byte, body []byte) error {
			if end.File != 1 {
				return nil
			}
			start := end.Offset - recordSize(len(body))
			if reason != "" || start != off || end.Offset > limit {
				return fmt.Errorf("record at %d..%d, want it to start at %d, end by %d (header: %q)", start, end.Offset, off, limit, reason)
			}
			raw := data[start:end.Offset]
			if crc := binary.BigEndian.Uint32(raw) ^ h.salt(); crc != crc32.Checksum(raw[4:], castagnoli) {
				return errors.New("replayed a record whose checksum does not match")
			}
			if typ == 0 || raw[8] != typ || !bytes.Equal(raw[recordHeaderSize:], body) {
				return errors.New("replayed type or body differ from the file")
			}
			off = end.Offset
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		j.Close()
		// The last file is cut after its last good record (or removed when
		// too short for a header, or naming another file); other files, and
		// a finished file (with an end), are left alone.
		fi, err := fs.Stat(path)
		torn := len(data) < headerSizeV1 || h.version == formatV2 && (len(data) < headerSizeV2 || h.num != 1)
		switch {
		case !second && torn:
			if err == nil {
				t.Fatal("torn file not removed")
			}
		case second || reason != "" || h.end != 0:
			if err != nil || fi.Size() != int64(len(data)) {
				t.Fatalf("file changed: %v", err)
			}
		default:
			if err != nil || fi.Size() != off {
				t.Fatalf("file not cut at %d after the last good record: %v", off, err)
			}
		}
	})
}
