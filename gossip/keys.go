package gossip

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"os"
	"strings"

	"github.com/hashicorp/memberlist"
)

// LoadKeyFile reads cluster keys from a file: one base64 key per line
// (standard encoding, padding optional), 16, 24 or 32 bytes once decoded
// (AES-128, -192 or -256). Blank lines and lines starting with '#' are
// skipped. The first key is the primary: it encrypts everything this node
// sends; the others are only tried when decrypting (see the package doc,
// "Key rotation").
//
// Errors wrap ErrBadKey (or the os error) and name the file and line. The
// key bytes never appear in an error.
func LoadKeyFile(path string) ([][]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("gossip: key file: %w", err)
	}
	keys, err := ParseKeys(b)
	if err != nil {
		return nil, fmt.Errorf("key file %s: %w", path, err)
	}
	return keys, nil
}

// ParseKeys parses the contents of a key file (see LoadKeyFile).
func ParseKeys(b []byte) ([][]byte, error) {
	var keys [][]byte
	first := map[string]int{} // key -> line it first appeared on
	sc := bufio.NewScanner(bytes.NewReader(b))
	for line := 1; sc.Scan(); line++ {
		s := strings.TrimSpace(sc.Text())
		if s == "" || strings.HasPrefix(s, "#") {
			continue
		}
		k, err := decodeKey(s)
		if err != nil {
			return nil, fmt.Errorf("%w: line %d: %v", ErrBadKey, line, err)
		}
		if l, dup := first[string(k)]; dup {
			return nil, fmt.Errorf("%w: line %d repeats the key on line %d", ErrBadKey, line, l)
		}
		first[string(k)] = line
		keys = append(keys, k)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadKey, err)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("%w: no key (one base64 key per line, '#' starts a comment)", ErrBadKey)
	}
	return keys, nil
}

func decodeKey(s string) ([]byte, error) {
	k, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		// Accept the unpadded form too; report the error of the padded one.
		if k2, err2 := base64.RawStdEncoding.DecodeString(s); err2 == nil {
			k, err = k2, nil
		}
	}
	if err != nil {
		return nil, fmt.Errorf("not valid base64: %v", err)
	}
	if err := memberlist.ValidateKey(k); err != nil {
		return nil, fmt.Errorf("key is %d bytes, must be 16, 24 or 32", len(k))
	}
	return k, nil
}

// GenerateKey returns a new random 32-byte key, base64-encoded: a line for
// a key file.
func GenerateKey() (string, error) {
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		return "", fmt.Errorf("gossip: generate key: %w", err)
	}
	return base64.StdEncoding.EncodeToString(k), nil
}

// KeyID is a short fingerprint of a key (the first 4 bytes of its SHA-256,
// in hex), safe to log and to show to operators comparing key files.
func KeyID(key []byte) string {
	h := sha256.Sum256(key)
	return hex.EncodeToString(h[:4])
}

// checkKeys validates a key list: every key of a valid length, no repeats.
func checkKeys(keys [][]byte) error {
	seen := map[string]int{}
	for i, k := range keys {
		if err := memberlist.ValidateKey(k); err != nil {
			return fmt.Errorf("%w: key %d is %d bytes, must be 16, 24 or 32", ErrBadKey, i, len(k))
		}
		if j, dup := seen[string(k)]; dup {
			return fmt.Errorf("%w: key %d repeats key %d", ErrBadKey, i, j)
		}
		seen[string(k)] = i
	}
	return nil
}

// applyKeys makes the keyring hold exactly keys, keys[0] primary.
//
// memberlist's RemoveKey shifts the ring's backing array in place when the
// key is not the last one, while decryption reads the same array without a
// lock (GetKeys returns it). To stay clear of that race, keys are only ever
// removed from the end: if a key to remove is not already in the tail, the
// ring is first reordered with UseKey, which always installs a fresh slice.
// The reordering makes each key primary for an instant; a packet sent in
// that instant may be unreadable by a peer, which gossip tolerates (UDP
// loss, a retried push/pull). The documented rotation procedure never needs
// the reordering.
func applyKeys(ring *memberlist.Keyring, keys [][]byte) error {
	for _, k := range keys {
		if err := ring.AddKey(bytes.Clone(k)); err != nil {
			return fmt.Errorf("%w: %v", ErrBadKey, err)
		}
	}
	if err := ring.UseKey(keys[0]); err != nil {
		return fmt.Errorf("%w: %v", ErrBadKey, err)
	}
	keep := map[string]bool{}
	for _, k := range keys {
		keep[string(k)] = true
	}
	cur := append([][]byte(nil), ring.GetKeys()...)
	var remove [][]byte
	inTail := true
	for i, k := range cur {
		if !keep[string(k)] {
			remove = append(remove, k)
			if i < len(keys) {
				inTail = false
			}
		}
	}
	if len(remove) == 0 {
		return nil
	}
	if !inTail {
		// UseKey pushes a key to the front; applying it from the last wanted
		// position to the first leaves the ring as keys, then remove.
		want := append(append([][]byte(nil), keys...), remove...)
		for i := len(want) - 1; i >= 0; i-- {
			if err := ring.UseKey(want[i]); err != nil {
				return fmt.Errorf("%w: %v", ErrBadKey, err)
			}
		}
	}
	cur = append([][]byte(nil), ring.GetKeys()...)
	for i := len(cur) - 1; i >= len(keys); i-- {
		if err := ring.RemoveKey(cur[i]); err != nil {
			return fmt.Errorf("%w: %v", ErrBadKey, err)
		}
	}
	return nil
}
