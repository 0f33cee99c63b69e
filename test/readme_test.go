package test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cachecast/cachecast/internal/testkit"
)

// The README's examples, run as written against real daemons: the shell
// sessions of "First steps with curl", "The CLI" and "Redis clients" on
// one node laid out as `make run` lays it out (TestReadmeSingleNode), the
// Go snippet of the shared view compiled and run against that node's
// view file, and "A cluster of three" (TestReadmeCluster). What the
// README shows a command printing is what it must print, but for the
// figures no run repeats (an origin, an HLC, a time) and what an
// elision ("...") leaves out; a command whose output the README leaves
// out must succeed. The sessions of docs/http-api.md, docs/cli.md,
// docs/redis.md, docs/time.md and docs/groups.md are run by the same machinery
// (docs_test.go). The README's other
// examples are run elsewhere: make run by TestMakeRun, make deb and the
// package by TestDebPackage, the unit's snippets by systemd's tests.

// mdBlock is one fenced code block of a Markdown file.
type mdBlock struct {
	section string // the "## " heading it is under
	lang    string // the fence's info string
	lines   []string
}

// markdownBlocks reads the fenced code blocks of the file at path.
func markdownBlocks(t *testing.T, path string) []mdBlock {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var blocks []mdBlock
	var cur *mdBlock
	section := ""
	for _, l := range strings.Split(string(data), "\n") {
		switch {
		case cur != nil && strings.HasPrefix(l, "```"):
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			cur.lines = append(cur.lines, l)
		case strings.HasPrefix(l, "```"):
			cur = &mdBlock{section: section, lang: strings.TrimPrefix(l, "```")}
		case strings.HasPrefix(l, "## "):
			section = strings.TrimPrefix(l, "## ")
		}
	}
	return blocks
}

// readmeBlock is the one block of README.md in section written in lang.
func readmeBlock(t *testing.T, section, lang string) mdBlock {
	t.Helper()
	var found []mdBlock
	for _, b := range markdownBlocks(t, "../README.md") {
		if b.section == section && b.lang == lang {
			found = append(found, b)
		}
	}
	if len(found) != 1 {
		t.Fatalf("README.md has %d %s blocks under %q; this test runs exactly one", len(found), lang, section)
	}
	return found[0]
}

// consoleStep is one command of a console block: the command line (its
// continuation lines joined), what the README shows it printing, and for
// a line typed at a program's prompt (redis-cli's), that program's
// command line, run with the line on its standard input.
type consoleStep struct {
	cmd     string
	want    []string
	program string
}

// redisPrompt is how the README shows a line typed at redis-cli's prompt.
const redisPrompt = "redis> "

// parseConsole splits a console block into its steps: a line "$ cmd"
// (with the lines a trailing backslash continues) is a command, a line
// "redis> cmd" a command typed at the prompt of the "$" command before
// it, and the lines up to the next command what it prints (the blank
// lines among them too).
func parseConsole(lines []string) []consoleStep {
	var steps []consoleStep
	session := ""
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		switch {
		case strings.HasPrefix(l, "$ "):
			cmd := strings.TrimPrefix(l, "$ ")
			for strings.HasSuffix(cmd, `\`) && i+1 < len(lines) {
				i++
				cmd += "\n" + lines[i]
			}
			session = cmd
			steps = append(steps, consoleStep{cmd: cmd})
		case strings.HasPrefix(l, redisPrompt):
			steps = append(steps, consoleStep{cmd: strings.TrimPrefix(l, redisPrompt), program: session})
		case len(steps) > 0 && (strings.TrimSpace(l) != "" || len(steps[len(steps)-1].want) > 0):
			steps[len(steps)-1].want = append(steps[len(steps)-1].want, l) // a blank line inside an output is part of it
		}
	}
	for i := range steps { // the blank lines after an output are not
		w := steps[i].want
		for len(w) > 0 && strings.TrimSpace(w[len(w)-1]) == "" {
			w = w[:len(w)-1]
		}
		steps[i].want = w
	}
	return steps
}

// unrepeatable are the figures of a command's output that no two runs
// share: a node's origin, an HLC, a time.
var unrepeatable = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`"origin":"[0-9a-f]{16}"`), `"origin":"ORIGIN"`},
	{regexp.MustCompile(`"hlc":"[0-9]+"`), `"hlc":"HLC"`},
	{regexp.MustCompile(`"time":"[^"]+"`), `"time":"TIME"`},
	{regexp.MustCompile(`origin=[0-9a-f]{16}`), `origin=ORIGIN`},
	{regexp.MustCompile(`hlc=[0-9]+`), `hlc=HLC`},
	{regexp.MustCompile(`time=[^ ]+`), `time=TIME`},
	{regexp.MustCompile(`(?m)^(Cachecast-Origin: |origin +)[0-9a-f]{16}$`), `${1}ORIGIN`},
	{regexp.MustCompile(`(?m)^Cachecast-Hlc: [0-9]+$`), `Cachecast-Hlc: HLC`},
	{regexp.MustCompile(`(?m)^(Cachecast-Time|Date): .+$`), `$1: TIME`},
	{regexp.MustCompile(`"uptime_seconds":[0-9.]+`), `"uptime_seconds":UPTIME`},
	{regexp.MustCompile(`"version":"[^"]*"`), `"version":"VERSION"`}, // the build's
	{regexp.MustCompile(`"owner_uid":[0-9]+`), `"owner_uid":UID`},    // the user's who runs it
	// A dead letter's time in `dlq list`, then a message's id (<origin>-<seq>).
	{regexp.MustCompile(`(?m)^([0-9a-f]{16}-[0-9]+ +[a-z]+ +[0-9]+ +)[0-9]{4}-[0-9T:.-]+Z`), `${1}TIME`},
	{regexp.MustCompile(`\b[0-9a-f]{16}-([0-9]+)\b`), `ORIGIN-$1`},
}

// elision is how a document leaves part of an output out: "..." stands
// for any text (a line of its own, for any lines).
const elision = "..."

// masked is s with its unrepeatable figures replaced by their names, its
// lines ended by "\n" alone (HTTP's headers end in "\r\n").
func masked(s string) string {
	s = strings.TrimSpace(strings.ReplaceAll(s, "\r\n", "\n"))
	for _, u := range unrepeatable {
		s = u.re.ReplaceAllString(s, u.with)
	}
	return s
}

// live says whether a document shows a step as a command that runs until
// it is stopped (a subscription, a watch): its comment says so.
func live(s consoleStep) bool {
	_, comment, _ := strings.Cut(s.cmd, "#")
	return strings.Contains(comment, "live") || strings.Contains(comment, "Ctrl-C")
}

// catFile matches a step "cat FILE", with which a document shows a file
// the reader writes.
var catFile = regexp.MustCompile(`^cat ([A-Za-z0-9._-]+)$`)

// writeShown writes the file a step "cat FILE" shows into dir, as the
// reader would before the step, unless an earlier step made it.
func writeShown(t *testing.T, dir string, s consoleStep) {
	t.Helper()
	m := catFile.FindStringSubmatch(s.cmd)
	if m == nil {
		return
	}
	path := filepath.Join(dir, m[1])
	if _, err := os.Stat(path); err == nil {
		return
	}
	if err := os.WriteFile(path, []byte(strings.Join(s.want, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// beforeStep, given to shellRun, runs before each step of a session and
// returns the replacements (old, new pairs) that make what the step
// prints show the page's figures where the run has its own (the
// instants of a run on another day).
type beforeStep func(consoleStep) []string

// again says whether a document shows a step as one the reader runs
// again until it prints what is shown (a dead letter that comes seconds
// later): its comment says "again until".
func again(s consoleStep) bool {
	_, comment, _ := strings.Cut(s.cmd, "#")
	return strings.Contains(comment, "again until")
}

// stepDeadline bounds how long a step is run again until it prints what
// the document shows.
const stepDeadline = time.Minute

// shellRun runs steps in dir as a user at a shell would, one after the
// other, each variable an earlier step set still set. A step whose output
// is not yet what the document shows is run again until it is, within
// stepDeadline, with eventually (a read on another node of a cluster) or
// when the page says to (again). A step ended by "&" runs in the
// background until the test ends. before, if not nil, runs before each
// step.
func shellRun(t *testing.T, dir string, steps []consoleStep, eventually bool, before beforeStep) {
	t.Helper()
	vars := "" // the assignments so far, "S=...\n"
	assign := regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`)
	for _, s := range steps {
		rep := strings.NewReplacer()
		if before != nil {
			rep = strings.NewReplacer(before(s)...)
		}
		if live(s) {
			shellLive(t, dir, vars, s, rep)
			continue
		}
		if cmd, ok := backgrounded(s); ok {
			shellBackground(t, dir, vars+"exec "+cmd)
			continue
		}
		writeShown(t, dir, s)
		script, input := vars+s.cmd, ""
		if s.program != "" {
			// redis-cli formats its replies as on a terminal with --no-raw.
			script, input = vars+s.program+" --no-raw", s.cmd+"\n"
		}
		if assign.MatchString(s.cmd) {
			vars += s.cmd + "\n"
		}
		deadline := time.Now().Add(stepDeadline)
		for {
			out, stderr, err := shell(dir, script, input)
			why := stepFails(s, rep.Replace(out), err)
			if why == "" {
				break
			}
			if !(eventually || again(s)) || time.Now().After(deadline) {
				t.Fatalf("step %q: %s\noutput:\n%s\nstderr:\n%s", s.cmd, why, out, stderr)
			}
			time.Sleep(50 * time.Millisecond) // polling a condition, bounded by the deadline
		}
	}
}

// stepFails says why a step's run does not do what the README shows, or
// "" when it does.
func stepFails(s consoleStep, out string, err error) string {
	if err != nil {
		return err.Error()
	}
	if len(s.want) == 0 {
		// The README leaves the output out: the command must not answer
		// one of the API's errors.
		if strings.Contains(out, `"code":"`) {
			return "it answered an error"
		}
		return ""
	}
	return outputDiffers(out, s.want)
}

// outputDiffers says how out differs from want, the lines a document
// shows a command printing, or "" when it does not: out must be want but
// for the unrepeatable figures and what an elision leaves out.
func outputDiffers(out string, want []string) string {
	got, w := masked(out), masked(strings.Join(want, "\n"))
	parts := strings.Split(w, elision)
	for i, p := range parts {
		parts[i] = regexp.QuoteMeta(p)
	}
	if !regexp.MustCompile(`^(?s:` + strings.Join(parts, ".*") + `)$`).MatchString(got) {
		return "it printed\n" + got + "\nwhere the document shows\n" + w
	}
	return ""
}

// shell runs script with bash in dir, input on its standard input, and
// returns what it wrote to its standard output and error.
func shell(dir, script, input string) (string, string, error) {
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(c, "bash", "-e", "-c", script)
	cmd.Dir = dir
	cmd.Env = bins.Env()
	cmd.Stdin = strings.NewReader(input)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return stdout.String(), stderr.String(), err
}

// backgrounded is the command of a step the document shows ended by "&",
// run in the background, without its "&" and its comment.
func backgrounded(s consoleStep) (string, bool) {
	cmd, _, _ := strings.Cut(s.cmd, "#")
	return strings.CutSuffix(strings.TrimSpace(cmd), "&")
}

// shellBackground starts script with bash in dir, as a step the document
// runs in the background, and stops it as the test ends (its cleanup
// runs before those registered earlier: the node's, the directory's).
func shellBackground(t *testing.T, dir, script string) {
	t.Helper()
	sh := exec.Command("bash", "-e", "-c", script)
	sh.Dir = dir
	sh.Env = bins.Env()
	ownProcess(sh)
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = sh.Process.Kill()
		_ = sh.Wait() // killed: its status says nothing
	})
}

// shellLive runs s, a command that runs until it is stopped, after the
// assignments vars, until it has printed the lines shown (but for an
// elision that ends them: the stream goes on), or one line when none
// are shown, then stops it as the reader does, with Ctrl-C (SIGINT: a
// `watch --group` acknowledges what it printed as it ends). The lines
// must be those shown (after rep's replacements); a first line of its
// own must not be an error.
func shellLive(t *testing.T, dir, vars string, s consoleStep, rep *strings.Replacer) {
	t.Helper()
	want := s.want
	if len(want) > 0 && strings.TrimSpace(want[len(want)-1]) == elision {
		want = want[:len(want)-1]
	}
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sh := exec.CommandContext(c, "bash", "-e", "-c", vars+"exec "+s.cmd)
	sh.Dir = dir
	sh.Env = bins.Env()
	sh.Cancel = func() error { return sh.Process.Signal(os.Interrupt) }
	sh.WaitDelay = 10 * time.Second // then killed
	var stderr bytes.Buffer
	sh.Stderr = &stderr
	stdout, err := sh.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stdout)
	var got []string
	for len(got) < max(len(want), 1) && sc.Scan() {
		got = append(got, sc.Text())
	}
	cancel()
	_ = sh.Wait() // killed: its status says nothing
	switch {
	case len(want) > 0:
		if why := outputDiffers(rep.Replace(strings.Join(got, "\n")), want); why != "" {
			t.Fatalf("step %q: %s\nstderr:\n%s", s.cmd, why, stderr.String())
		}
	case len(got) == 0 || got[0] == "" || strings.Contains(got[0], `"code":"`):
		t.Fatalf("step %q printed %q first (stderr %q); want a line of its stream", s.cmd, got, stderr.String())
	}
}

// readmeDir is a fresh working directory as a source tree's: ./bin holds
// the binaries under test. Its path is short, for the sockets in it.
func readmeDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "cc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Mkdir(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{bins.Daemon, bins.CLI} {
		if err := os.Symlink(p, filepath.Join(dir, "bin", filepath.Base(p))); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestReadmeSingleNode runs the README's sessions with curl, the CLI and
// redis-cli, in that order, against one node with `make run`'s defaults
// (./data, ./cachecast.sock, ./cachecast-redis.sock, ./cachecast.view) but
// for the cluster's ports, which it does not open (TestMakeRun checks
// those); then, once the shared view holds the key the sessions wrote,
// its Go snippet reads it from there.
func TestReadmeSingleNode(t *testing.T) {
	t.Parallel()
	testkit.NeedTool(t, "curl", "curl")
	testkit.NeedTool(t, "redis-cli", "redis-tools")
	dir := readmeDir(t)
	n := StartNode(t, bins, NodeOptions{
		Name: "readme", Bare: true, Dir: dir, Command: "./bin/cachecastd",
		DataDir: filepath.Join(dir, "data"), Socket: "cachecast.sock",
		Args: []string{"--gossip-addr="},
	})
	for _, section := range []string{"First steps with curl", "The CLI", "Redis clients"} {
		shellRun(t, dir, parseConsole(readmeBlock(t, section, "console").lines), false, nil)
	}
	v, err := n.Client.Get(ctx(t), "prices", "sku-42")
	if err != nil {
		t.Fatal(err)
	}
	view := filepath.Join(dir, "cachecast.view")
	waitInView(t, view, "prices", map[string]viewEntry{"sku-42": {string(v.Bytes), v.Tag}})
	out := runReadmeGo(t, view)
	if want := string(v.Bytes) + " " + v.Tag; out != want {
		t.Fatalf("the README's Go snippet read %q; the node holds %q", out, want)
	}
}

// runReadmeGo runs the README's Go snippet (runGoSnippet) and returns
// what its Get returned, as "value tag".
func runReadmeGo(t *testing.T, path string) string {
	t.Helper()
	snippet := strings.Join(readmeBlock(t, "Reading at memory speed: the shared view", "go").lines, "\n")
	return runGoSnippet(t, "README.md", snippet, path, nil, "_ = stamp\n\tfmt.Print(string(price), \" \", tag)")
}

// snippetView is the view file a document's Go snippet opens.
const snippetView = `"/run/cachecast/cachecast.view"`

// runGoSnippet compiles the Go snippet of the document doc into a
// program that reads the view file at path instead of the snippet's,
// its errors left as { ... } returned, then runs tail; it runs it and
// returns what it printed. The program imports fmt, os, localview and
// imports. It is laid into the module by an overlay (go build
// -overlay), so nothing is written into the source tree.
func runGoSnippet(t *testing.T, doc, snippet, path string, imports []string, tail string) string {
	t.Helper()
	if !strings.Contains(snippet, snippetView) || !strings.Contains(snippet, "{ ... }") {
		t.Fatalf("%s's Go snippet no longer opens %s with its errors left as { ... }:\n%s", doc, snippetView, snippet)
	}
	snippet = strings.ReplaceAll(snippet, snippetView, `"`+path+`"`)
	snippet = strings.ReplaceAll(snippet, "{ ... }", "{ return err }")
	imp := "\t\"fmt\"\n\t\"os\"\n"
	for _, i := range imports {
		imp += "\t\"" + i + "\"\n"
	}
	src := "package main\n\nimport (\n" + imp + "\n\t\"" + Module + "/localview\"\n)\n\n" +
		"func main() {\n\tif err := run(); err != nil {\n\t\tfmt.Fprintln(os.Stderr, err)\n\t\tos.Exit(1)\n\t}\n}\n\n" +
		"func run() error {\n" + snippet + "\n\tif err != nil {\n\t\treturn err\n\t}\n" +
		"\t" + tail + "\n\treturn nil\n}\n"
	tmp := t.TempDir()
	file := filepath.Join(tmp, "main.go")
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	pkg := filepath.Join(root, "internal", "readmesnippet")
	overlay, _ := json.Marshal(map[string]map[string]string{"Replace": {filepath.Join(pkg, "main.go"): file}})
	if err := os.WriteFile(filepath.Join(tmp, "overlay.json"), overlay, 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(tmp, "snippet")
	build := exec.Command("go", "build", "-overlay", filepath.Join(tmp, "overlay.json"), "-o", bin, pkg)
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("%s's Go snippet does not build: %v\n%s\n%s", doc, err, out, src)
	}
	out, err := exec.Command(bin).CombinedOutput()
	if err != nil {
		t.Fatalf("%s's Go snippet: %v\n%s", doc, err, out)
	}
	return string(out)
}

// TestReadmeCluster runs "A cluster of three": the three daemons as the
// README starts them, on free ports instead of the README's (every
// 127.0.0.1:PORT of the block moved to a free one, the same for each
// mention), each waited for until it is ready, then the README's
// commands, each read on another node until it shows the write.
func TestReadmeCluster(t *testing.T) {
	t.Parallel()
	dir := readmeDir(t)
	start := readmeBlock(t, "A cluster of three", "sh")
	ports := map[string]string{}
	port := regexp.MustCompile(`127\.0\.0\.1:[0-9]+`)
	vars, started := "", 0
	for _, l := range start.lines {
		l = port.ReplaceAllStringFunc(l, func(a string) string {
			if ports[a] == "" {
				ports[a] = freeGossipAddr(t) // free for TCP and UDP: a gossip port or a data port
			}
			return ports[a]
		})
		cmd, _, _ := strings.Cut(l, "#")
		cmd = strings.TrimSpace(cmd)
		switch {
		case cmd == "":
		case strings.HasSuffix(cmd, "&"):
			readmeClusterNode(t, dir, vars, strings.TrimSpace(strings.TrimSuffix(cmd, "&")))
			started++
		default:
			vars += cmd + "\n"
		}
	}
	if started != 3 {
		t.Fatalf("the README's cluster block starts %d daemons; want 3", started)
	}
	shellRun(t, dir, parseConsole(readmeBlock(t, "A cluster of three", "console").lines), true, nil)
}

// readmeClusterNode starts cmd, a daemon's command line of the README, in
// dir after the assignments vars, and waits until it is ready.
func readmeClusterNode(t *testing.T, dir, vars, cmd string) {
	t.Helper()
	f := strings.Fields(cmd)
	flag := func(name string) string {
		for i := range len(f) - 1 {
			if f[i] == "--"+name {
				return f[i+1]
			}
		}
		t.Fatalf("the README's daemon %q has no --%s", cmd, name)
		return ""
	}
	StartNode(t, bins, NodeOptions{
		Name: flag("node-name"), Bare: true, Dir: dir, Command: "bash",
		DataDir: filepath.Join(dir, flag("data-dir")), Socket: flag("socket"),
		Args: []string{"-e", "-c", vars + "exec " + cmd},
	})
}

// TestReadmeGoVersion checks the Go release README.md says building needs
// against go.mod's go line, the one go build enforces.
func TestReadmeGoVersion(t *testing.T) {
	t.Parallel()
	mod, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	goLine := regexp.MustCompile(`(?m)^go (\S+)$`).FindSubmatch(mod)
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	said := regexp.MustCompile(`needs Go (\S+) or later`).FindSubmatch(readme)
	if goLine == nil || said == nil {
		t.Fatalf("go.mod's go line (%q) or README.md's \"needs Go N or later\" (%q) is gone", goLine, said)
	}
	if string(said[1]) != string(goLine[1]) {
		t.Errorf("README.md says building needs Go %s; go.mod says go %s", said[1], goLine[1])
	}
}
