package daemon

import (
	"bufio"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cachecast/cachecast/internal/testkit"
)

// monitoringDir holds the Grafana dashboard and the Prometheus rules.
const monitoringDir = "../deploy/monitoring"

// seriesName matches the metric names in a PromQL expression (a recording
// rule's name holds a colon and is not one).
var seriesName = regexp.MustCompile(`\b(cachecast|process|go)_[a-z0-9_]+\b`)

// monitoringExprs are the PromQL expressions of the dashboard's panels and
// the rules file's rules, each with where it is, for messages.
func monitoringExprs(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	b, err := os.ReadFile(filepath.Join(monitoringDir, "cachecast-fleet.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("cachecast-fleet.json: %v", err)
	}
	for _, p := range dash.Panels {
		for i, tg := range p.Targets {
			out[fmt.Sprintf("dashboard panel %q target %d", p.Title, i)] = tg.Expr
		}
	}
	// The rules file is YAML; its expressions are the `expr:` lines.
	f, err := os.Open(filepath.Join(monitoringDir, "cachecast-alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		if e, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "expr:"); ok {
			out[fmt.Sprintf("cachecast-alerts.yml line %d", line)] = strings.TrimSpace(e)
		}
	}
	if len(out) < 10 {
		t.Fatalf("only %d expressions found in the dashboard and the rules", len(out))
	}
	return out
}

// Every metric the dashboard and the alert rules name is exported by a
// running daemon (a node of a two-node cluster with its observer, its
// Redis door and a peer's records), and promtool accepts the rules.
func TestMonitoringNamesExportedMetrics(t *testing.T) {
	ds := startCluster(t, 2, func(i int, c *Config) {
		c.MetricsAddr = "127.0.0.1:0"
		c.ObserveInterval = 50 * time.Millisecond
	})
	ds[0].put("prices", "sku-1", "12.50")
	testkit.Eventually(t, 10*time.Second, "node1 to hold node0's record and agree with it", func() bool {
		s := ds[1].d.cluster.Observer().Status(time.Now())
		return s.Agreed > 0 && ds[1].do("GET", "/v1/topics/prices/keys/sku-1", nil).status == 200
	})
	c, err := net.Dial("unix", ds[1].d.RedisSocketPath())
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "GET prices:sku-1\r\n")
	if _, err := bufio.NewReader(c).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	c.Close()

	text := "\n" + scrape(t, ds[1])
	names := map[string][]string{}
	for where, expr := range monitoringExprs(t) {
		for _, name := range seriesName.FindAllString(expr, -1) {
			names[name] = append(names[name], where)
		}
	}
	t.Logf("%d metric names in the dashboard and the rules", len(names))
	for _, name := range slices.Sorted(maps.Keys(names)) {
		if !strings.Contains(text, "\n"+name+"{") && !strings.Contains(text, "\n"+name+" ") {
			t.Errorf("%s (in %s) is not exported by a running daemon", name, strings.Join(names[name], ", "))
		}
	}

	promtool := testkit.NeedTool(t, "promtool", "prometheus")
	out, err := exec.Command(promtool, "check", "rules", filepath.Join(monitoringDir, "cachecast-alerts.yml")).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
}
