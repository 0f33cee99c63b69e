package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/cachecast/cachecast/daemon"
	"github.com/cachecast/cachecast/daemon/daemontest"
	"github.com/cachecast/cachecast/internal/testkit"
	"github.com/cachecast/cachecast/wire"
)

// TestMain fails the package's run if a test left a goroutine behind
// (allowing memberlist's probes in flight to end: testkit.FindLeaks).
func TestMain(m *testing.M) { os.Exit(testkit.RunLeakFree(m, 10*time.Second)) }

// browser is a headless chromium (Debian's package) driven over the
// DevTools protocol, and where its screenshots go.
type browser struct {
	tb   testing.TB
	ctx  context.Context
	shot string // the screenshots' directory
}

func newBrowser(tb testing.TB) *browser {
	tb.Helper()
	path := testkit.NeedTool(tb, "chromium", "chromium")
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox, // CI runs as root, where chromium's sandbox refuses to start
		chromedp.DisableGPU,
		chromedp.WindowSize(1500, 900),
		chromedp.UserDataDir(tb.TempDir()),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	tb.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil {
		tb.Fatalf("starting chromium: %v", err)
	}
	dir := os.Getenv("CACHECAST_SCREENSHOTS")
	if dir == "" {
		// Kept for a person to look at when the test fails; removed when
		// it passes, so that passing runs leave nothing behind.
		var err error
		if dir, err = os.MkdirTemp("", "cachecast-console-"); err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() {
			if !tb.Failed() {
				_ = os.RemoveAll(dir)
			}
		})
	}
	tb.Logf("screenshots in %s (kept if the test fails; CACHECAST_SCREENSHOTS=DIR keeps them)", dir)
	return &browser{tb: tb, ctx: ctx, shot: dir}
}

// run runs actions, each call bounded.
func (b *browser) run(actions ...chromedp.Action[chromedp.Void]) {
	b.tb.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.tb.Fatalf("browser: %v", err)
	}
}

// until evaluates the JavaScript expression js (a string: "" when the
// page is as wanted, else what it shows) until it is "", at most within.
func (b *browser) until(within time.Duration, what, js string) {
	b.tb.Helper()
	testkit.Until(b.tb, within, what, func() string {
		ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
		defer cancel()
		got, err := chromedp.Run(ctx, chromedp.Evaluate[string](js))
		if err != nil {
			return err.Error()
		}
		return got
	})
}

// screenshot saves the page as name.png in the screenshots' directory.
func (b *browser) screenshot(name string) {
	b.tb.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.tb.Fatalf("screenshot: %v", err)
	}
	p := filepath.Join(b.shot, name+".png")
	if err := os.WriteFile(p, png, 0o644); err != nil {
		b.tb.Fatal(err)
	}
	b.tb.Logf("screenshot %s", p)
}

// put writes a key on node n through its socket; header pairs are added.
func put(n *daemontest.Node, topic, key, value string, header ...string) (wire.PutResult, error) {
	c := testkit.UnixClient(n.Socket, false, 5*time.Second)
	defer c.CloseIdleConnections()
	req, err := http.NewRequest("PUT", "http://cachecast/v1/topics/"+topic+"/keys/"+key, strings.NewReader(value))
	if err != nil {
		return wire.PutResult{}, err
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := c.Do(req)
	if err != nil {
		return wire.PutResult{}, err
	}
	defer res.Body.Close()
	var pr wire.PutResult
	if err := json.NewDecoder(res.Body).Decode(&pr); err != nil || res.StatusCode != http.StatusOK {
		return pr, fmt.Errorf("PUT %s/%s: %d %v", topic, key, res.StatusCode, err)
	}
	return pr, nil
}

func mustPut(tb testing.TB, n *daemontest.Node, topic, key, value string, header ...string) wire.PutResult {
	tb.Helper()
	pr, err := put(n, topic, key, value, header...)
	if err != nil {
		tb.Fatal(err)
	}
	return pr
}

// writeAWhile writes to every node in turn, about 100 writes a second,
// until the returned function is called (which waits for it).
func writeAWhile(t *testing.T, c *daemontest.Cluster) (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-quit:
				return
			case <-tick.C:
			}
			if _, err := put(c.Nodes[i%3], "prices", fmt.Sprintf("sku-%d", i%40), fmt.Sprintf("%d.99", i)); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	return sync.OnceFunc(func() { close(quit); <-done })
}

// The page's state, read in the browser. fleetJS is "" once the fleet
// table lists want members, those in up up and the others down.
func fleetJS(up []string, down []string) string {
	b, _ := json.Marshal(map[string][]string{"up": append([]string{}, up...), "down": append([]string{}, down...)})
	return fmt.Sprintf(`(() => {
		const want = %s;
		const rows = [...document.querySelectorAll("#fleet tbody tr[data-member]")];
		const got = rows.map(r => r.dataset.member + (r.dataset.up === "1" ? ":up" : ":down")).join(" ");
		if (rows.length !== want.up.length + want.down.length) return "rows: " + got;
		for (const n of want.up) if (!rows.some(r => r.dataset.member === n && r.dataset.up === "1")) return "rows: " + got;
		for (const n of want.down) if (!rows.some(r => r.dataset.member === n && r.dataset.up === "0")) return "rows: " + got;
		return "";
	})()`, b)
}

// cellsJS is "" once the key view shows field equal to want on every
// node in nodes.
func cellsJS(field, want string, nodes ...string) string {
	b, _ := json.Marshal(nodes)
	w, _ := json.Marshal(want)
	return fmt.Sprintf(`(() => {
		const got = %s.map(n => { const c = document.querySelector('#key-across td[data-node="' + n + '"][data-field="%s"]'); return c ? c.textContent : "(none)"; });
		return got.every(t => t === %s) ? "" : "%s: " + JSON.stringify(got);
	})()`, b, field, w, field)
}

// joinGroup joins a consumer group on node n as a member that reads
// nothing, until the test ends.
func joinGroup(t *testing.T, n *daemontest.Node, topic, group string) {
	ctx, cancel := context.WithCancel(context.Background())
	c := testkit.UnixClient(n.Socket, false, 0) // a stream: no client timeout
	req, err := http.NewRequestWithContext(ctx, "GET", "http://cachecast/v1/topics/"+topic+"/subscribe?mode=clustering&group="+group, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Do(req)
	if err != nil || res.StatusCode != http.StatusOK {
		cancel()
		t.Fatalf("joining %s/%s: %v %v", topic, group, err, res)
	}
	t.Cleanup(func() { cancel(); res.Body.Close(); c.CloseIdleConnections() })
}

// groupsJS is "" once the groups view lists the group prices/billing on
// every node of members (node name -> its members there).
func groupsJS(members map[string]int) string {
	b, _ := json.Marshal(members)
	return fmt.Sprintf(`(() => {
		const want = %s, got = {};
		for (const r of document.querySelectorAll('#groups tr[data-group="prices/billing"]')) {
			const m = r.querySelector(".members").textContent;
			got[r.dataset.node] = m ? m.split(", ").length : 0;
		}
		return JSON.stringify(got) === JSON.stringify(want) ? "" : "groups: " + JSON.stringify(got);
	})()`, b)
}

// TestBrowser drives the console in a real browser against three nodes
// in this process: the fleet view lists the three; a key written on one
// node shows on the keys view at the same version on all three, and a
// second write of it in its history beside the first; a scheduled value
// shows on the time view and flips on the page when its time comes, and
// an expiry shows there with its countdown; the traffic view tails a
// topic by key prefix, an increment as one; the groups view shows each node's groups; a
// stopped node shows as down.
func TestBrowser(t *testing.T) {
	b := newBrowser(t)
	c := daemontest.NewCluster(t, 3, func(i int, cfg *daemon.Config) { cfg.MetricsAddr = "127.0.0.1:0" })
	base := "http://" + c.Nodes[0].D.MetricsAddr() + "/"
	nodes := []string{"node0", "node1", "node2"}

	b.run(chromedp.Navigate(base))
	b.until(10*time.Second, "the fleet view lists 3 members up", fleetJS(nodes, nil))
	for i := range 40 {
		mustPut(t, c.Nodes[i%3], "prices", fmt.Sprintf("sku-%d", i), fmt.Sprintf("%d.99", i))
	}
	stop := writeAWhile(t, c)
	t.Cleanup(stop)
	b.until(10*time.Second, "publish and apply rates shown on every member", `(() => {
		const rates = [...document.querySelectorAll("#fleet tbody span.rate")].map(td => td.textContent);
		return rates.length === 6 && rates.every(r => parseFloat(r) > 0) ? "" : "rates: " + rates.join(" ");
	})()`)
	b.screenshot("fleet")
	stop()

	pr := mustPut(t, c.Nodes[1], "prices", "sku-42", "19.99")
	b.run(chromedp.Navigate(base + "console/#keys/prices/sku-42"))
	b.until(10*time.Second, "sku-42 at one version on all three", cellsJS("version", pr.HLC, nodes...))
	b.until(5*time.Second, "the same everywhere", `document.querySelector("#key-verdict").dataset.same === "1" ? "" : document.querySelector("#key-verdict").textContent`)
	pr2 := mustPut(t, c.Nodes[2], "prices", "sku-42", "21.99")
	b.until(10*time.Second, "the key's two writes in its history, newest first", fmt.Sprintf(`(() => {
		const rows = [...document.querySelectorAll("#key-history tbody tr[data-kind]")].map(r => r.dataset.kind + " " + r.children[2].textContent + " " + r.dataset.hlc);
		const want = ["write \"21.99\" %s", "write \"19.99\" %s"];
		return JSON.stringify(rows) === JSON.stringify(want) ? "" : "history: " + JSON.stringify(rows);
	})()`, pr2.HLC, pr.HLC))
	b.until(10*time.Second, "sku-42's second version on all three", cellsJS("version", pr2.HLC, nodes...))
	b.until(5*time.Second, "the topic listed and clicked", `(() => { const r = document.querySelector('#topics tr[data-topic="prices"]'); if (!r) return "no topic row"; r.click(); return ""; })()`)
	b.until(5*time.Second, "the topic's keys listed", `document.querySelectorAll("#key-list li[data-key]").length >= 40 ? "" : "keys: " + document.querySelectorAll("#key-list li").length`)
	b.screenshot("keys")

	// A value scheduled 3 s ahead: pending first, then in force everywhere.
	mustPut(t, c.Nodes[2], "prices", "sale", "100")
	at := time.Now().Add(4 * time.Second).UTC().Format(wire.TimeLayout)
	mustPut(t, c.Nodes[2], "prices", "sale", "75", "Cachecast-Effective-At", at)
	b.run(chromedp.Navigate(base + "console/#keys/prices/sale"))
	b.until(5*time.Second, "the old value with the flip pending", cellsJS("value", "100", nodes...))
	b.until(5*time.Second, "the pending flip", `(() => { const c = document.querySelector('#key-across td[data-node="node0"][data-field="pending"]'); return c && c.textContent.includes("75") ? "" : "pending: " + (c && c.textContent); })()`)
	b.screenshot("keys-pending")
	mustPut(t, c.Nodes[1], "prices", "flash", "50", "Cachecast-Expires", time.Now().Add(time.Hour).UTC().Format(wire.TimeLayout))
	b.run(chromedp.Navigate(base + "console/#time"))
	b.until(5*time.Second, "the expiry listed on the time view", `(() => {
		const r = document.querySelector('#expiries tr[data-key="flash"] .countdown');
		return r && /^(59|60) min/.test(r.textContent) ? "" : "expiries: " + document.querySelector("#expiries").textContent;
	})()`)
	b.screenshot("time")
	b.until(5*time.Second, "the flip listed on the time view", `(() => {
		const r = document.querySelector('#pending tr[data-key="sale"] .countdown');
		return r && /s$|now/.test(r.textContent) ? "" : "time view: " + document.querySelector("#pending").textContent;
	})()`)
	b.run(chromedp.Navigate(base + "console/#keys/prices/sale"))
	b.until(10*time.Second, "the value flipped on all three", cellsJS("value", "75", nodes...))

	b.run(chromedp.Navigate(base + "console/#traffic"))
	b.until(5*time.Second, "a tail of prices started", `(() => {
		if (![...document.querySelectorAll("#tail-topic option")].some(o => o.value === "prices")) return "no topic to tail";
		document.querySelector("#tail-topic").value = "prices";
		document.querySelector("#tail-prefix").value = "tail-";
		document.querySelector("#tail-form").requestSubmit();
		return "";
	})()`)
	b.until(5*time.Second, "the tail open", `document.querySelector("#tail-state").textContent === "following prices" ? "" : "not following"`)
	testkit.Until(t, 10*time.Second, "a write seen in the tail", func() string {
		mustPut(t, c.Nodes[1], "prices", "other", "x")
		mustPut(t, c.Nodes[1], "prices", "tail-1", "seen")
		ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
		defer cancel()
		got, err := chromedp.Run(ctx, chromedp.Evaluate[string](`[...document.querySelectorAll("#tail tbody tr")].map(r => r.children[2].textContent).join(" ")`))
		if err != nil || !strings.Contains(got, "tail-1") || strings.Contains(got, "other") {
			return fmt.Sprintf("tail: %q %v", got, err)
		}
		return ""
	})
	res, err := testkit.UnixClient(c.Nodes[1].Socket, false, 5*time.Second).Post("http://cachecast/v1/topics/prices/counters/tail-n?by=3", "", nil)
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("an increment of tail-n: %v %v", res, err)
	}
	res.Body.Close()
	at = time.Now().Add(time.Hour).UTC().Format(wire.TimeLayout)
	mustPut(t, c.Nodes[1], "prices", "tail-s", "60", "Cachecast-Effective-At", at)
	mustPut(t, c.Nodes[1], "prices", "tail-e", "70", "Cachecast-Expires", at)
	// Each message is said as the key's history says a record: an
	// increment as one, the times of a scheduled or expiring value.
	for key, want := range map[string]string{
		"tail-n": "+3 from 0 (no value before)",
		"tail-s": `scheduled for ` + at + `: "60"`,
		"tail-e": `"70", expires at ` + at,
	} {
		b.until(10*time.Second, key+" said in the tail", fmt.Sprintf(`(() => {
		const r = [...document.querySelectorAll("#tail tbody tr")].find(r => r.children[2].textContent === %q);
		return r && r.children[4].textContent === %q ? "" : %q + ": " + (r ? r.children[4].textContent : "no row");
	})()`, key, want, key))
	}
	joinGroup(t, c.Nodes[1], "prices", "billing")
	b.run(chromedp.Navigate(base + "console/#groups"))
	b.until(10*time.Second, "the group on every node, its member on node1", groupsJS(map[string]int{"node0": 0, "node1": 1, "node2": 0}))
	b.screenshot("groups")

	c.Nodes[2].Stop()
	b.run(chromedp.Navigate(base + "console/#fleet"))
	b.until(15*time.Second, "node2 down", fleetJS(nodes[:2], nodes[2:]))
	b.screenshot("fleet-down")
	b.run(chromedp.Navigate(base + "console/#groups"))
	b.until(5*time.Second, "node2's groups not answered", `(() => {
		const r = document.querySelector('#groups tr[data-node="node2"]');
		return r && r.dataset.answered === "0" && r.textContent.includes("no answer") ? "" : "node2: " + (r && r.textContent);
	})()`)
}
