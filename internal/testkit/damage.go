package testkit

import (
	"os"
	"testing"
)

// FlipMiddleByte flips one bit of the byte in the middle of the file at
// path, as a damaged disk page would; the file keeps its size and mode.
func FlipMiddleByte(t testing.TB, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x40
	if err := os.WriteFile(path, b, 0); err != nil {
		t.Fatal(err)
	}
}
