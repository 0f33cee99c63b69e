package broadcast

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
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
