package daemon

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/cachecast/cachecast/internal/testkit"
)

// TestRedisTransactionsAcrossCluster: go-redis's TxPipelined (MULTI/EXEC)
// on node 0 writes SETs, an MSET, an HSET, a DEL and an EXPIRE as one
// batch: its answers are each command's, in order, a read inside sees
// the transaction's own write, and node 1, reading the keys at one
// instant (MGET) while the batch arrives, sees all of it or none.
func TestRedisTransactionsAcrossCluster(t *testing.T) {
	ds := startCluster(t, 2, nil)
	ctx := context.Background()
	w, r := goRedis(t, ds[0], 2), goRedis(t, ds[1], 3)
	keys := []string{"tx:a", "tx:b", "tx:c", "txh:f"}
	noErr(t, w.MSet(ctx, "tx:a", "old", "tx:b", "old", "tx:c", "old", "tx:gone", "x").Err())
	noErr(t, w.HSet(ctx, "txh", "f", "old").Err())
	testkit.Eventually(t, 10*time.Second, "node 1 has the old values", func() bool {
		vs, err := r.MGet(ctx, append(keys, "tx:gone")...).Result()
		return err == nil && fmt.Sprint(vs) == "[old old old old x]"
	})

	seen := make(chan string, 1)
	stop := make(chan struct{})
	go func() { // node 1's reads while the batch arrives
		defer close(seen)
		for {
			vs, err := r.MGet(ctx, append(keys, "tx:gone")...).Result()
			got := fmt.Sprint(vs)
			switch {
			case err != nil:
				seen <- err.Error()
				return
			case got == "[new new new new <nil>]":
				seen <- ""
				return
			case got != "[old old old old x]":
				seen <- "node 1 saw part of the batch: " + got
				return
			}
			select {
			case <-stop:
				seen <- "node 1 never saw the batch"
				return
			default:
			}
		}
	}()
	var get *goredis.StringCmd
	cmds, err := w.TxPipelined(ctx, func(p goredis.Pipeliner) error {
		p.Set(ctx, "tx:a", "new", 0)
		get = p.Get(ctx, "tx:a")
		p.MSet(ctx, "tx:b", "new", "tx:c", "new")
		p.HSet(ctx, "txh", "f", "new")
		p.Del(ctx, "tx:gone", "tx:missing")
		p.Expire(ctx, "tx:c", time.Hour)
		return nil
	})
	noErr(t, err)
	if len(cmds) != 6 || get.Val() != "new" || cmds[3].(*goredis.IntCmd).Val() != 0 ||
		cmds[4].(*goredis.IntCmd).Val() != 1 || !cmds[5].(*goredis.BoolCmd).Val() {
		t.Fatalf("EXEC's answers: %v", cmds)
	}
	timer := time.AfterFunc(10*time.Second, func() { close(stop) })
	defer timer.Stop()
	if msg := <-seen; msg != "" {
		t.Fatal(msg)
	}
	if ttl := must(r.TTL(ctx, "tx:c").Result()); ttl < time.Hour-time.Minute {
		t.Fatalf("node 1: TTL of tx:c %v, want about an hour", ttl)
	}
}

// TestRedisWatchSeesOtherNodes: go-redis's Watch on node 0 aborts its
// transaction (TxFailedErr) when the watched key changed in node 0's
// view since WATCH, a write of node 1 included, and commits it when
// nothing changed.
func TestRedisWatchSeesOtherNodes(t *testing.T) {
	ds := startCluster(t, 2, nil)
	ctx := context.Background()
	a, b := goRedis(t, ds[0], 2), goRedis(t, ds[1], 2)
	noErr(t, a.Set(ctx, "w:k", "1", 0).Err())
	incr := func(tx *goredis.Tx, between func()) error {
		v := must(tx.Get(ctx, "w:k").Int())
		between()
		_, err := tx.TxPipelined(ctx, func(p goredis.Pipeliner) error {
			p.Set(ctx, "w:k", v+1, 0)
			return nil
		})
		return err
	}
	// Node 1 writes the key, and node 0's view has it, before EXEC.
	err := a.Watch(ctx, func(tx *goredis.Tx) error {
		return incr(tx, func() {
			noErr(t, b.Set(ctx, "w:k", "10", 0).Err())
			testkit.Eventually(t, 10*time.Second, "node 0 has node 1's write", func() bool {
				v, err := a.Get(ctx, "w:k").Result()
				return err == nil && v == "10"
			})
		})
	}, "w:k")
	if !errors.Is(err, goredis.TxFailedErr) {
		t.Fatalf("EXEC after another node's write: %v, want %v", err, goredis.TxFailedErr)
	}
	noErr(t, a.Watch(ctx, func(tx *goredis.Tx) error { return incr(tx, func() {}) }, "w:k"))
	if v := must(a.Get(ctx, "w:k").Result()); v != "11" {
		t.Fatalf("after an undisturbed WATCH: %q, want 11", v)
	}
}
