package gossip

import (
	"bytes"
	"encoding/base64"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/memberlist"
)

func key(n int, fill byte) []byte { return bytes.Repeat([]byte{fill}, n) }

func b64(k []byte) string { return base64.StdEncoding.EncodeToString(k) }

func TestLoadKeyFile(t *testing.T) {
	k16, k24, k32 := key(16, 1), key(24, 2), key(32, 3)
	tests := []struct {
		name    string
		content string
		want    [][]byte
		errLike string // substring of the error; "" = no error
	}{
		{"one key", b64(k32) + "\n", [][]byte{k32}, ""},
		{"no trailing newline", b64(k16), [][]byte{k16}, ""},
		{"primary first", b64(k24) + "\n" + b64(k16) + "\n" + b64(k32) + "\n", [][]byte{k24, k16, k32}, ""},
		{"comments and blanks", "# cluster key, rotated 2025-01-01\n\n  " + b64(k32) + "  \n# old:\n" + b64(k16) + "\r\n", [][]byte{k32, k16}, ""},
		{"unpadded base64", strings.TrimRight(b64(k16), "="), [][]byte{k16}, ""},
		{"empty file", "", nil, "no key"},
		{"only comments", "# nothing here\n\n", nil, "no key"},
		{"bad base64", b64(k32) + "\nnot*base64!\n", nil, "line 2: not valid base64"},
		{"wrong length", "# c\n" + b64(key(20, 4)) + "\n", nil, "line 2: key is 20 bytes, must be 16, 24 or 32"},
		{"too long", b64(key(64, 5)), nil, "line 1: key is 64 bytes"},
		{"repeated key", b64(k32) + "\n" + b64(k32) + "\n", nil, "line 2 repeats the key on line 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "cluster.key")
			if err := os.WriteFile(path, []byte(tt.content), 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := LoadKeyFile(path)
			if tt.errLike != "" {
				if !errors.Is(err, ErrBadKey) || !strings.Contains(err.Error(), tt.errLike) || !strings.Contains(err.Error(), path) {
					t.Fatalf("err = %v; want ErrBadKey naming %s and containing %q", err, path, tt.errLike)
				}
				if got != nil {
					t.Fatalf("keys returned with an error: %d", len(got))
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.EqualFunc(got, tt.want, bytes.Equal) {
				t.Fatalf("got %x, want %x", got, tt.want)
			}
		})
	}
	t.Run("missing file", func(t *testing.T) {
		_, err := LoadKeyFile(filepath.Join(t.TempDir(), "absent"))
		if !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("err = %v, want fs.ErrNotExist", err)
		}
	})
	t.Run("error does not leak the key", func(t *testing.T) {
		secret := b64(key(20, 9))
		_, err := ParseKeys([]byte(secret))
		if err == nil || strings.Contains(err.Error(), secret) {
			t.Fatalf("err = %v", err)
		}
	})
}

func TestGenerateKey(t *testing.T) {
	a, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := GenerateKey()
	if a == b {
		t.Fatal("two generated keys are equal")
	}
	keys, err := ParseKeys([]byte(a + "\n"))
	if err != nil || len(keys) != 1 || len(keys[0]) != 32 {
		t.Fatalf("generated key does not load: %v", err)
	}
	if id := KeyID(keys[0]); len(id) != 8 {
		t.Fatalf("KeyID = %q", id)
	}
}

// TestApplyKeys checks that the keyring ends up holding exactly the keys
// asked for, in order, from various starting rings.
func TestApplyKeys(t *testing.T) {
	A, B, C, D := key(16, 'a'), key(24, 'b'), key(32, 'c'), key(16, 'd')
	tests := []struct {
		name      string
		from, set [][]byte
	}{
		{"same", [][]byte{A}, [][]byte{A}},
		{"rotation pass 1: add secondary", [][]byte{A}, [][]byte{A, B}},
		{"rotation pass 2: swap primary", [][]byte{A, B}, [][]byte{B, A}},
		{"rotation pass 3: drop old", [][]byte{B, A}, [][]byte{B}},
		{"replace outright", [][]byte{A}, [][]byte{B}},
		{"remove a middle key", [][]byte{A, B, C}, [][]byte{A, C}},
		{"remove several, reorder", [][]byte{A, B, C, D}, [][]byte{D, B}},
		{"new primary, drop all old", [][]byte{A, B, C}, [][]byte{D}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ring, err := memberlist.NewKeyring(tt.from, tt.from[0])
			if err != nil {
				t.Fatal(err)
			}
			if err := applyKeys(ring, tt.set); err != nil {
				t.Fatal(err)
			}
			got := ring.GetKeys()
			if !bytes.Equal(ring.GetPrimaryKey(), tt.set[0]) {
				t.Fatalf("primary %x, want %x", ring.GetPrimaryKey(), tt.set[0])
			}
			if !slices.EqualFunc(got, tt.set, bytes.Equal) {
				t.Fatalf("ring %s, want %s", keyIDs(got), keyIDs(tt.set))
			}
		})
	}
}
