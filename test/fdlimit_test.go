package test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cachecast/cachecast/internal/testkit"
)

// TestOutOfFileDescriptors: local clients that open connections until the
// daemon has no file descriptor left (its open-file limit below what
// --max-connections allows) make its accepts fail with EMFILE; the daemon
// says so, keeps running, and once they close serves both doors again. A
// failed accept of the Redis socket used to stop the daemon.
func TestOutOfFileDescriptors(t *testing.T) {
	t.Parallel()
	n := StartNode(t, bins, NodeOptions{Name: "fdlimit", Args: smallNode})
	redisSock := n.RedisSocket()
	pid := n.PID()
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	limit := uint64(len(fds) + 40)
	if err := unix.Prlimit(pid, unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: limit, Max: limit}, nil); err != nil {
		t.Fatalf("lowering the daemon's open-file limit: %v", err)
	}
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	// Twice the limit's room on each door: the Unix sockets' backlogs take
	// the connections the daemon cannot accept.
	for _, sock := range []string{redisSock, n.Socket} {
		for range 80 {
			c, err := net.DialTimeout("unix", sock, time.Second)
			if err != nil {
				break // the listen backlog is full
			}
			conns = append(conns, c)
		}
	}
	if err := n.WaitLog("too many open files", 30*time.Second); err != nil {
		t.Fatalf("the daemon never ran out of file descriptors: %v", err)
	}
	for _, c := range conns {
		c.Close()
	}
	conns = nil
	testkit.Eventually(t, 30*time.Second, "the Redis door answers PING again", func() bool {
		if !n.Running() {
			t.Fatalf("the daemon stopped:\n%s", n.Logs())
		}
		return redisPing(redisSock) == nil
	})
	if r := httpDo(t, n, "GET", "/readyz", nil); r.status != 200 {
		t.Fatalf("GET /readyz: %d %s", r.status, r.body)
	}
	if r := httpDo(t, n, "PUT", "/v1/topics/t/keys/after", strings.NewReader("v")); r.status != 200 {
		t.Fatalf("PUT after: %d %s", r.status, r.body)
	}
}

// redisPing sends PING on a new connection to sock and wants +PONG.
func redisPing(sock string) error {
	c, err := net.DialTimeout("unix", sock, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.WriteString(c, "PING\r\n"); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" {
		return fmt.Errorf("PING: %q", line)
	}
	return nil
}
