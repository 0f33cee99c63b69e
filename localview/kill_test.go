package localview_test

import (
	"bufio"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cachecast/cachecast/internal/testkit"

	"github.com/cachecast/cachecast/localview"
	"github.com/cachecast/cachecast/localview/viewtest"
)

// The environment of a writer child of TestWriterKilledMidUpdate: the
// view's path and the first counter it writes.
const (
	envWriterPath = "CACHECAST_LOCALVIEW_TEST_WRITER"
	envWriterBase = "CACHECAST_LOCALVIEW_TEST_WRITER_BASE"
)

const (
	killKeys      = 50
	killValueSize = 4096 // long updates: a kill often lands inside one
)

// runWriterChildIfAsked is the writer child: it puts every key, says
// "ready", then rewrites random keys until it is killed.
func runWriterChildIfAsked() {
	path := os.Getenv(envWriterPath)
	if path == "" {
		return
	}
	base, _ := strconv.ParseUint(os.Getenv(envWriterBase), 10, 64)
	w, err := localview.Create(path, localview.WriterOptions{GID: -1})
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	counter := base
	put := func(i int) {
		counter++
		if err := w.Put("t", viewtest.Key(i), viewtest.Tag(counter), viewtest.Value(i, counter, killValueSize), localview.Stamp{HLC: counter}); err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
	}
	for i := range killKeys {
		put(i)
	}
	w.SetReady(true)
	w.Heartbeat(time.Now())
	fmt.Println("ready")
	rng := rand.New(rand.NewPCG(base, 1))
	for {
		put(rng.IntN(killKeys))
	}
}

// TestWriterKilledMidUpdate: a writer process is killed with SIGKILL at a
// random moment of a stream of updates, eight times. Every key of the file
// it leaves reads as a whole value (its checksum, key and tag agree) or,
// for the one record it was in the middle of, as ErrBusy (which wraps
// ErrNotReady: use the socket), never as a torn value; and a reader of
// the dead writer's file moves to the next writer's file by itself.
func TestWriterKilledMidUpdate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "view")
	var r *localview.Reader
	busy := 0
	for round := range 8 {
		cmd := exec.Command(os.Args[0], "-test.run", "^$")
		cmd.Env = append(os.Environ(), envWriterPath+"="+path, fmt.Sprintf("%s=%d", envWriterBase, uint64(round)<<40))
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		line, err := bufio.NewReader(out).ReadString('\n')
		if err != nil || line != "ready\n" {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("round %d: the writer said %q, %v", round, line, err)
		}
		if r == nil {
			if r, err = localview.Open(path); err != nil {
				t.Fatal(err)
			}
			defer r.Close()
		}
		// The reader of the last round's file follows to this one.
		if _, _, _, err := r.Get("t", viewtest.Key(0)); err != nil && !errors.Is(err, localview.ErrBusy) {
			t.Fatalf("round %d, the new writer's file: %v", round, err)
		}
		time.Sleep(time.Duration(1+rand.IntN(20)) * time.Millisecond) // let it write a while
		cmd.Process.Kill()
		cmd.Wait()
		for i := range killKeys {
			v, tag, _, err := r.Get("t", viewtest.Key(i))
			switch {
			case errors.Is(err, localview.ErrBusy):
				if !errors.Is(err, localview.ErrNotReady) {
					t.Errorf("round %d, key %d: %v does not wrap ErrNotReady", round, i, err)
				}
				busy++
			case err != nil:
				t.Errorf("round %d, key %d: %v", round, i, err)
			default:
				if _, err := viewtest.Check(i, v, []byte(tag)); err != nil {
					t.Errorf("round %d, key %d: %v", round, i, err)
				}
			}
		}
	}
	t.Logf("8 kills; %d left a record half-written (read as ErrBusy)", busy)
}

// envOpenPath makes the test binary a child that opens the view at its
// value, reads key 0 of topic "t" and prints what happened.
const envOpenPath = "CACHECAST_LOCALVIEW_TEST_OPEN"

func runOpenChildIfAsked() {
	path := os.Getenv(envOpenPath)
	if path == "" {
		return
	}
	r, err := localview.Open(path)
	if err != nil {
		fmt.Printf("open: permission=%v: %v\n", errors.Is(err, os.ErrPermission), err)
		os.Exit(0)
	}
	v, _, _, err := r.Get("t", "k")
	fmt.Printf("read %q %v\n", v, err)
	os.Exit(0)
}

// TestReaderWithoutPermission: a process that is neither the file's owner
// nor in its group (mode 0640) cannot open the view: a clear error that
// is os.ErrPermission and names the path; one in the group reads it.
// It runs the reader as the user nobody, so it needs root, as the role
// tests of ./test do (a test that cannot check what it claims fails).
func TestReaderWithoutPermission(t *testing.T) {
	testkit.NeedRoot(t, "running a reader as another user")
	const nobody = 65534
	// The test binary and the view, where nobody may look (t.TempDir and
	// the go command's build directory are mode 0700).
	open, err := os.MkdirTemp("", "ccview-perm-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(open) })
	bin := filepath.Join(open, "localview.test")
	exe, err := os.ReadFile(os.Args[0])
	if err == nil {
		err = os.WriteFile(bin, exe, 0o755)
	}
	if err == nil {
		err = os.Chmod(open, 0o755)
	}
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range []struct {
		name string
		gid  int
		want string
	}{
		{"other user, other group", -1, "open: permission=true: localview: open: open "},
		{"other user, the file's group", nobody, `read "v" <nil>`},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(open, fmt.Sprintf("view%d", i))
			w, err := localview.Create(path, localview.WriterOptions{GID: c.gid})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			w.Put("t", "k", "", []byte("v"), localview.Stamp{})
			w.SetReady(true)
			cmd := exec.Command(bin, "-test.run", "^$")
			cmd.Env = append(os.Environ(), envOpenPath+"="+path)
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			if !strings.HasPrefix(string(out), c.want) || (c.gid == -1 && !strings.Contains(string(out), path+": permission denied")) {
				t.Fatalf("the reader said %q, want %q...", out, c.want)
			}
		})
	}
}
