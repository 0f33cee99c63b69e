package test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestMetafileLost kills a node that wrote more than a segment of log
// (SIGKILL: no snapshot, so its view is its log's), damages its metafile
// as an operator or a bad restore might, and starts it again: the
// metafile is made again around the log's segment files, and the node
// serves every key and keeps its cursor, nothing set aside. Started with
// another --segment-size than the log was written in, the node refuses
// to start, naming the metafile and what to do, and changes nothing: with
// the right one it starts as above.
func TestMetafileLost(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		damage func(path string) error
		other  string // a --segment-size to try first, refused
	}{
		{"deleted", os.Remove, ""},
		{"emptied", func(path string) error { return os.Truncate(path, 0) }, ""},
		{"deleted, then another segment size", os.Remove, "2MiB"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			n := StartNode(t, bins, NodeOptions{Name: "meta", Args: smallNode})
			value := strings.Repeat("v", 60<<10)
			const keys = 30 // 1.8 MiB of log: past the first 1 MiB segment
			for i := range keys {
				if _, err := n.Client.Publish(ctx(t), "t", fmt.Sprintf("k%02d", i), []byte(value), ""); err != nil {
					t.Fatal(err)
				}
			}
			cur, err := n.Client.SetCursor(ctx(t), "c", "t", 7)
			if err != nil {
				t.Fatal(err)
			}
			n.Kill()
			meta := filepath.Join(n.DataDir, "meta")
			if err := tt.damage(meta); err != nil {
				t.Fatal(err)
			}
			if tt.other != "" {
				refusedStart(t, n.DataDir, meta, tt.other)
			}
			n.Start()
			if got := n.CountLog("the metafile was missing or empty: made a new one around the log's segment files"); got != 1 {
				t.Errorf("the rebuild logged %d times; want once", got)
			}
			for i := range keys {
				if v, err := n.Client.Get(ctx(t), "t", fmt.Sprintf("k%02d", i)); err != nil || string(v.Bytes) != value {
					t.Fatalf("k%02d after the restart: %v", i, err)
				}
			}
			if got, err := n.Client.GetCursor(ctx(t), "c"); err != nil || got.Offset != cur.Offset {
				t.Fatalf("cursor after the restart: %+v, %v; want offset %d", got, err, cur.Offset)
			}
			if _, err := os.Stat(filepath.Join(n.DataDir, "corrupt")); !os.IsNotExist(err) {
				t.Errorf("something was set aside into corrupt/: %v", err)
			}
			if _, err := n.Client.Publish(ctx(t), "t", "after", []byte("x"), ""); err != nil {
				t.Fatal(err)
			}
			n.Stop()
		})
	}
}

// refusedStart starts a node on dataDir with --segment-size size, other
// than its log's, and checks that it exits, saying why with the path of
// the metafile, and leaves the metafile missing and nothing set aside.
func refusedStart(t *testing.T, dataDir, meta, size string) {
	t.Helper()
	o := NewNode(t, bins, NodeOptions{Name: "meta-" + size, DataDir: dataDir, Args: append(append([]string{}, smallNode...), "--segment-size", size)})
	if err := o.StartProcess(); err != nil {
		t.Fatal(err)
	}
	st, err := o.Wait(20 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if st.Success() {
		t.Fatalf("with --segment-size %s the node exited 0; want it refused", size)
	}
	for _, want := range []string{"metafile " + meta + " is missing or empty", "segments of 1048576 bytes", "--segment-size the directory was made with"} {
		if !strings.Contains(o.Logs(), want) {
			t.Errorf("with --segment-size %s the node's output does not say %q:\n%s", size, want, o.Logs())
		}
	}
	if _, err := os.Stat(meta); !os.IsNotExist(err) {
		t.Errorf("the refused start left a metafile: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dataDir, "corrupt")); !os.IsNotExist(err) {
		t.Errorf("the refused start set something aside: %v", err)
	}
}
