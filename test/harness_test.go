package test

import (
	"syscall"
	"testing"
)

// TestNodeHasItsOwnProcessGroup checks that a node the harness starts
// leads a process group of its own, not the test binary's: a signal to
// that group (the SIGHUP and SIGCONT the kernel sends a stopped
// process's group when it is orphaned) does not reach a node.
func TestNodeHasItsOwnProcessGroup(t *testing.T) {
	t.Parallel()
	n := StartNode(t, bins, NodeOptions{Name: "pgrp", Args: smallNode})
	pid := n.PID()
	pgid, err := syscall.Getpgid(pid)
	if err != nil {
		t.Fatal(err)
	}
	if pgid != pid || pgid == syscall.Getpgrp() {
		t.Errorf("node %d is in process group %d (the test's %d); want its own", pid, pgid, syscall.Getpgrp())
	}
}
