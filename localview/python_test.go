package localview_test

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cachecast/cachecast/internal/testkit"

	"github.com/cachecast/cachecast/localview"
)

// pyEntry is a line of the Python reader's output.
type pyEntry struct {
	Topic, Key, Tag string // bytes as Latin-1 characters
	Value           string // hex
	HLC             uint64 `json:"hlc"`
	Origin, Seq     uint64
}

func latin1(s string) string {
	b := make([]byte, 0, len(s))
	for _, r := range s {
		b = append(b, byte(r))
	}
	return string(b)
}

func (e pyEntry) String() string {
	v, _ := hex.DecodeString(e.Value)
	return fmt.Sprintf("%q/%q tag %q value %q stamp %d/%d/%d", latin1(e.Topic), latin1(e.Key), latin1(e.Tag), v, e.HLC, e.Origin, e.Seq)
}

func goEntry(topic, key string, v []byte, tag string, st localview.Stamp) string {
	return fmt.Sprintf("%q/%q tag %q value %q stamp %d/%d/%d", topic, key, tag, v, st.HLC, st.Origin, st.Seq)
}

// runPython runs the Python reader on path with args and stdin.
func runPython(t *testing.T, path, stdin string, args ...string) []string {
	t.Helper()
	py := testkit.NeedTool(t, "python3", "python3")
	cmd := exec.Command(py, append([]string{filepath.Join("python", "cachecast_view.py"), path}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("python reader %v: %v: %s", args, err, stderr.String())
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}

// TestPythonReadsAsGo: the Python reader reads the same entries as the Go
// reader from a file the Go writer made: a scan of every topic, and a Get
// of every key (deleted and unknown ones too), which checks the hash.
func TestPythonReadsAsGo(t *testing.T) {
	path := filepath.Join(t.TempDir(), "view")
	w, err := localview.Create(path, localview.WriterOptions{GID: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	w.SetReady(true)
	type key struct{ topic, key string }
	var all []key
	put := func(topic, k, tag string, v []byte, st localview.Stamp) {
		if err := w.Put(topic, k, tag, v, st); err != nil {
			t.Fatal(err)
		}
		all = append(all, key{topic, k})
	}
	put("prices", "sku-1", "eu", []byte("12.50"), localview.Stamp{HLC: 1 << 40, Origin: 1<<63 + 5, Seq: 1})
	put("prices", "", "", nil, localview.Stamp{HLC: 2})
	put("", "no topic", "", []byte("x"), localview.Stamp{HLC: 3})
	put("bin", "\x00\xff\n\t\"", "\x01", []byte{0, 1, 2, 255}, localview.Stamp{HLC: 4})
	put("prices", "grows", "", []byte("short"), localview.Stamp{HLC: 5})
	put("prices", "grows", "t", bytes.Repeat([]byte("long"), 100), localview.Stamp{HLC: 6})
	for i := range 20000 { // several generations, and probe chains
		put(fmt.Sprintf("t%d", i%7), fmt.Sprintf("key-%d", i), "", fmt.Appendf(nil, "value %d", i), localview.Stamp{HLC: uint64(i), Origin: 9, Seq: uint64(i)})
	}
	for i := 0; i < 20000; i += 3 {
		w.Delete(fmt.Sprintf("t%d", i%7), fmt.Sprintf("key-%d", i), localview.Stamp{})
	}
	all = append(all, key{"prices", "never"}, key{"nope", "sku-1"})
	if w.Generation() < 2 {
		t.Fatalf("the file did not grow: generation %d", w.Generation())
	}

	r, err := localview.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var stdin strings.Builder
	var want []string
	for _, k := range all {
		fmt.Fprintf(&stdin, "x%x x%x\n", k.topic, k.key) // x: an empty name is not an empty field
		v, tag, st, err := r.Get(k.topic, k.key)
		switch {
		case err == nil:
			want = append(want, goEntry(k.topic, k.key, v, tag, st))
		case err == localview.ErrNotFound:
			want = append(want, "null")
		default:
			t.Fatal(err)
		}
	}
	got := runPython(t, path, stdin.String(), "gets")
	if len(got) != len(want) {
		t.Fatalf("python gets: %d lines, want %d", len(got), len(want))
	}
	for i, line := range got {
		if line != "null" {
			var e pyEntry
			if err := json.Unmarshal([]byte(line), &e); err != nil {
				t.Fatalf("python line %q: %v", line, err)
			}
			line = e.String()
		}
		if line != want[i] {
			t.Errorf("get %q: python %s, go %s", all[i], line, want[i])
		}
	}

	// The same keys in one GetMany (Go) and one get_many (Python).
	topics, names := make([]string, len(all)), make([]string, len(all))
	for i, k := range all {
		topics[i], names[i] = k.topic, k.key
	}
	items, _, err := r.GetMany(topics, names, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	many := runPython(t, path, stdin.String(), "many")
	if len(many) != len(items) {
		t.Fatalf("python many: %d lines, want %d", len(many), len(items))
	}
	for i, line := range many {
		want := "null"
		if it := items[i]; it.Found {
			want = goEntry(all[i].topic, all[i].key, it.Value, string(it.Tag), it.Stamp)
		}
		if line != "null" {
			var e pyEntry
			if err := json.Unmarshal([]byte(line), &e); err != nil {
				t.Fatalf("python line %q: %v", line, err)
			}
			line = e.String()
		}
		if line != want {
			t.Errorf("many %q: python %s, go %s", all[i], line, want)
		}
	}

	// The scan of every topic: the same set of entries.
	var goScan []string
	for _, topic := range []string{"prices", "", "bin", "t0", "t1", "t2", "t3", "t4", "t5", "t6"} {
		r.Scan(topic, func(k string, v, tag []byte, st localview.Stamp) bool {
			goScan = append(goScan, goEntry(topic, k, v, string(tag), st))
			return true
		})
	}
	var pyScan []string
	for _, line := range runPython(t, path, "", "dump") {
		var e pyEntry
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("python line %q: %v", line, err)
		}
		pyScan = append(pyScan, e.String())
	}
	slices.Sort(goScan)
	slices.Sort(pyScan)
	if !slices.Equal(goScan, pyScan) {
		t.Errorf("scans differ: go %d entries, python %d", len(goScan), len(pyScan))
	}
	if len(goScan) != 5+20000-6667 {
		t.Errorf("go scan: %d entries", len(goScan))
	}
}
