package daemon

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cachecast/cachecast/internal/testkit"
)

// TestRedisCountersConvergeOnThreeNodes: clients of three nodes
// increment the same counters at once (INCRBY, DECRBY, HINCRBY, and
// INCRBY inside MULTI/EXEC); once the nodes have each other's records,
// every node serves, for each counter, its value before plus the sum of
// every acknowledged increment: none is lost and none counted twice, as
// a read-modify-write by last writer wins would lose them.
func TestRedisCountersConvergeOnThreeNodes(t *testing.T) {
	ds := startCluster(t, 3, nil)
	ctx := context.Background()
	seed := goRedis(t, ds[0], 2)
	noErr(t, seed.Set(ctx, "ctr:a", "100", 0).Err())
	noErr(t, seed.HSet(ctx, "ctrh", "f", "0").Err())
	for i, td := range ds {
		c := goRedis(t, td, 2)
		testkit.Eventually(t, 10*time.Second, fmt.Sprintf("node %d has the counters", i), func() bool {
			a, err1 := c.Get(ctx, "ctr:a").Result()
			f, err2 := c.HGet(ctx, "ctrh", "f").Result()
			return err1 == nil && err2 == nil && a == "100" && f == "0"
		})
	}
	const rounds = 150
	var mu sync.Mutex
	sumA, sumF := int64(100), int64(0)
	var wg sync.WaitGroup
	for i, td := range ds {
		c := goRedis(t, td, 2)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				d := int64(r%7 + i)
				var err error
				switch r % 4 {
				case 0:
					err = c.IncrBy(ctx, "ctr:a", d).Err()
				case 1:
					err = c.DecrBy(ctx, "ctr:a", d).Err()
					d = -d
				case 2:
					_, err = c.TxPipelined(ctx, func(p goredis.Pipeliner) error {
						p.IncrBy(ctx, "ctr:a", d)
						p.IncrBy(ctx, "ctr:a", d)
						return nil
					})
					d *= 2
				case 3:
					if err = c.HIncrBy(ctx, "ctrh", "f", d).Err(); err == nil {
						mu.Lock()
						sumF += d
						mu.Unlock()
					}
					continue
				}
				if err != nil {
					t.Errorf("node %d round %d: %v", i, r, err)
					return
				}
				mu.Lock()
				sumA += d
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	wantA, wantF := strconv.FormatInt(sumA, 10), strconv.FormatInt(sumF, 10)
	for i, td := range ds {
		c := goRedis(t, td, 2)
		testkit.Until(t, 20*time.Second, fmt.Sprintf("node %d counts every increment", i), func() string {
			a, _ := c.Get(ctx, "ctr:a").Result()
			f, _ := c.HGet(ctx, "ctrh", "f").Result()
			if a == wantA && f == wantF {
				return ""
			}
			return fmt.Sprintf("ctr:a %s (want %s), ctrh f %s (want %s)", a, wantA, f, wantF)
		})
	}
	// Increments of a transaction's own SET and DEL count on that
	// write's version (on the absence after that delete) on every node,
	// and so do the increments made after it on each node.
	if _, err := seed.TxPipelined(ctx, func(p goredis.Pipeliner) error {
		p.Set(ctx, "ctr:b", "10", 0)
		p.IncrBy(ctx, "ctr:b", 5)
		p.Del(ctx, "ctr:a")
		p.Incr(ctx, "ctr:a")
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	convergedTo(t, ds, "15", "1")
	for _, td := range ds {
		c := goRedis(t, td, 2)
		noErr(t, c.IncrBy(ctx, "ctr:b", 2).Err())
		noErr(t, c.Incr(ctx, "ctr:a").Err())
	}
	convergedTo(t, ds, "21", "4")
}

// convergedTo waits for every node of ds to serve ctr:b and ctr:a as b
// and a.
func convergedTo(t *testing.T, ds []*testDaemon, b, a string) {
	t.Helper()
	ctx := context.Background()
	for i, td := range ds {
		c := goRedis(t, td, 2)
		testkit.Until(t, 20*time.Second, fmt.Sprintf("node %d serves ctr:b %s, ctr:a %s", i, b, a), func() string {
			if vs, err := c.MGet(ctx, "ctr:b", "ctr:a").Result(); err != nil || fmt.Sprint(vs) != fmt.Sprint([]any{b, a}) {
				return fmt.Sprint(vs, err)
			}
			return ""
		})
	}
}
