package broadcast

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cachecast/cachecast/internal/testkit"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/cachecast/cachecast/store/record"
)

// eachTransport runs the test body on both transports.
func eachTransport(t *testing.T, body func(t *testing.T, transport string)) {
	for _, tr := range []string{"tcp", "nats"} {
		t.Run("transport="+tr, func(t *testing.T) { body(t, tr) })
	}
}

func TestNATSCarriesFanOut(t *testing.T) {
	t.Parallel()
	c := newClusterOn(t, "nats", 3, nil)
	for j := 0; j < 300; j++ {
		publish(t, c.nodes[j%3], fmt.Sprintf("k%d", j%50), fmt.Sprint(j))
	}
	c.waitConverged(10 * time.Second)
	// Each origin sent its records once, to NATS, not once per peer.
	for _, tn := range c.nodes {
		var own uint64
		tn.st.ReadOrigin(tn.st.Origin(), 1, 1000, func(r record.Record) error { own += uint64(r.Size()); return nil })
		if sent := tn.n.BytesSent(); sent != own {
			t.Errorf("%s sent %d bytes of its own records, which are %d bytes", tn.name, sent, own)
		}
	}
}

// TestNATSServerRestart stops the NATS server while nodes publish and
// starts it again: every view converges and no acknowledged write is
// missing (NATS drops, anti-entropy repairs).
func TestNATSServerRestart(t *testing.T) {
	t.Parallel()
	ns := testkit.NATS(t, nil)
	url := ns.ClientURL()
	c := &testCluster{t: t, net: newFaultNet(), names: map[uint64]string{}, natsURL: url}
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	// The restarted server's cleanup runs before c.stop: the nodes close
	// with NATS gone, as they ran with it gone.
	t.Cleanup(c.stop)
	for i := 0; i < 3; i++ {
		c.add(fmt.Sprintf("n%d", i), dirs[i])
	}
	c.wire()
	acked := map[uint64]uint64{}
	write := func(from, to int) {
		for j := from; j < to; j++ {
			res := publish(t, c.nodes[j%3], fmt.Sprintf("k%d", j%40), fmt.Sprint(j))
			acked[res.Origin] = max(acked[res.Origin], res.Seq)
		}
	}
	write(0, 200)
	ns.Shutdown()
	ns.WaitForShutdown()
	write(200, 400) // NATS is down: these travel only by anti-entropy
	time.Sleep(100 * time.Millisecond)
	newNATSServerAt(t, url)
	write(400, 600)
	c.waitConverged(15 * time.Second)
	for _, tn := range c.nodes {
		v := tn.st.Vector()
		for o, s := range acked {
			if v[o] < s {
				t.Fatalf("%s holds %016x up to %d, %d acknowledged", tn.name, o, v[o], s)
			}
		}
		if tn.n.NATSDisconnects() == 0 {
			t.Errorf("%s did not notice the NATS outage", tn.name)
		}
	}
}

// newNATSServerAt starts a NATS server on the port of url again.
func newNATSServerAt(t *testing.T, url string) *server.Server {
	var port int
	if _, err := fmt.Sscanf(url[len("nats://127.0.0.1:"):], "%d", &port); err != nil {
		t.Fatalf("port of %s: %v", url, err)
	}
	return testkit.NATS(t, &server.Options{Port: port})
}

func TestNATSWaitReplica(t *testing.T) {
	t.Parallel()
	c := newClusterOn(t, "nats", 3, nil)
	a, b := c.nodes[0], c.nodes[1]
	a.n.SetReplica(b.st.Origin())
	res := publish(t, a, "k", "v")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := a.n.WaitReplica(ctx, b.st.Origin(), res.Seq); err != nil {
		t.Fatal(err)
	}
}
