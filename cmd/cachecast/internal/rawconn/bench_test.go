package rawconn

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cachecast/cachecast/client"
	"github.com/cachecast/cachecast/daemon"
	"github.com/cachecast/cachecast/daemon/daemontest"
)

// BenchmarkBenchConn sets bench's raw connection beside a client.Client
// of one connection, against one real daemon in this process, for a GET
// and a PUT of 100 bytes: what the raw connection saves per request (the
// figures include the daemon's own work, the same for both).
func BenchmarkBenchConn(b *testing.B) {
	n := daemontest.Start(b, func(cfg *daemon.Config) { cfg.NodeName = "bench" })
	ctx := context.Background()
	c := client.New(n.Socket, client.WithMaxConns(1), client.WithTimeout(10*time.Second))
	defer c.Close()
	raw, err := Dial(ctx, n.Socket, 10*time.Second)
	if err != nil {
		b.Fatal(err)
	}
	defer raw.Close()
	value := bytes.Repeat([]byte("v"), 100)
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = fmt.Sprintf("key-%04d", i)
		if _, err := raw.Publish("bench", keys[i], value, ""); err != nil {
			b.Fatal(err)
		}
	}
	for _, impl := range []struct {
		name string
		get  func(key string) (client.Value, error)
		put  func(key string) (client.PutResult, error)
	}{
		{"conn=raw", func(k string) (client.Value, error) { return raw.Get("bench", k) },
			func(k string) (client.PutResult, error) { return raw.Publish("bench", k, value, "") }},
		{"conn=client", func(k string) (client.Value, error) { return c.Get(ctx, "bench", k) },
			func(k string) (client.PutResult, error) { return c.Publish(ctx, "bench", k, value, "") }},
	} {
		b.Run("op=get/"+impl.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if v, err := impl.get(keys[i%len(keys)]); err != nil || len(v.Bytes) != len(value) {
					b.Fatalf("get: %d bytes, %v", len(v.Bytes), err)
				}
			}
		})
		b.Run("op=put/"+impl.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if _, err := impl.put(keys[i%len(keys)]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
