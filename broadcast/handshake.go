package broadcast

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// The handshake opens every data-port connection. Each side proves that it
// holds a cluster key without sending it: the dialer sends a hello with a
// fresh nonce, the listener answers with its own nonce and an HMAC over
// both, the dialer answers with its HMAC. A listener or dialer without a
// key sends and expects zero MACs, so a keyed node refuses an unkeyed one
// and the other way round.
//
//	hello (both ways, 56 bytes, plus 32 bytes of MAC from the listener):
//	+----------------+--------+---------+---------------+----------------+
//	| magic "CCDATA1"| proto  | flags   | node ID (u64) | nonce (32 B)   |
//	|   (7 bytes)    |  (u8)  | (u64 0) |               |                |
//	+----------------+--------+---------+---------------+----------------+
//	listener's MAC = HMAC-SHA256(key, "listener" | dialer hello | listener hello)
//	dialer's   MAC = HMAC-SHA256(key, "dialer"   | dialer hello | listener hello)
//
// The listener tries every key of its keyring on the dialer's MAC, so keys
// can be rotated (add everywhere, switch the primary, remove the old one)
// without a split.
//
// The handshake authenticates the peer; the session keys it yields
// authenticate every frame after it (protocol 2; protocol 1 had none, so
// anyone on the path could change records once a connection was open).
// Both sides derive them from the key each side proved with (they differ
// while a rotation is half done) and both hellos, so both nonces:
//
//	secret = HMAC-SHA256(listener's key, "cachecast session" | len(dialer's key) u32 |
//	                     dialer's key | dialer hello | listener hello)
//	dialer->listener key = HMAC-SHA256(secret, "dialer->listener")
//	listener->dialer key = HMAC-SHA256(secret, "listener->dialer")
//
// Without a cluster key the keys are still derived (from no key), so the
// frames keep one format, but they prove nothing: only a key (or TLS)
// protects the stream.
const (
	helloMagic = "CCDATA1"
	helloSize  = 7 + 1 + 8 + 8 + 32
	macSize    = sha256.Size

	// ProtocolVersion is the data port's protocol version: 2 since frames
	// carry a MAC (see frame.go). A node of another version is refused at
	// the handshake ("protocol 1, want 2"), so a fleet is upgraded whole.
	ProtocolVersion = 2
)

// ErrHandshake means a peer did not complete the handshake: wrong magic,
// wrong protocol, or no proof of the cluster key.
var ErrHandshake = errors.New("broadcast: handshake refused")

type hello struct {
	proto byte
	node  uint64
	nonce [32]byte
}

func (h hello) encode() []byte {
	b := make([]byte, helloSize)
	copy(b, helloMagic)
	b[7] = h.proto
	binary.LittleEndian.PutUint64(b[16:], h.node)
	copy(b[24:], h.nonce[:])
	return b
}

func decodeHello(b []byte) (hello, error) {
	if len(b) != helloSize || string(b[:7]) != helloMagic {
		return hello{}, fmt.Errorf("%w: not a cachecast data port", ErrHandshake)
	}
	h := hello{proto: b[7], node: binary.LittleEndian.Uint64(b[16:])}
	copy(h.nonce[:], b[24:])
	if h.proto != ProtocolVersion {
		return hello{}, fmt.Errorf("%w: protocol %d, want %d", ErrHandshake, h.proto, ProtocolVersion)
	}
	if h.node == 0 {
		return hello{}, fmt.Errorf("%w: node ID 0", ErrHandshake)
	}
	return h, nil
}

func newHello(node uint64) (hello, error) {
	h := hello{proto: ProtocolVersion, node: node}
	_, err := rand.Read(h.nonce[:])
	return h, err
}

func mac(key []byte, role string, dialer, listener []byte) []byte {
	if len(key) == 0 {
		return make([]byte, macSize)
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte(role))
	m.Write(dialer)
	m.Write(listener)
	return m.Sum(nil)
}

// matchKey returns the key (of keys) that made got; with no keys, got must
// be the zero MAC and the key is nil.
func matchKey(keys [][]byte, got []byte, role string, dialer, listener []byte) ([]byte, bool) {
	if len(keys) == 0 {
		return nil, hmac.Equal(got, make([]byte, macSize))
	}
	for _, k := range keys {
		if hmac.Equal(got, mac(k, role, dialer, listener)) {
			return k, true
		}
	}
	return nil, false
}

func primary(keys [][]byte) []byte {
	if len(keys) == 0 {
		return nil
	}
	return keys[0]
}

// sessionKeys authenticate the frames of one connection, one key a way.
type sessionKeys struct {
	dialerToListener, listenerToDialer []byte
}

// deriveSession makes a connection's session keys (see the top of this
// file) from the keys each side proved with and both hellos.
func deriveSession(listenerKey, dialerKey, dialer, listener []byte) sessionKeys {
	m := hmac.New(sha256.New, listenerKey)
	m.Write([]byte("cachecast session"))
	m.Write(binary.LittleEndian.AppendUint32(nil, uint32(len(dialerKey))))
	m.Write(dialerKey)
	m.Write(dialer)
	m.Write(listener)
	secret := m.Sum(nil)
	sub := func(label string) []byte {
		m := hmac.New(sha256.New, secret)
		m.Write([]byte(label))
		return m.Sum(nil)
	}
	return sessionKeys{dialerToListener: sub("dialer->listener"), listenerToDialer: sub("listener->dialer")}
}

// dialHandshake runs the dialer's side and returns the listener's node ID
// and the connection's session keys.
func dialHandshake(conn net.Conn, self uint64, keys [][]byte, timeout time.Duration) (uint64, sessionKeys, error) {
	conn.SetDeadline(time.Now().Add(timeout))
	defer conn.SetDeadline(time.Time{})
	mine, err := newHello(self)
	if err != nil {
		return 0, sessionKeys{}, err
	}
	dh := mine.encode()
	if _, err := conn.Write(dh); err != nil {
		return 0, sessionKeys{}, err
	}
	buf := make([]byte, helloSize+macSize)
	if _, err := io.ReadFull(conn, buf); err != nil {
		return 0, sessionKeys{}, fmt.Errorf("%w: %v", ErrHandshake, err)
	}
	lh := buf[:helloSize]
	theirs, err := decodeHello(lh)
	if err != nil {
		return 0, sessionKeys{}, err
	}
	theirKey, ok := matchKey(keys, buf[helloSize:], "listener", dh, lh)
	if !ok {
		return 0, sessionKeys{}, fmt.Errorf("%w: the peer does not hold the cluster key", ErrHandshake)
	}
	if _, err := conn.Write(mac(primary(keys), "dialer", dh, lh)); err != nil {
		return 0, sessionKeys{}, err
	}
	return theirs.node, deriveSession(theirKey, primary(keys), dh, lh), nil
}

// acceptHandshake runs the listener's side and returns the dialer's node
// ID and the connection's session keys.
func acceptHandshake(conn net.Conn, self uint64, keys [][]byte, timeout time.Duration) (uint64, sessionKeys, error) {
	conn.SetDeadline(time.Now().Add(timeout))
	defer conn.SetDeadline(time.Time{})
	dh := make([]byte, helloSize)
	if _, err := io.ReadFull(conn, dh); err != nil {
		return 0, sessionKeys{}, fmt.Errorf("%w: %v", ErrHandshake, err)
	}
	theirs, err := decodeHello(dh)
	if err != nil {
		return 0, sessionKeys{}, err
	}
	mine, err := newHello(self)
	if err != nil {
		return 0, sessionKeys{}, err
	}
	lh := mine.encode()
	if _, err := conn.Write(append(lh, mac(primary(keys), "listener", dh, lh)...)); err != nil {
		return 0, sessionKeys{}, err
	}
	got := make([]byte, macSize)
	if _, err := io.ReadFull(conn, got); err != nil {
		return 0, sessionKeys{}, fmt.Errorf("%w: %v", ErrHandshake, err)
	}
	theirKey, ok := matchKey(keys, got, "dialer", dh, lh)
	if !ok {
		return 0, sessionKeys{}, fmt.Errorf("%w: node %016x does not hold the cluster key", ErrHandshake, theirs.node)
	}
	return theirs.node, deriveSession(primary(keys), theirKey, dh, lh), nil
}
