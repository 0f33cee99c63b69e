//go:build !race

package testkit

// Race is whether the binary was built with the race detector (-race),
// which slows code down and drops a fourth of sync.Pool's Puts: tests
// that count allocations or time loosen or skip with it.
const Race = false
