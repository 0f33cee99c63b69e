// Package test holds cachecast's end-to-end tests: they build the real
// binaries (cmd/cachecastd, cmd/cachecast) once per run, start daemons as
// processes on real Unix sockets and data directories, talk to them with the
// client package and the CLI, and stop them with SIGTERM or SIGKILL.
//
// The process harness is exported (Build, Binaries, Node) so that the
// multi-node tests of the cluster issues, and other packages' tests, start
// daemons the same way:
//
//	bins, err := test.Build(dir, "e2e", false) // once, in TestMain
//	n := test.StartNode(t, bins, test.NodeOptions{Args: []string{"--flush", "sync"}})
//	res, err := n.Client.Publish(ctx, "prices", "sku-1", []byte("12.50"), "")
//	n.Kill()  // SIGKILL
//	n.Start() // same data directory and socket; waits for /readyz
//	n.Stop()  // SIGTERM; the exit status must be 0
//
// A node's output (the daemon's JSON log) is kept for the whole test and
// written to the test log when the test fails. When the binaries are built
// with the race detector, a data race reported by a daemon fails the test.
package test
