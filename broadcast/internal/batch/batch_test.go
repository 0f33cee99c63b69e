package batch

import (
	"bytes"
	"testing"

	"github.com/cachecast/cachecast/store"

	"github.com/cachecast/cachecast/store/record"
)

// TestRead: a batch stops at its record count, after the record that
// reaches its byte bound, or at the first seq not held; its records are
// the log's bytes, in seq order.
func TestRead(t *testing.T) {
	t.Parallel()
	o := store.DefaultOptions(t.TempDir())
	o.SegmentSize = 1 << 20
	st, err := store.Open(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	origin := st.Origin()
	var sizes []int
	for i := range 10 {
		res, err := st.Publish(&record.Message{Topic: "t", Key: "k", Value: make([]byte, 100*i)})
		if err != nil {
			t.Fatal(err)
		}
		_, err = st.ReadOrigin(origin, res.Seq, res.Seq, func(r record.Record) error { sizes = append(sizes, len(r)); return nil })
		if err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name                 string
		from                 uint64
		maxRecords, maxBytes int
		wantEnd              uint64
	}{
		{"whole log", 1, 100, 1 << 20, 11},
		{"record count", 1, 3, 1 << 20, 4},
		{"byte bound: the record that reaches it is in", 1, 100, sizes[0] + sizes[1] + 1, 4},
		{"byte bound met exactly", 1, 100, sizes[0] + sizes[1], 3},
		{"from the middle to the end held", 8, 100, 1 << 20, 11},
		{"past the end held", 11, 100, 1 << 20, 11},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			buf, recs, end, err := Read(st, origin, tt.from, tt.maxRecords, tt.maxBytes, record.Version2, nil, nil)
			if err != nil || end != tt.wantEnd {
				t.Fatalf("end %d, %v; want %d", end, err, tt.wantEnd)
			}
			if len(recs) != int(end-tt.from) {
				t.Fatalf("%d records for seqs %d..%d", len(recs), tt.from, end-1)
			}
			var joined []byte
			for i, r := range recs {
				if len(r) != sizes[int(tt.from)-1+i] || record.Record(r).Seq() != tt.from+uint64(i) {
					t.Fatalf("record %d: %d bytes, seq %d", i, len(r), record.Record(r).Seq())
				}
				joined = append(joined, r...)
			}
			if !bytes.Equal(joined, buf) {
				t.Fatal("the records are not buf, in order")
			}
		})
	}
}
