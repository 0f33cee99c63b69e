package store

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/cachecast/cachecast/internal/testkit"
	"github.com/cachecast/cachecast/store/record"
	"github.com/cachecast/cachecast/store/view"
)

// BenchmarkPublishTime is the publish rate of a store with an expiry on
// every message, and with a schedule, beside plain messages (100-byte
// values, the default options: async flush, 64 MiB segments); cpu-ns/op
// is the process's CPU a publish, which the machine's load changes less
// than the rate. (The tests' 64 KiB segments and 1,024-entry index chunks
// would make it create a file every few hundred records, a cost that
// grows with the record's bytes and was most of what it measured.)
//
// write=first gives every publish a key never written before;
// write=again cycles over 10,000 keys, each written once the same way
// before the clock starts. kind=scheduled schedules a value an hour
// ahead, every one at the same instant, for a key with no value in force;
// kind=sale schedules it for a key with a plain value in force: written
// first, the key's first pending value beside the one in force, written
// again, a price feed's steady state (the pending value replaced by a
// newer one for the same instant). The plain values a sale's first
// writes need are published with the clock stopped, their CPU taken out.
func BenchmarkPublishTime(b *testing.B) {
	for _, write := range []string{"first", "again"} {
		for _, kind := range []string{"plain", "ttl", "scheduled", "sale"} {
			b.Run("write="+write+"/kind="+kind, func(b *testing.B) {
				benchPublishTime(b, write == "again", kind)
			})
		}
	}
}

func benchPublishTime(b *testing.B, again bool, kind string) {
	const chunk = 10_000
	s := openTest(b, DefaultOptions(b.TempDir()))
	defer s.Close()
	far := time.Now().Add(time.Hour).UnixMilli()
	value := make([]byte, 100)
	message := func(key string, i int) record.Message {
		m := record.Message{Topic: "prices", Key: key, Value: value}
		switch kind {
		case "ttl":
			m.ExpiresAt = far + int64(i)
		case "scheduled", "sale":
			m.EffectiveAt = far
		}
		return m
	}
	keys := make([]string, chunk)
	// fill names the next chunk of keys and publishes what they hold
	// before the benchmark writes them: a plain value for a sale's, and
	// for write=again the kind's own write (a plain one for a sale).
	fill := func(round int) {
		for j := range keys {
			keys[j] = fmt.Sprintf("sku-%04d-%06d", round, j)
		}
		if again || kind == "sale" {
			ms := make([]record.Message, len(keys))
			for j, k := range keys {
				ms[j] = message(k, j)
				if kind == "sale" {
					ms[j].EffectiveAt = 0
				}
			}
			if _, err := s.PublishBatch(ms); err != nil {
				b.Fatal(err)
			}
		}
	}
	fill(0)
	b.ReportAllocs()
	b.ResetTimer()
	cpu := testkit.ProcessCPU()
	var aside int64 // the CPU of fill with the clock stopped
	for i := 0; b.Loop(); i++ {
		if !again && i > 0 && i%chunk == 0 {
			b.StopTimer()
			c := testkit.ProcessCPU()
			fill(i / chunk)
			aside += testkit.ProcessCPU() - c
			b.StartTimer()
		}
		m := message(keys[i%chunk], i)
		if _, err := s.Publish(&m); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(testkit.ProcessCPU()-cpu-aside)/float64(b.N), "cpu-ns/op")
}

// BenchmarkScheduledFlipSpread schedules 10,000 keys for one instant 1 s
// ahead on one store, gives the records to two more (as the fan-out
// does), and measures when each store's timer made each key's scheduled
// value the entry (the effective event the followers and the shared view
// get): late-p50, late-p99 and late-max are after the instant over every
// key of every store, spread-max the widest gap between the three stores
// for one key. A read (GET, MGET) resolves the value at its own instant,
// so it flips at the instant exactly; this is the lag of what follows the
// timer. All three run on one machine's clock.
func BenchmarkScheduledFlipSpread(b *testing.B) {
	const keys = 10_000
	for b.Loop() {
		stores := make([]*Store, 3)
		for i := range stores {
			stores[i] = openTest(b, testOptions(b, b.TempDir()))
		}
		instant := time.Now().Add(time.Second).UnixMilli()
		ms := make([]record.Message, keys)
		for i := range ms {
			ms[i] = record.Message{Topic: "prices", Key: fmt.Sprintf("sku-%05d", i), Value: []byte("sale"), EffectiveAt: instant}
		}
		if _, err := stores[0].PublishBatch(ms); err != nil {
			b.Fatal(err)
		}
		var raw [][]byte
		if _, err := stores[0].ReadOrigin(stores[0].Origin(), 1, keys, func(r record.Record) error {
			raw = append(raw, r.Clone())
			return nil
		}); err != nil {
			b.Fatal(err)
		}
		for _, s := range stores[1:] {
			for _, r := range raw {
				if _, err := s.AppendRecord(r); err != nil {
					b.Fatal(err)
				}
			}
		}
		// Each store's follower notes when it sees each key take effect.
		seen := make([]map[string]time.Time, len(stores))
		done := make(chan int, len(stores))
		for i, s := range stores {
			seen[i] = make(map[string]time.Time, keys)
			go func() {
				next, _ := s.TimeEvents(0, nil)
				for len(seen[i]) < keys {
					changed := s.Changed()
					next, _ = s.TimeEvents(next, func(c view.Change) {
						if c.Cause == view.CauseEffective {
							seen[i][c.Key] = time.Now()
						}
					})
					if len(seen[i]) < keys {
						<-changed
					}
				}
				done <- i
			}()
		}
		for range stores {
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				b.Fatal("the scheduled values did not all take effect")
			}
		}
		at := time.UnixMilli(instant)
		var late []time.Duration
		var spread time.Duration
		for k := range seen[0] {
			lo, hi := seen[0][k], seen[0][k]
			for i := range stores {
				t := seen[i][k]
				late = append(late, t.Sub(at))
				lo, hi = minTime(lo, t), maxTime(hi, t)
			}
			spread = max(spread, hi.Sub(lo))
		}
		slices.Sort(late)
		ms1 := func(d time.Duration) float64 { return float64(d) / 1e6 }
		b.ReportMetric(ms1(late[len(late)/2]), "late-p50-ms")
		b.ReportMetric(ms1(late[len(late)*99/100]), "late-p99-ms")
		b.ReportMetric(ms1(late[len(late)-1]), "late-max-ms")
		b.ReportMetric(ms1(spread), "spread-max-ms")
		for _, s := range stores {
			s.Close()
		}
	}
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
