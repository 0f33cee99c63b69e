package test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// Forty TCP clients each send an MSET of eight values of 1 MB and never
// the last one, as in issue 31 (there: 19 values, and the daemon went from
// 110 MB to 1.28 GB resident). Their read buffers count against
// --max-body-memory, the unauthenticated ones together in one share
// (--max-body-memory-per-uid): a client whose next buffer would pass it is
// refused naming the flag, before those bytes are read, and closed; the
// daemon's resident memory stays within the budget; and a user that
// authenticates, with a share of its own, is still served.
func TestRedisTCPBodyMemory(t *testing.T) {
	b := bins
	if raceEnabled {
		// The race detector's shadow memory is not the daemon's.
		var err error
		if b, err = Build(t.TempDir(), testVersion, false); err != nil {
			t.Fatal(err)
		}
	}
	const clients, values, size = 40, 8, 1_000_000
	users := filepath.Join(t.TempDir(), "users.acl")
	if err := os.WriteFile(users, []byte("user alice on >alice-pw ~* +@all\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := freeDataAddr(t)
	n := StartNode(t, b, NodeOptions{Name: "redismem", Args: []string{"--log-level", "warn", "--redis-addr", addr,
		"--redis-users", users, "--max-body-size", "8MiB", "--max-body-memory", "32MiB", "--max-body-memory-per-uid", "16MiB"}})
	pid := n.PID()
	base := settledRSS(t, pid)

	head := fmt.Sprintf("*%d\r\n$4\r\nMSET\r\n", 1+2*values)
	value := strings.Repeat("v", size)
	answers := make([]string, clients)
	var wg sync.WaitGroup
	for i := range clients {
		wg.Go(func() {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				answers[i] = err.Error()
				return
			}
			t.Cleanup(func() { c.Close() })
			_ = c.SetDeadline(time.Now().Add(30 * time.Second))
			sent := make(chan error, 1)
			go func() {
				w := bufio.NewWriterSize(c, 64<<10)
				_, _ = w.WriteString(head)
				for v := range values - 1 { // never the last value
					key := fmt.Sprintf("mem:c%d-%d", i, v)
					fmt.Fprintf(w, "$%d\r\n%s\r\n$%d\r\n%s\r\n", len(key), key, size, value)
				}
				sent <- w.Flush()
			}()
			// A refused client is answered and closed; one that is not
			// gets no answer: its MSET is not whole.
			answered := make(chan string, 1)
			go func() {
				line, err := bufio.NewReader(c).ReadString('\n')
				if err != nil {
					line = "read: " + err.Error()
				}
				answered <- strings.TrimSpace(line)
			}()
			select {
			case a := <-answered:
				answers[i] = a
			case err := <-sent:
				answers[i] = "held"
				if err != nil {
					// Closed: its answer, unless the reset lost it.
					answers[i] = <-answered
				}
			}
		})
	}
	wg.Wait()
	peak := procKiB(t, pid, "VmHWM")
	t.Logf("resident %d MiB before, %d MiB at the peak", base>>10, peak>>10)
	named, held := 0, 0
	for _, a := range answers {
		switch {
		case strings.Contains(a, "--max-body-memory"):
			named++
		case a == "held":
			held++
		case strings.HasPrefix(a, "read: ") && (strings.Contains(a, "connection reset by peer") || strings.HasSuffix(a, "EOF")):
			// Refused too: the answer was lost to the reset the close
			// of a socket with unread bytes sends.
		default:
			t.Errorf("a client was answered %q; want a refusal naming --max-body-memory, or no answer", a)
		}
	}
	// The share of 16 MiB holds a few of them (each buffer at least 1
	// MB); the others are refused. Unrefused, the 40 would hold 320 MB.
	if named == 0 || held > 16 {
		t.Fatalf("%d clients refused naming --max-body-memory, %d held; want refusals, and at most 16 held", named, held)
	}
	if grew := (peak - base) >> 10; grew > 96 {
		t.Fatalf("resident memory grew by %d MiB under %d half-sent MSETs; want at most 96 (a budget of 32 MiB)", grew, clients)
	}
	rc := goredis.NewClient(&goredis.Options{Addr: addr, Username: "alice", Password: "alice-pw"})
	defer rc.Close()
	if err := rc.Set(context.Background(), "mem:alice", strings.Repeat("a", 900_000), 0).Err(); err != nil {
		t.Fatalf("alice, with a share of her own, while the unauthenticated share is full: %v", err)
	}
}
