package daemon

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
)

// testutilCounter reads cachecast_api_errors_total{code=code} from the
// daemon's registry.
func testutilCounter(t *testing.T, td *testDaemon, code string) float64 {
	t.Helper()
	mfs, err := td.d.m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "cachecast_api_errors_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "code" && l.GetValue() == code {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no cachecast_api_errors_total{code=%q}", code)
	return 0
}

func TestMetricsEndpoint(t *testing.T) {
	cfg := testConfig(t)
	cfg.MetricsAddr = "127.0.0.1:0"
	td := startDaemon(t, cfg)
	td.put("t", "a", "12345")
	td.do("POST", "/v1/topics/t/messages", strings.NewReader("{\"key\":\"b\",\"value\":\"1\"}\n{\"key\":\"c\"}\n"), "Content-Type", "application/x-ndjson")
	td.do("GET", "/v1/topics/t/keys/absent", nil)
	td.do("POST", "/v1/cursors/behind", strings.NewReader(`{"topic":"t","offset":0}`))
	td.do("POST", "/v1/cursors/current", strings.NewReader(`{"topic":"t","offset":3}`))
	s := td.subscribe("t/subscribe")

	addr := td.d.MetricsAddr()
	if addr == "" || strings.HasSuffix(addr, ":0") {
		t.Fatalf("MetricsAddr() = %q", addr)
	}
	c := &http.Client{Transport: &http.Transport{}}
	defer c.CloseIdleConnections()
	res, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("/metrics: %d", res.StatusCode)
	}
	text := string(body)
	for _, want := range []string{
		"cachecast_publish_messages_total 3",
		"cachecast_publish_bytes_total 6",
		`cachecast_api_errors_total{code="not_found"} 1`,
		`cachecast_api_errors_total{code="disk_full"} 0`,
		`cachecast_api_request_duration_seconds_count{route="put"} 1`,
		`cachecast_api_request_duration_seconds_count{route="messages"} 1`,
		"cachecast_subscribers 1",
		"cachecast_cursors 2",
		fmt.Sprintf(`cachecast_cursor_oldest_lag_messages{cursor="behind",owner_uid="%d",topic="t"} 3`, os.Getuid()),
		"cachecast_store_view_keys 3",
		"cachecast_store_segments ",
		"cachecast_store_log_bytes ",
		"cachecast_store_records 3",
		"cachecast_store_view_tombstones 0",
		"cachecast_store_tombstones_collected_total 0",
		"cachecast_store_view_digests_total ",
		"cachecast_store_view_digest_seconds_total ",
		"cachecast_store_flush_duration_seconds_bucket",
		`cachecast_node_info{flush="async",node="test-node"`,
		"cachecast_api_connections ",
		"go_goroutines ",
		"process_open_fds ",
		"cachecast_node_ready 1",
		"cachecast_node_healthy 1",
		`cachecast_node_degraded{reason="alone"} 0`,
		`cachecast_node_degraded{reason="members_missing"} 0`,
		"cachecast_node_members_missing 0",
		"cachecast_node_away 0",
		"cachecast_node_disk_full 0",
		"cachecast_node_catching_up 0",
		"cachecast_node_repair_pending 0",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	s.close()

	// Health is served read-only on the metrics port too.
	for _, path := range []string{"/healthz", "/readyz"} {
		res, err := c.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 200 || !strings.Contains(string(b), `"status":"ok"`) {
			t.Errorf("GET %s on the metrics port: %d %s", path, res.StatusCode, b)
		}
		res, err = c.Post("http://"+addr+path, "text/plain", nil)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode == 200 {
			t.Errorf("POST %s on the metrics port: 200", path)
		}
	}

	res, err = c.Get("http://" + addr + "/other")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 404 {
		t.Fatalf("/other: %d", res.StatusCode)
	}
}

// TestFlushHistogram: the store reports every flush to the histogram
// (store.Options.OnFlush). Under --flush sync each of three PUTs in a row
// waits for a flush of its own, so the histogram has at least three.
func TestFlushHistogram(t *testing.T) {
	cfg := testConfig(t)
	cfg.Flush = "sync"
	td := startDaemon(t, cfg)
	for _, k := range []string{"a", "b", "c"} {
		td.put("t", k, "1")
	}
	mfs, err := td.d.m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "cachecast_store_flush_duration_seconds" {
			if n := mf.GetMetric()[0].GetHistogram().GetSampleCount(); n < 3 {
				t.Fatalf("flush histogram has %d flushes after three sync PUTs, want at least 3", n)
			}
			return
		}
	}
	t.Fatal("no cachecast_store_flush_duration_seconds")
}
