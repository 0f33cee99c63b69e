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
// 110 MB to 1.28 GB resident), in three ways: without --redis-users (all
// unauthenticated clients share one share of --max-body-memory-per-uid),
// authenticated as one user of --redis-users (its share), and, with
// --redis-users, without authenticating (a stranger's command is 16 KiB
// at most). A client whose next read buffer would pass its share is
// refused naming the flag, a stranger's MSET is refused in Redis's words
// once its header says 17 arguments, before those bytes are read, and
// closed; the daemon's resident memory stays within the budget; and
// another user of --redis-users, with a share of its own, is still served.
func TestRedisTCPBodyMemory(t *testing.T) {
	t.Parallel()
	b := shippedBins(t)
	users := filepath.Join(t.TempDir(), "users.acl")
	if err := os.WriteFile(users, []byte("user alice on >alice-pw ~* +@all\nuser bob on >bob-pw ~* +@all\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	budget := []string{"--log-level", "warn", "--max-body-size", "8MiB", "--max-body-memory", "32MiB", "--max-body-memory-per-uid", "16MiB"}
	anonymous := freeDataAddr(t)
	anon := StartNode(t, b, NodeOptions{Name: "redismem-anon", Args: append([]string{"--redis-addr", anonymous}, budget...)})
	withUsers := freeDataAddr(t)
	n := StartNode(t, b, NodeOptions{Name: "redismem-users", Args: append([]string{"--redis-addr", withUsers, "--redis-users", users}, budget...)})
	for _, c := range []struct {
		name, addr, auth string
		pid              int
		refusal          string
		maxHeld          int
	}{
		{"without --redis-users", anonymous, "", anon.PID(), "--max-body-memory", 16},
		{"as alice", withUsers, "AUTH alice alice-pw\r\n", n.PID(), "--max-body-memory", 16},
		{"strangers", withUsers, "", n.PID(), "ERR Protocol error: unauthenticated multibulk length", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			base := settledRSS(t, c.pid)
			answers := halfSentMSETs(t, c.addr, c.auth, 40)
			peak := procKiB(t, c.pid, "VmHWM")
			t.Logf("resident %d MiB before, %d MiB at the peak", base>>10, peak>>10)
			named, held := 0, 0
			for _, a := range answers {
				switch {
				case strings.Contains(a, c.refusal):
					named++
				case a == "held":
					held++
				case strings.HasPrefix(a, "read: ") && (strings.Contains(a, "connection reset by peer") || strings.HasSuffix(a, "EOF")):
					// Refused too: the answer was lost to the reset the
					// close of a socket with unread bytes sends.
				default:
					t.Errorf("a client was answered %q; want %q, or no answer", a, c.refusal)
				}
			}
			// A share of 16 MiB holds a few of them (each buffer at
			// least 1 MB); the others are refused. Unrefused, the 40
			// would hold 320 MB.
			if named == 0 || held > c.maxHeld {
				t.Fatalf("%d clients refused with %q, %d held; want refusals, and at most %d held", named, c.refusal, held, c.maxHeld)
			}
			if grew := (peak - base) >> 10; grew > 96 {
				t.Fatalf("resident memory grew by %d MiB under 40 half-sent MSETs; want at most 96 (a budget of 32 MiB)", grew)
			}
		})
	}
	rc := goredis.NewClient(&goredis.Options{Addr: withUsers, Username: "bob", Password: "bob-pw"})
	defer rc.Close()
	if err := rc.Set(context.Background(), "mem:bob", strings.Repeat("b", 900_000), 0).Err(); err != nil {
		t.Fatalf("bob, with a share of his own, beside alice's full share: %v", err)
	}
}

// halfSentMSETs has clients TCP clients of addr each send auth (if any;
// its answer is read first), then an MSET of 8 values of 1 MB but the
// last value, and returns what each was answered: the first line of the
// MSET's answer, "held" when its bytes were all taken and no answer came,
// or "read: <error>".
func halfSentMSETs(t *testing.T, addr, auth string, clients int) []string {
	t.Helper()
	const values, size = 8, 1_000_000
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
			r := bufio.NewReader(c)
			if auth != "" {
				if _, err := c.Write([]byte(auth)); err != nil {
					answers[i] = "auth: " + err.Error()
					return
				}
				if line, err := r.ReadString('\n'); err != nil || line != "+OK\r\n" {
					answers[i] = fmt.Sprintf("auth: %q %v", line, err)
					return
				}
			}
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
				line, err := r.ReadString('\n')
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
	return answers
}
