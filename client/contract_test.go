package client_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/cachecast/cachecast/client"
	"github.com/cachecast/cachecast/client/clienttest"
	"github.com/cachecast/cachecast/daemon"
	"github.com/cachecast/cachecast/daemon/daemontest"
)

// backend is what a test of the client talks to: clienttest's double of
// the wire format (every test), or a real cachecastd in this process
// (TestContract).
type backend interface {
	Origin() uint64
	// Requests counts the requests of a route ("PUT
	// /v1/topics/{topic}/keys/{key}"), Messages the messages of a topic.
	Requests(route string) int
	Messages(topic string) int
}

// onDaemon, while TestContract runs, makes newPair start a real daemon.
var onDaemon bool

// newPair is a backend (clienttest's double, or with onDaemon a daemon)
// and a client of it; maxValue (0: the default) is --max-value-size.
func newPair(t *testing.T, maxValue ...int64) (backend, *client.Client) {
	t.Helper()
	var b backend
	var socket string
	if onDaemon {
		d := startDaemon(t, maxValue...)
		b, socket = d, d.d.SocketPath()
	} else {
		var opts []clienttest.Option
		for _, n := range maxValue {
			opts = append(opts, clienttest.WithMaxValueSize(int(n)))
		}
		srv := clienttest.NewServer(t, opts...)
		b, socket = srv, srv.Socket
	}
	c := client.New(socket)
	t.Cleanup(func() { c.Close() })
	return b, c
}

// TestContract runs the client's tests that hold for any daemon, written
// against the double, once more against a real cachecastd (package
// daemon, in this process, on a Unix socket of its own): where the double
// and the daemon read the API differently, one of the two runs fails. The
// tests left out check what only the double can do (fail its health,
// count what the daemon does not, answer strangely).
func TestContract(t *testing.T) {
	onDaemon = true
	t.Cleanup(func() { onDaemon = false })
	for _, tc := range []struct {
		name string
		test func(*testing.T)
	}{
		{"PublishGet", TestPublishGet},
		{"GetNotFound", TestGetNotFound},
		{"Delete", TestDelete},
		{"PublishBatch", TestPublishBatch},
		{"PublishWithoutKey", TestPublishWithoutKey},
		{"KeysPaging", TestKeysPaging},
		{"Cursors", TestCursors},
		{"APIErrors", TestAPIErrors},
		{"InvalidArguments", TestInvalidArguments},
		{"SubscribeFrom", TestSubscribeFrom},
		{"SubscribeValuesAndTags", TestSubscribeValuesAndTags},
		{"SubscribeCursor", TestSubscribeCursor},
		{"SubscribeEvents", TestSubscribeEvents},
		{"SubscribeEnds", TestSubscribeEnds},
	} {
		t.Run(tc.name, tc.test)
	}
}

// inProcess is a cachecastd in the test's process.
type inProcess struct {
	d       *daemon.Daemon
	metrics string // its metrics endpoint, for Requests
}

func startDaemon(t *testing.T, maxValue ...int64) *inProcess {
	t.Helper()
	n := daemontest.Start(t, func(cfg *daemon.Config) {
		cfg.NodeName = "contract"
		cfg.MetricsAddr = "127.0.0.1:0"
		cfg.SegmentSize = 8 << 20
		for _, v := range maxValue {
			cfg.MaxValueSize = v
		}
	})
	return &inProcess{d: n.D, metrics: "http://" + n.D.MetricsAddr() + "/metrics"}
}

func (p *inProcess) Origin() uint64 { return p.d.Store().Origin() }

func (p *inProcess) Messages(topic string) int {
	for _, ti := range p.d.Store().Topics() {
		if ti.Name == topic {
			return int(ti.Messages)
		}
	}
	return 0
}

// routeNames are the daemon's metric labels of the double's route names.
var routeNames = map[string]string{
	"PUT /v1/topics/{topic}/keys/{key}": "put",
	"POST /v1/topics/{topic}/messages":  "messages",
}

// Requests reads the count of the route's latency histogram.
func (p *inProcess) Requests(route string) int {
	name, ok := routeNames[route]
	if !ok {
		panic("no metric label for route " + route)
	}
	res, err := http.Get(p.metrics)
	if err != nil {
		panic(err)
	}
	defer res.Body.Close()
	want := fmt.Sprintf(`cachecast_api_request_duration_seconds_count{route=%q} `, name)
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), want); ok {
			n, err := strconv.Atoi(rest)
			if err != nil {
				panic(err)
			}
			return n
		}
	}
	if err := sc.Err(); err != nil && !errors.Is(err, context.Canceled) {
		panic(err)
	}
	return 0
}
