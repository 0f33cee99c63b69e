package client_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cachecast/cachecast/client"
	"github.com/cachecast/cachecast/internal/testkit"
)

// TestEventTimesFromDaemon: a real daemon's stream carries a message's
// time fields and an expiry change's new expiry, and Event holds them: a
// scheduled write its EffectiveAt and ExpiresAt, the cancel of it Cancel
// and the instant it cancels, an EXPIRE the version's new ExpiresAt, a
// PERSIST none.
func TestEventTimesFromDaemon(t *testing.T) {
	d := startDaemon(t)
	at := time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)
	until := at.Add(2 * time.Hour)
	hc := testkit.UnixClient(d.d.SocketPath(), false, 10*time.Second)
	send := func(method, path, body string) {
		t.Helper()
		rq, err := http.NewRequestWithContext(ctx(t), method, "http://cachecast"+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		rq.Header.Set("Content-Type", "application/x-ndjson")
		res, err := hc.Do(rq)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Fatalf("%s %s: %s", method, path, res.Status)
		}
	}
	send("POST", "/v1/topics/prices/messages",
		`{"key":"sku-42","value":"9.99","effective_at":"2100-01-01T00:00:00Z","expires_at":"2100-01-01T02:00:00Z"}`+"\n")
	send("DELETE", "/v1/topics/prices/pending/sku-42?effective_at=2100-01-01T00:00:00Z", "")
	c := client.New(d.d.SocketPath())
	t.Cleanup(func() { c.Close() })
	w, err := c.Publish(ctx(t), "prices", "sku-1", []byte("4.20"), "")
	if err != nil {
		t.Fatal(err)
	}
	rc := redis.NewClient(&redis.Options{Network: "unix", Addr: d.d.RedisSocketPath(), Protocol: 2})
	t.Cleanup(func() { rc.Close() })
	if ok, err := rc.ExpireAt(ctx(t), "prices:sku-1", until).Result(); !ok || err != nil {
		t.Fatalf("EXPIREAT: %v %v", ok, err)
	}
	if ok, err := rc.Persist(ctx(t), "prices:sku-1").Result(); !ok || err != nil {
		t.Fatalf("PERSIST: %v %v", ok, err)
	}

	sub, err := c.Subscribe(ctx(t), "prices", client.SubscribeOptions{From: "earliest"})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	of := &client.VersionOf{Origin: w.Origin, Seq: w.Seq}
	for i, want := range []client.Event{
		{Key: "sku-42", Value: []byte("9.99"), EffectiveAt: at, ExpiresAt: until},
		{Key: "sku-42", Value: []byte{}, Cancel: true, EffectiveAt: at},
		{Key: "sku-1", Value: []byte("4.20")},
		{Key: "sku-1", Value: []byte("4.20"), ExpiryOf: of, ExpiresAt: until},
		{Key: "sku-1", Value: []byte("4.20"), ExpiryOf: of},
	} {
		ev, err := sub.Next()
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if ev.Key != want.Key || string(ev.Value) != string(want.Value) || ev.Cancel != want.Cancel ||
			!ev.EffectiveAt.Equal(want.EffectiveAt) || !ev.ExpiresAt.Equal(want.ExpiresAt) ||
			(ev.ExpiryOf == nil) != (want.ExpiryOf == nil) || ev.ExpiryOf != nil && *ev.ExpiryOf != *want.ExpiryOf {
			t.Errorf("event %d: %+v (expiry of %+v); want %+v (expiry of %+v)", i, ev, ev.ExpiryOf, want, want.ExpiryOf)
		}
	}
}
