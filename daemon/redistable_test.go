package daemon

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// docs/redis.md's table "Every command: served, node-local, refused",
// walked against a running Redis door: each command it names is answered
// as its row says, and every command the door knows has a row.

// tableItem is one command of a row of the table, as a probe sends it:
// its words with the row's placeholders filled in.
type tableItem struct {
	text   string   // as the table writes it, e.g. "SET ... NX"
	args   []string // the probe
	status string   // the row's status, e.g. "node-local (a read)"
	lone   bool     // a command's name alone (args are the probe's, not the table's)
}

// itemArgs are the probes of the items the table names without the
// arguments they need to reach what the row says of them; a lone
// command not here is sent with the arguments "t:k" "v".
var itemArgs = map[string][]string{
	"SETRANGE":       {"SETRANGE", "t:k", "0", "v"},
	"FLUSHDB":        {"FLUSHDB"},
	"FLUSHALL":       {"FLUSHALL"},
	"DEBUG SLEEP":    {"DEBUG", "SLEEP", "0"},
	"DEBUG PROTOCOL": {"DEBUG", "PROTOCOL", "string"},
}

// redisTable reads the table's rows from docs/redis.md into items.
func redisTable(t *testing.T) []tableItem {
	t.Helper()
	b, err := os.ReadFile("../docs/redis.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(b), "\n## Every command: served, node-local, refused\n")
	if !ok {
		t.Fatal(`docs/redis.md has no section "Every command: served, node-local, refused"`)
	}
	var items []tableItem
	for _, l := range strings.Split(table, "\n") {
		if strings.HasPrefix(l, "## ") {
			break
		}
		cells := strings.Split(strings.ReplaceAll(l, `\|`, "/"), " | ")
		if !strings.HasPrefix(l, "| ") || len(cells) != 3 || cells[0] == "| Command" {
			continue
		}
		items = append(items, rowItems(strings.TrimPrefix(cells[0], "| "), cells[1])...)
	}
	if len(items) < 80 {
		t.Fatalf("only %d commands read from docs/redis.md's table", len(items))
	}
	return items
}

var (
	optional      = regexp.MustCompile(`\s*(\[[^\]]*\]|\([^)]*\))`) // [EX/PX n], (NX, XX, GT, LT)
	commandWord   = regexp.MustCompile(`^[A-Z][A-Z.]*$`)
	placeholders  = map[string][]string{"...": {"t:k", "v"}, "key": {"t:k"}, "value": {"v"}, "n": {"60"}}
	futureMillis  = strconv.FormatInt(time.Now().Add(time.Hour).UnixMilli(), 10)
	notACommandRE = regexp.MustCompile(` and the other .*$`) // "MOVE and the other list, set and sorted-set types"
)

// rowItems are the commands a row's first cell names: "A, B, C" three
// commands; "PUBSUB CHANNELS, NUMSUB" and "SET ... NX, XX" a command with
// the subcommands or options after it.
func rowItems(cell, status string) []tableItem {
	cell = notACommandRE.ReplaceAllString(optional.ReplaceAllString(cell, ""), "")
	parts := strings.Split(cell, ", ")
	first := strings.Fields(parts[0])
	var prefix []string // the words a later part continues
	if len(first) > 1 && (commandWord.MatchString(first[1]) || first[1] == "...") {
		prefix = first[:len(first)-1]
	}
	var items []tableItem
	for i, p := range parts {
		words := strings.Fields(p)
		if i > 0 && prefix != nil {
			words = append(slices.Clone(prefix), words...)
		}
		it := tableItem{text: strings.Join(words, " "), status: status, lone: len(words) == 1}
		for _, w := range words {
			switch {
			case placeholders[w] != nil:
				it.args = append(it.args, placeholders[w]...)
			case w == "ms":
				it.args = append(it.args, futureMillis)
			default:
				it.args = append(it.args, w)
			}
		}
		if a, ok := itemArgs[it.text]; ok {
			it.args = a
		} else if it.lone {
			it.args = append(it.args, "t:k", "v")
		}
		items = append(items, it)
	}
	return items
}

// probeEnd is what the probe's last command (an ECHO) answers.
const probeEnd = "end-of-probe"

// probe sends args on a new RESP3 connection, then CLIENT REPLY ON (for
// a probe that turns replies off) and an ECHO, and returns the errors of
// the answers before the ECHO's (a QUIT closes the connection first).
func probe(t *testing.T, sock string, args []string) []string {
	t.Helper()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, cmd := range [][]string{{"HELLO", "3"}, args, {"CLIENT", "REPLY", "ON"}, {"ECHO", probeEnd}} {
		fmt.Fprintf(&b, "*%d\r\n", len(cmd))
		for _, a := range cmd {
			fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
		}
	}
	if _, err := c.Write([]byte(b.String())); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(c)
	if _, err := readRESP(r); err != nil {
		t.Fatalf("HELLO 3: %v", err)
	}
	var errs []string
	for {
		v, err := readRESP(r)
		var ne net.Error
		switch {
		case v == probeEnd:
			return errs
		case args[0] == "QUIT" && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)):
			return errs // closed, as QUIT does
		case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.As(err, &ne):
			t.Fatalf("%q: %v before the answers (errors so far: %q)", args, err, errs)
		case err != nil:
			errs = append(errs, err.Error())
		}
	}
}

// answeredAsSaid says how the errors a probe got disagree with what the
// row's status says, or "" when they agree.
func answeredAsSaid(it tableItem, errs []string) string {
	all := strings.Join(errs, "; ")
	has := func(s string) bool { return strings.Contains(all, s) }
	switch {
	case strings.HasPrefix(it.status, "served"), strings.HasPrefix(it.status, "node-local"):
		if has("unknown command") || !it.lone && (has("syntax error") || has("unknown subcommand") || has("wrong number")) {
			return "not answered: " + all
		}
	case it.status == "refused unless enabled":
		if !has("--redis-allow-flush") {
			return "not refused naming --redis-allow-flush: " + all
		}
	case it.status == "refused":
		if !has(" is not served: ") {
			return "not refused with the reason: " + all
		}
	case it.status == "not served":
		if !has("unknown command") && !has("syntax error") {
			return "served: " + all
		}
	default:
		return "a status the test does not know"
	}
	return ""
}

// TestRedisTableAnswersAsSaid walks docs/redis.md's table of every
// command against a running door: a command said served or node-local
// is answered (not as an unknown command; with its subcommand or option,
// not as a syntax error either), a refused one is refused with its
// reason, one not served is an unknown command (an option: a syntax
// error); and every command the door lists (COMMAND LIST) has a row,
// which does not say it is not served.
func TestRedisTableAnswersAsSaid(t *testing.T) {
	td := startDaemon(t, testConfig(t))
	sock := td.d.RedisSocketPath()
	items := redisTable(t)
	named := map[string]string{} // a lone command's name: its row's status
	for _, it := range items {
		if it.lone {
			named[it.text] = it.status
		}
		if why := answeredAsSaid(it, probe(t, sock, it.args)); why != "" {
			t.Errorf("%s (%s, sent as %q): %s", it.text, it.status, it.args, why)
		}
	}
	listed := commandList(t, sock)
	for _, name := range listed {
		status, ok := named[strings.ToUpper(name)]
		if !ok {
			status, ok = prefixStatus(items, strings.ToUpper(name))
		}
		switch {
		case !ok:
			t.Errorf("the door serves %s; docs/redis.md's table has no row for it", name)
		case status == "not served":
			t.Errorf("the door serves %s; docs/redis.md's table says it is not served", name)
		}
	}
	for name, status := range named {
		if status != "not served" && !slices.Contains(listed, strings.ToLower(name)) {
			t.Errorf("docs/redis.md's table says %s is %s; COMMAND LIST does not list it", name, status)
		}
	}
}

// prefixStatus is the status of the first row that names the command
// with a subcommand or an option ("CLIENT REPLY ON": CLIENT).
func prefixStatus(items []tableItem, name string) (string, bool) {
	for _, it := range items {
		if strings.HasPrefix(it.text, name+" ") {
			return it.status, true
		}
	}
	return "", false
}

// commandList is the door's answer to COMMAND LIST.
func commandList(t *testing.T, sock string) []string {
	t.Helper()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("*2\r\n$7\r\nCOMMAND\r\n$4\r\nLIST\r\n")); err != nil {
		t.Fatal(err)
	}
	v, err := readRESP(bufio.NewReader(c))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, n := range v.([]any) {
		names = append(names, n.(string))
	}
	if len(names) < 50 {
		t.Fatalf("COMMAND LIST: %d names", len(names))
	}
	return names
}
