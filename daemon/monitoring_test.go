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

// docsSeries are the metric names the documentation names (the pages
// under docs/, README.md, DESIGN.md, ARCHITECTURE.md), each with the
// pages that name it.
func docsSeries(t *testing.T) map[string][]string {
	t.Helper()
	pages, err := filepath.Glob("../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, p := range append(pages, "../README.md", "../DESIGN.md", "../ARCHITECTURE.md") {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range docSeriesName.FindAllString(string(b), -1) {
			if name != "cachecast_view" { // the Python module of the shared view
				out[name] = append(out[name], filepath.Base(p))
			}
		}
	}
	if len(out) < 20 {
		t.Fatalf("only %d metric names found in the docs", len(out))
	}
	return out
}

// docSeriesName matches a metric's name in prose: a prefix of names
// ("cachecast_cluster_*") is not one.
var docSeriesName = regexp.MustCompile(`\bcachecast_[a-z0-9_]*[a-z0-9]\b`)

// Every metric the dashboard, the alert rules and the docs name is
// exported by a running daemon (a node of a two-node cluster with its
// observer, its Redis door and a peer's records), and promtool accepts
// the rules.
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
	for name, pages := range docsSeries(t) {
		names[name] = append(names[name], pages...)
	}
	t.Logf("%d metric names in the dashboard, the rules and the docs", len(names))
	for _, name := range slices.Sorted(maps.Keys(names)) {
		exported := func(n string) bool {
			return strings.Contains(text, "\n"+n+"{") || strings.Contains(text, "\n"+n+" ")
		}
		if !exported(name) && !exported(name+"_bucket") { // a histogram's name, as prose names it

			t.Errorf("%s (in %s) is not exported by a running daemon", name, strings.Join(names[name], ", "))
		}
	}

	promtool := testkit.NeedTool(t, "promtool", "prometheus")
	out, err := exec.Command(promtool, "check", "rules", filepath.Join(monitoringDir, "cachecast-alerts.yml")).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
}

// TestMonitoringDocNamesEveryAlert: docs/monitoring.md's list of alerts
// is the rules file's: every alert of the one is named in the other.
func TestMonitoringDocNamesEveryAlert(t *testing.T) {
	rules, err := os.ReadFile(filepath.Join(monitoringDir, "cachecast-alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile("../docs/monitoring.md")
	if err != nil {
		t.Fatal(err)
	}
	var inRules []string
	for _, m := range regexp.MustCompile(`(?m)^\s*- alert: (\S+)$`).FindAllSubmatch(rules, -1) {
		inRules = append(inRules, string(m[1]))
	}
	var inDoc []string
	for _, m := range regexp.MustCompile("`(Cachecast[A-Za-z]+)`").FindAllSubmatch(doc, -1) {
		inDoc = append(inDoc, string(m[1]))
	}
	slices.Sort(inRules)
	slices.Sort(inDoc)
	inDoc = slices.Compact(inDoc)
	if len(inRules) < 5 || !slices.Equal(inRules, inDoc) {
		t.Errorf("the rules file's alerts\n%q\ndocs/monitoring.md names\n%q", inRules, inDoc)
	}
}
