package gossip

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"testing"
	"time"
)

// TestAsk: a question reaches the member named and its answer comes back;
// a member without an answer function leaves Ask to its context, and an
// unknown member is ErrAsk at once.
func TestAsk(t *testing.T) {
	leakCheck(t)
	nodes := cluster(t, 3, nil)
	nodes[1].SetAnswer(func(from string, q []byte) []byte {
		return append([]byte(from+" asked "), q...)
	})
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	got, err := nodes[0].Ask(ctx, "node-1", []byte("digest?"))
	if err != nil || !bytes.Equal(got, []byte("node-0 asked digest?")) {
		t.Fatalf("Ask(node-1) = %q, %v", got, err)
	}

	short, cancel2 := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel2()
	if _, err := nodes[0].Ask(short, "node-2", []byte("q")); !errors.Is(err, ErrAsk) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Ask(a member with no answer) = %v; want ErrAsk and the deadline", err)
	}
	if _, err := nodes[0].Ask(ctx, "nobody", []byte("q")); !errors.Is(err, ErrAsk) {
		t.Fatalf("Ask(nobody) = %v; want ErrAsk", err)
	}
}

// FuzzDecodeAsk: no input panics the decoder, and what it accepts is the
// message it came from.
func FuzzDecodeAsk(f *testing.F) {
	f.Add([]byte{askQuestion, 0, 0, 0, 0, 0, 0, 0, 1, 1, 'a', 'q'})
	f.Add([]byte{askAnswer, 0, 0, 0, 0, 0, 0, 0, 9, 2, 'a', 'b'})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		kind, id, from, body, ok := decodeAsk(b)
		if !ok {
			return
		}
		if kind != askQuestion && kind != askAnswer || from == "" {
			t.Fatalf("accepted kind %d from %q", kind, from)
		}
		re := []byte{kind}
		re = append(re, b[1:9]...)
		re = append(re, byte(len(from)))
		re = append(re, from...)
		re = append(re, body...)
		if !bytes.Equal(re, b) || binary.BigEndian.Uint64(b[1:9]) != id {
			t.Fatalf("decoded %d %d %q %q from %x", kind, id, from, body, b)
		}
	})
}
