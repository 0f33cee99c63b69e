package daemon

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/cachecast/cachecast/client"
)

// BenchmarkSocketPut: a PUT of a 100-byte value over the Unix socket, one
// connection of a client.Client, into the 1M-key view of BenchmarkSocketGet: the API's write
// path end to end (routing, checks, the store's publish, the answer).
func BenchmarkSocketPut(b *testing.B) {
	b.Run("keys=1M/value=100", func(b *testing.B) {
		bd := startBenchDaemon(b, 100)
		c := client.New(bd.cfg.Socket, client.WithMaxConns(1), client.WithTimeout(10*time.Second))
		defer c.Close()
		ctx := context.Background()
		value := bytes.Repeat([]byte("v"), 100)
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if _, err := c.Publish(ctx, "prices", bd.keys[bd.order[i%benchKeys]], value, ""); err != nil {
				b.Fatalf("put: %v", err)
			}
		}
	})
}
