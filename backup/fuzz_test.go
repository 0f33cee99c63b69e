package backup

import (
	"bytes"
	"errors"
	"testing"
)

// FuzzVerify feeds the decoder any bytes: it returns metadata or an error
// wrapping ErrCorrupt or ErrFormat, never panics, and accepts only what
// ends with the SHA-256 of the rest.
func FuzzVerify(f *testing.F) {
	f.Add(sample(f, []byte("a snapshot's bytes")))
	f.Add(sample(f, nil))
	f.Add([]byte("CCBACKUP"))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, err := Verify(bytes.NewReader(b))
		if err != nil && !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrFormat) {
			t.Fatalf("error wraps neither ErrCorrupt nor ErrFormat: %v", err)
		}
	})
}
