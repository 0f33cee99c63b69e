package wire

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

	"github.com/cachecast/cachecast/store/record"
)

// The handshake opens every data-port connection. Each side proves that it
// holds a cluster key without sending it: the dialer sends a hello with a
// fresh nonce, the listener answers with its own nonce and an HMAC over
// both, the dialer answers with its HMAC. A listener or dialer without a
// key sends and expects zero MACs, so a keyed node refuses an unkeyed one
// and the other way round.
//
//	hello (both ways, 56 bytes, plus 32 bytes of MAC from the listener):
//	+----------------+--------+---------+---------+---------------+----------------+
//	| magic "CCDATA1"| min    | max     | zero    | node ID (u64) | nonce (32 B)   |
//	|   (7 bytes)    |  (u8)  |  (u8)   | (7 B)   |               |                |
//	+----------------+--------+---------+---------+---------------+----------------+
//
// min and max are the protocol versions the sender speaks. Both sides
// speak the highest version in both ranges; with none in common each
// refuses the other, naming both ranges. The byte after min was zero in
// builds that spoke one version (then in the min byte, which they alone
// checked): a zero max reads as max = min, and such a build accepts a
// newer hello whose min is its version. So a build that adds version N+1
// keeps min = N until the whole fleet runs it; the next build can drop N.
//
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

	// HandshakeBytes is what one handshake writes and reads, each way.
	HandshakeBytes = helloSize + macSize

	// ProtocolMin and ProtocolMax are the data port's protocol versions
	// this build speaks: 2 since frames carry a MAC (see frame.go; 1 had
	// none and cannot be spoken safely, so it is out of the range); 3
	// adds the exchanges of vectors with a few peers (vector and retired
	// frames) in place of the whole vector to every peer every
	// SyncInterval; 4 carries records of version 2 (record.Version2:
	// an expiry, an effective time, a cancel or a batch's marking),
	// which builds of 3 and before refuse as corrupt; 5 exchanges
	// digests of the vectors (sums and entries frames) in place of whole
	// vectors, the entries sent only where the digests differ; 6
	// compares those digests at a cut both sides agree on (a moment
	// cutIntervals SyncIntervals back), so that records on their way
	// make no difference; 7 carries records of version 3 (an expiry
	// change, record.KindExpiry), which builds of 6 and before refuse; 8
	// carries records of version 4 (a counter increment,
	// record.KindCounter), which builds of 7 and before refuse; 9
	// carries records of version 5 (a counter increment of a key without
	// a value), which builds of 8 and before refuse; 10 carries records
	// of version 6 (an expiry change of a counter's revival, naming its
	// absence), which builds of 9 and before refuse. A connection to a
	// build of [2,2] speaks 2, to one of [2,4] speaks 4.
	ProtocolMin = 2
	ProtocolMax = 10

	// ProtocolTimed is the first version whose connections carry records
	// of version 2. On a connection of an older version a node sends
	// none (it holds back that origin from the first such record on, see
	// "Protocol versions" in the package doc) and refuses any it is sent,
	// as the older build does.
	ProtocolTimed = 4

	// ProtocolDigest is the first version whose exchanges send digests
	// of the vectors (see "Anti-entropy" in the package doc). A
	// connection of an older version exchanges whole vectors, as the
	// older build does, and refuses a digest frame as a bad one.
	ProtocolDigest = 5

	// ProtocolCut is the first version whose sums frames carry the cut
	// their digests are computed at (package digest); a connection of 5 compares
	// every origin's highest seq, as the older build does.
	ProtocolCut = 6

	// ProtocolExpiry is the first version whose connections carry
	// records of version 3 (expiry changes); on an older connection they
	// are held back as ProtocolTimed holds back version 2.
	ProtocolExpiry = 7

	// ProtocolCounter is the first version whose connections carry
	// records of version 4 (counter increments, record.KindCounter);
	// on an older connection they are held back as ProtocolTimed holds
	// back version 2.
	ProtocolCounter = 8

	// ProtocolAbsent is the first version whose connections carry
	// records of version 5 (counter increments of a key without a
	// value); on an older connection they are held back as ProtocolTimed
	// holds back version 2.
	ProtocolAbsent = 9

	// ProtocolRevival is the first version whose connections carry
	// records of version 6 (an expiry change of a counter's revival);
	// on an older connection they are held back as ProtocolTimed holds
	// back version 2.
	ProtocolRevival = 10
)

// MaxRecordVersion is the newest record version a connection of
// protocol proto carries.
func MaxRecordVersion(proto uint8) byte {
	if proto >= ProtocolRevival {
		return record.Version6
	}
	if proto >= ProtocolAbsent {
		return record.Version5
	}
	if proto >= ProtocolCounter {
		return record.Version4
	}
	if proto >= ProtocolExpiry {
		return record.Version3
	}
	if proto >= ProtocolTimed {
		return record.Version2
	}
	return record.Version
}

// Range is a range of protocol versions, both ends included.
type Range struct{ Min, Max uint8 }

// String is the range as [min,max].
func (r Range) String() string { return fmt.Sprintf("[%d,%d]", r.Min, r.Max) }

// negotiate returns the highest version in both ranges; ok is false when
// they have none in common.
func negotiate(a, b Range) (v uint8, ok bool) {
	v = min(a.Max, b.Max)
	return v, v >= max(a.Min, b.Min)
}

// ErrHandshake means a peer did not complete the handshake: wrong magic,
// wrong protocol, or no proof of the cluster key.
var ErrHandshake = errors.New("broadcast: handshake refused")

type hello struct {
	protos Range
	node   uint64
	nonce  [32]byte
}

func (h hello) encode() []byte {
	b := make([]byte, helloSize)
	copy(b, helloMagic)
	b[7], b[8] = h.protos.Min, h.protos.Max
	binary.LittleEndian.PutUint64(b[16:], h.node)
	copy(b[24:], h.nonce[:])
	return b
}

func decodeHello(b []byte) (hello, error) {
	if len(b) != helloSize || string(b[:7]) != helloMagic {
		return hello{}, fmt.Errorf("%w: not a cachecast data port", ErrHandshake)
	}
	h := hello{protos: Range{Min: b[7], Max: b[8]}, node: binary.LittleEndian.Uint64(b[16:])}
	if h.protos.Max == 0 { // a build that spoke one version
		h.protos.Max = h.protos.Min
	}
	copy(h.nonce[:], b[24:])
	if h.protos.Min == 0 || h.protos.Min > h.protos.Max {
		return hello{}, fmt.Errorf("%w: bad protocol range %s", ErrHandshake, h.protos)
	}
	if h.node == 0 {
		return hello{}, fmt.Errorf("%w: node ID 0", ErrHandshake)
	}
	return h, nil
}

func newHello(node uint64, protos Range) (hello, error) {
	h := hello{protos: protos, node: node}
	_, err := rand.Read(h.nonce[:])
	return h, err
}

// Session is what a handshake yields: the session keys, one a way, and
// the protocol version both sides speak on the connection.
type Session struct {
	DialerToListener, ListenerToDialer []byte
	Proto                              uint8
}

// agree negotiates the version of a connection between ours and theirs,
// or says why there is none.
func agree(ours, theirs Range, node uint64) (uint8, error) {
	v, ok := negotiate(ours, theirs)
	if !ok {
		return 0, fmt.Errorf("%w: node %016x speaks protocol versions %s, this node %s: none in common (upgrade the fleet one version range at a time)",
			ErrHandshake, node, theirs, ours)
	}
	return v, nil
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

// deriveSession makes a connection's session keys (see the top of this
// file) from the keys each side proved with and both hellos, for a
// connection of protocol proto.
func deriveSession(listenerKey, dialerKey, dialer, listener []byte, proto uint8) Session {
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
	return Session{DialerToListener: sub("dialer->listener"), ListenerToDialer: sub("listener->dialer"), Proto: proto}
}

// DialHandshake runs the dialer's side and returns the listener's node ID
// and the connection's session.
func DialHandshake(conn net.Conn, self uint64, keys [][]byte, protos Range, timeout time.Duration) (uint64, Session, error) {
	conn.SetDeadline(time.Now().Add(timeout))
	defer conn.SetDeadline(time.Time{})
	mine, err := newHello(self, protos)
	if err != nil {
		return 0, Session{}, err
	}
	dh := mine.encode()
	if _, err := conn.Write(dh); err != nil {
		return 0, Session{}, err
	}
	buf := make([]byte, helloSize+macSize)
	if _, err := io.ReadFull(conn, buf); err != nil {
		return 0, Session{}, fmt.Errorf("%w: %v", ErrHandshake, err)
	}
	lh := buf[:helloSize]
	theirs, err := decodeHello(lh)
	if err != nil {
		return 0, Session{}, err
	}
	v, err := agree(protos, theirs.protos, theirs.node)
	if err != nil {
		return 0, Session{}, err
	}
	theirKey, ok := matchKey(keys, buf[helloSize:], "listener", dh, lh)
	if !ok {
		return 0, Session{}, fmt.Errorf("%w: the peer does not hold the cluster key", ErrHandshake)
	}
	if _, err := conn.Write(mac(primary(keys), "dialer", dh, lh)); err != nil {
		return 0, Session{}, err
	}
	return theirs.node, deriveSession(theirKey, primary(keys), dh, lh, v), nil
}

// AcceptHandshake runs the listener's side and returns the dialer's node
// ID and the connection's session. The listener answers even a dialer it
// has no version in common with, so that the dialer can say why.
func AcceptHandshake(conn net.Conn, self uint64, keys [][]byte, protos Range, timeout time.Duration) (uint64, Session, error) {
	conn.SetDeadline(time.Now().Add(timeout))
	defer conn.SetDeadline(time.Time{})
	dh := make([]byte, helloSize)
	if _, err := io.ReadFull(conn, dh); err != nil {
		return 0, Session{}, fmt.Errorf("%w: %v", ErrHandshake, err)
	}
	theirs, err := decodeHello(dh)
	if err != nil {
		return 0, Session{}, err
	}
	mine, err := newHello(self, protos)
	if err != nil {
		return 0, Session{}, err
	}
	lh := mine.encode()
	if _, err := conn.Write(append(lh, mac(primary(keys), "listener", dh, lh)...)); err != nil {
		return 0, Session{}, err
	}
	v, err := agree(protos, theirs.protos, theirs.node)
	if err != nil {
		return 0, Session{}, err
	}
	got := make([]byte, macSize)
	if _, err := io.ReadFull(conn, got); err != nil {
		return 0, Session{}, fmt.Errorf("%w: %v", ErrHandshake, err)
	}
	theirKey, ok := matchKey(keys, got, "dialer", dh, lh)
	if !ok {
		return 0, Session{}, fmt.Errorf("%w: node %016x does not hold the cluster key", ErrHandshake, theirs.node)
	}
	return theirs.node, deriveSession(primary(keys), theirKey, dh, lh, v), nil
}
