package broadcast

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
)

// TLSFiles is the mutual-TLS configuration of a data port read from PEM
// files: this node's certificate and key, and the CA that signs every
// node's certificate. Both directions require a certificate signed by that
// CA. Peers are dialed by address, so the certificate's names are not
// checked against the address: holding a certificate of the cluster's CA
// is what admits a node. Reload reads the files again (a renewed
// certificate or CA at the same paths); the handshakes that follow use
// them, the connections already open keep theirs.
type TLSFiles struct {
	certFile, keyFile, caFile string
	cur                       atomic.Pointer[tls.Config] // NewTLS of the files as last read
}

// LoadTLS reads the files of a data port's mutual TLS.
func LoadTLS(certFile, keyFile, caFile string) (*TLSFiles, error) {
	f := &TLSFiles{certFile: certFile, keyFile: keyFile, caFile: caFile}
	if err := f.Reload(); err != nil {
		return nil, err
	}
	return f, nil
}

// Reload reads the files again. When they do not load, the error says why
// and the certificate and CA in force are kept.
func (f *TLSFiles) Reload() error {
	cert, err := tls.LoadX509KeyPair(f.certFile, f.keyFile)
	if err != nil {
		return err
	}
	pem, err := os.ReadFile(f.caFile)
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return fmt.Errorf("no certificate in %s", f.caFile)
	}
	f.cur.Store(NewTLS(cert, pool))
	return nil
}

// Leaf is the certificate in force.
func (f *TLSFiles) Leaf() *x509.Certificate { return f.cur.Load().Certificates[0].Leaf }

// Config is the data port's configuration, for its listener and its
// dialer both: each handshake takes the certificate and CA in force.
func (f *TLSFiles) Config() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		// A server's handshake: NewTLS's configuration as last read.
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) { return f.cur.Load(), nil },
		// A client's handshake: the certificate in force, the server's
		// chain checked against the CA in force (see NewTLS).
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return &f.cur.Load().Certificates[0], nil
		},
		InsecureSkipVerify: true,
		VerifyPeerCertificate: func(raw [][]byte, chains [][]*x509.Certificate) error {
			return f.cur.Load().VerifyPeerCertificate(raw, chains)
		},
	}
}

// NewTLS is a data port's configuration of one certificate and one CA
// pool, fixed (TLSFiles.Config follows its files).
func NewTLS(cert tls.Certificate, ca *x509.CertPool) *tls.Config {
	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		RootCAs:      ca,
		ClientCAs:    ca,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS13,
		// The server's certificate is checked against the CA below, not
		// against the dialed address (see TLSFiles).
		InsecureSkipVerify: true,
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			return verifyChain(raw, ca)
		},
	}
}

func verifyChain(raw [][]byte, ca *x509.CertPool) error {
	if len(raw) == 0 {
		return errors.New("tls: no certificate from the peer")
	}
	leaf, err := x509.ParseCertificate(raw[0])
	if err != nil {
		return err
	}
	inter := x509.NewCertPool()
	for _, r := range raw[1:] {
		if c, err := x509.ParseCertificate(r); err == nil {
			inter.AddCert(c)
		}
	}
	_, err = leaf.Verify(x509.VerifyOptions{Roots: ca, Intermediates: inter,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
	return err
}
