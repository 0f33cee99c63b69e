package gossip

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"

	"github.com/hashicorp/memberlist"
	"go.uber.org/zap"
)

// Ask carries a question to one member and its answer back, over
// memberlist's reliable (TCP) user messages, encrypted and authenticated
// with the cluster key like the rest of gossip. It is for rare, small
// exchanges the data port has no frame for (the view digests of
// `cachecast verify`); records never travel this way.
//
//	message: kind u8 (1 question, 2 answer) | id u64 | sender len u8 | sender | body
//
// A question is answered by the function given to SetAnswer, in its own
// goroutine; a member without one answers nothing, and Ask waits until
// its context ends.
const (
	askQuestion = 1
	askAnswer   = 2
)

// ErrAsk means a question could not be sent, or its answer was malformed.
var ErrAsk = errors.New("gossip: ask failed")

type asker struct {
	mu      sync.Mutex
	next    uint64
	waiting map[uint64]chan []byte
	answer  func(from string, question []byte) []byte
}

// SetAnswer sets the function that answers other members' questions.
func (g *Gossip) SetAnswer(fn func(from string, question []byte) []byte) {
	g.asks.mu.Lock()
	g.asks.answer = fn
	g.asks.mu.Unlock()
}

// Ask sends question to the member named name and returns its answer, or
// the context's error when it ends first.
func (g *Gossip) Ask(ctx context.Context, name string, question []byte) ([]byte, error) {
	a := &g.asks
	a.mu.Lock()
	if a.waiting == nil {
		a.waiting = make(map[uint64]chan []byte)
	}
	a.next++
	id := a.next
	ch := make(chan []byte, 1)
	a.waiting[id] = ch
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		delete(a.waiting, id)
		a.mu.Unlock()
	}()
	if err := g.sendAsk(name, askQuestion, id, question); err != nil {
		return nil, err
	}
	select {
	case b := <-ch:
		return b, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: no answer from %s: %w", ErrAsk, name, ctx.Err())
	}
}

func (g *Gossip) sendAsk(name string, kind byte, id uint64, body []byte) error {
	// The address comes from this package's own copy of the member:
	// memberlist's Members() hands out its live *Node, which its packet
	// handler rewrites in place (a data race).
	node, err := g.askNode(name)
	if err != nil {
		return err
	}
	self := g.cfg.NodeName
	msg := make([]byte, 0, 1+8+1+len(self)+len(body))
	msg = append(msg, kind)
	msg = binary.BigEndian.AppendUint64(msg, id)
	msg = append(msg, byte(len(self)))
	msg = append(msg, self...)
	msg = append(msg, body...)
	if err := g.ml.SendReliable(node, msg); err != nil {
		return fmt.Errorf("%w: to %s: %v", ErrAsk, name, err)
	}
	return nil
}

// askNode is a private memberlist.Node for the alive member name.
func (g *Gossip) askNode(name string) (*memberlist.Node, error) {
	for _, m := range g.Alive() {
		if m.Name != name {
			continue
		}
		host, port, err := net.SplitHostPort(m.Addr)
		if err != nil {
			return nil, fmt.Errorf("%w: member %s has address %q: %v", ErrAsk, name, m.Addr, err)
		}
		p, err := strconv.ParseUint(port, 10, 16)
		if err != nil {
			return nil, fmt.Errorf("%w: member %s has address %q: %v", ErrAsk, name, m.Addr, err)
		}
		return &memberlist.Node{Name: m.Name, Addr: net.ParseIP(host), Port: uint16(p)}, nil
	}
	return nil, fmt.Errorf("%w: no live member %s", ErrAsk, name)
}

// decodeAsk splits a message of Ask; ok is false for a malformed one.
func decodeAsk(b []byte) (kind byte, id uint64, from string, body []byte, ok bool) {
	if len(b) < 10 {
		return 0, 0, "", nil, false
	}
	kind, id, n := b[0], binary.BigEndian.Uint64(b[1:9]), int(b[9])
	if kind != askQuestion && kind != askAnswer || len(b) < 10+n || n == 0 {
		return 0, 0, "", nil, false
	}
	return kind, id, string(b[10 : 10+n]), b[10+n:], true
}

// receiveAsk handles a message of Ask (memberlist's NotifyMsg: it must not
// block, and b is memberlist's to reuse).
func (g *Gossip) receiveAsk(b []byte) {
	kind, id, from, body, ok := decodeAsk(b)
	if !ok {
		g.log.Warn("dropping a malformed gossip message", zap.Int("bytes", len(b)))
		return
	}
	body = append([]byte(nil), body...)
	a := &g.asks
	a.mu.Lock()
	defer a.mu.Unlock()
	switch kind {
	case askAnswer:
		if ch := a.waiting[id]; ch != nil {
			select {
			case ch <- body:
			default: // answered twice
			}
		}
	case askQuestion:
		fn := a.answer
		if fn == nil {
			return
		}
		go func() {
			if err := g.sendAsk(from, askAnswer, id, fn(from, body)); err != nil {
				g.log.Warn("could not answer a member's question", zap.String("member", from), zap.Error(err))
			}
		}()
	}
}
