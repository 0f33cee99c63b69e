package broadcast

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// testCA makes a CA and issues node certificates, all in memory.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newTestCA(t *testing.T) *testCA {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "cachecast test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool}
}

func (ca *testCA) issue(t *testing.T, name string) tls.Certificate {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func TestMutualTLS(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t)
	c := &testCluster{t: t, net: newFaultNet()}
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	t.Cleanup(c.stop) // before the directories go
	for i, name := range []string{"a", "b"} {
		c.tls = NewTLS(ca.issue(t, name), ca.pool)
		c.add(name, dirs[i])
	}
	// A node with a certificate from another CA is refused both ways.
	other := newTestCA(t)
	c.tls = NewTLS(other.issue(t, "mallory"), other.pool)
	m := c.add("mallory", dirs[2])
	c.wire()

	publish(t, c.nodes[0], "k", "v")
	publish(t, m, "evil", "x")
	c.nodes = c.nodes[:2] // converge without mallory
	c.waitConverged(5 * time.Second)
	if _, ok := c.nodes[1].st.Get("prices", "evil"); ok {
		t.Fatal("a node outside the CA got a record in")
	}
	if _, ok := m.st.Get("prices", "k"); ok {
		t.Fatal("a node outside the CA got the cluster's records")
	}
	m.shutdown(t)
}

// writePEM writes cert and its key, and ca's certificate, to the files
// of a data port's TLS in dir.
func writePEM(t *testing.T, dir string, cert tls.Certificate, ca *testCA) (certFile, keyFile, caFile string) {
	t.Helper()
	kder, err := x509.MarshalECPrivateKey(cert.PrivateKey.(*ecdsa.PrivateKey))
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile, caFile = filepath.Join(dir, "node.pem"), filepath.Join(dir, "node.key"), filepath.Join(dir, "ca.pem")
	for _, f := range []struct {
		name, typ string
		der       []byte
	}{{certFile, "CERTIFICATE", cert.Certificate[0]}, {keyFile, "EC PRIVATE KEY", kder}, {caFile, "CERTIFICATE", ca.cert.Raw}} {
		if err := os.WriteFile(f.name, pem.EncodeToMemory(&pem.Block{Type: f.typ, Bytes: f.der}), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return certFile, keyFile, caFile
}

// TestTLSFilesReload: a data port's TLS follows its files on Reload, as
// server and as client: a peer of a new CA is refused before and admitted
// after the node's files move to that CA, and files that do not load keep
// the ones in force.
func TestTLSFilesReload(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	oldCA, newCA := newTestCA(t), newTestCA(t)
	files, err := LoadTLS(writePEM(t, dir, oldCA.issue(t, "node"), oldCA))
	if err != nil {
		t.Fatal(err)
	}
	peer := NewTLS(newCA.issue(t, "peer"), newCA.pool)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", files.Config())
	if err != nil {
		t.Fatal(err)
	}
	peerLn, err := tls.Listen("tcp", "127.0.0.1:0", peer)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for _, l := range []net.Listener{ln, peerLn} {
		wg.Go(func() { handshakeAll(l) })
	}
	t.Cleanup(func() { _ = ln.Close(); _ = peerLn.Close(); wg.Wait() })
	// both dials a handshake each way and says whether both passed.
	both := func() error {
		if err := handshake(ln.Addr().String(), peer); err != nil {
			return fmt.Errorf("the peer dialing the node: %w", err)
		}
		if err := handshake(peerLn.Addr().String(), files.Config()); err != nil {
			return fmt.Errorf("the node dialing the peer: %w", err)
		}
		return nil
	}
	if err := both(); err == nil {
		t.Fatal("a peer of another CA was admitted before the reload")
	}
	writePEM(t, dir, newCA.issue(t, "node"), newCA)
	if err := files.Reload(); err != nil {
		t.Fatal(err)
	}
	if err := both(); err != nil {
		t.Fatalf("after the reload: %v", err)
	}
	serial := files.Leaf().SerialNumber
	if err := os.WriteFile(filepath.Join(dir, "node.pem"), []byte("not PEM"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := files.Reload(); err == nil {
		t.Fatal("a reload of a certificate that is not PEM passed")
	}
	if err := both(); err != nil || files.Leaf().SerialNumber.Cmp(serial) != 0 {
		t.Fatalf("after a failed reload the certificate in force changed: %v", err)
	}
}

// handshakeAll completes the handshake of every connection l accepts,
// until l closes.
func handshakeAll(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		_ = c.(*tls.Conn).Handshake()
		_ = c.Close()
	}
}

// handshake dials addr with conf and completes the handshake both ways:
// a TLS 1.3 client learns that the server refused its certificate only
// when it reads.
func handshake(addr string, conf *tls.Config) error {
	c, err := tls.Dial("tcp", addr, conf)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	return nil
}
