package cluster

import (
	"context"
	"testing"
	"time"

	"github.com/cachecast/cachecast/wire"
)

// TestVerifyTurnsPace: a verify that hashed the view for d makes the next
// one start VerifyShare times d after it ended; one that hashed nothing
// asks no pause; a caller whose context ends while it waits gets an
// empty result, its verify not run.
func TestVerifyTurnsPace(t *testing.T) {
	vt := NewVerifyTurns()
	var (
		hashed time.Duration // the node's hashing so far
		last   time.Duration // the last verify's
		ended  time.Time     // when the last verify ended
	)
	hashing := func() (uint64, time.Duration) { return 0, hashed }
	verify := func(hash time.Duration) func() wire.VerifyResult {
		return func() wire.VerifyResult {
			if since := time.Since(ended); !ended.IsZero() && since < VerifyShare*last {
				t.Errorf("a verify began %v after the last ended, which hashed %v", since, last)
			}
			hashed += hash
			last = hash
			return wire.VerifyResult{Identical: true}
		}
	}
	for i, hash := range []time.Duration{50 * time.Millisecond, 50 * time.Millisecond, 0, 0} {
		if res := vt.take(context.Background(), hashing, verify(hash)); !res.Identical {
			t.Fatalf("verify %d: %+v", i, res)
		}
		ended = time.Now()
	}
	if vt.next.After(ended) {
		t.Fatalf("after a verify that hashed nothing the next waits until %v", vt.next)
	}

	vt.take(context.Background(), hashing, verify(time.Hour)) // the next would wait 4 h
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	ran := false
	if res := vt.take(ctx, hashing, func() wire.VerifyResult { ran = true; return wire.VerifyResult{Identical: true} }); res.Identical || ran {
		t.Fatalf("a caller whose context ended while it waited: %+v, its verify run: %v", res, ran)
	}
}
