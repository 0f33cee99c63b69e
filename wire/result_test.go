package wire

import (
	"encoding/json"
	"math"
	"strconv"
	"testing"
	"time"
)

// putResult is p as the client reads it back, with the strings the
// daemon used to make for each result.
func (p *Published) putResult() PutResult {
	return PutResult{Topic: p.Topic, Key: p.Key, Origin: FormatOrigin(p.Origin), Seq: p.Seq,
		HLC: strconv.FormatUint(p.HLC, 10), Time: time.UnixMilli(p.Millis).UTC().Format(TimeLayout), Status: p.Status}
}

// TestAppendResults: the answer of Published results is encoding/json's
// of the PutResults they stand for, byte for byte, one object or a batch.
func TestAppendResults(t *testing.T) {
	rs := []Published{
		{Topic: "t", Key: "k", Origin: 0xab, Seq: 7, HLC: 123, Millis: 1735787045678, Status: StatusOK},
		{Topic: "prices", Key: `a "quoted"/ünï key`, Origin: math.MaxUint64, Seq: math.MaxUint64, HLC: math.MaxUint64,
			Millis: 0, Status: StatusReplicaTimeout},
		{Topic: "x", Key: "y", Millis: maxFastMilli + 1, Status: StatusReplicaUnavailable},
	}
	for _, tc := range []struct {
		name  string
		rs    []Published
		batch bool
	}{
		{"one", rs[:1], false},
		{"batch of 1", rs[:1], true},
		{"batch of 3", rs, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prs := make([]PutResult, len(tc.rs))
			for i := range tc.rs {
				prs[i] = tc.rs[i].putResult()
			}
			var want []byte
			var err error
			if tc.batch {
				want, err = json.Marshal(struct {
					Results []PutResult `json:"results"`
				}{prs})
			} else {
				want, err = json.Marshal(prs[0])
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := AppendResults(nil, tc.rs, tc.batch); string(got) != string(want) {
				t.Errorf("AppendResults:\n got %s\nwant %s", got, want)
			}
		})
	}
}

// TestAppendUnixMilli: the instants where a hand-written calendar goes
// wrong (leap days, century years, the ends of the range and past them)
// read as time formats them.
func TestAppendUnixMilli(t *testing.T) {
	for _, at := range []time.Time{
		time.Unix(0, 0),
		time.Date(1970, 1, 1, 0, 0, 0, 1e6, time.UTC),
		time.Date(1972, 2, 29, 23, 59, 59, 999e6, time.UTC),
		time.Date(2000, 2, 29, 12, 0, 0, 0, time.UTC),
		time.Date(2000, 3, 1, 0, 0, 0, 0, time.UTC),
		time.Date(2100, 2, 28, 23, 59, 59, 0, time.UTC),
		time.Date(2100, 3, 1, 0, 0, 0, 0, time.UTC),
		time.Date(2026, 12, 31, 23, 59, 59, 999e6, time.UTC),
		time.Date(9999, 12, 31, 23, 59, 59, 999e6, time.UTC),
		time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(1969, 12, 31, 23, 59, 59, 999e6, time.UTC),
		time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC),
	} {
		ms := at.UnixMilli()
		want := time.UnixMilli(ms).UTC().Format(TimeLayout)
		if got := string(AppendUnixMilli([]byte("x"), ms)); got != "x"+want {
			t.Errorf("AppendUnixMilli(%d) = %q, want %q", ms, got, "x"+want)
		}
	}
}

// FuzzAppendUnixMilli holds AppendUnixMilli to time's formatting for any
// instant.
func FuzzAppendUnixMilli(f *testing.F) {
	for _, ms := range []int64{0, -1, 1, 951782400000, maxFastMilli, maxFastMilli + 1, math.MinInt64, math.MaxInt64} {
		f.Add(ms)
	}
	f.Fuzz(func(t *testing.T, n int64) {
		// n itself, mostly past the years formatted by hand, and n folded
		// into them.
		for _, ms := range []int64{n, n % (maxFastMilli + 1)} {
			want := time.UnixMilli(ms).UTC().Format(TimeLayout)
			if got := string(AppendUnixMilli(nil, ms)); got != want {
				t.Errorf("AppendUnixMilli(%d) = %q, want %q", ms, got, want)
			}
		}
	})
}
