package broadcast

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// LoadTLS builds the mutual-TLS configuration of a data port from PEM
// files: this node's certificate and key, and the CA that signs every
// node's certificate. Both directions require a certificate signed by that
// CA. Peers are dialed by address, so the certificate's names are not
// checked against the address: holding a certificate of the cluster's CA
// is what admits a node.
func LoadTLS(certFile, keyFile, caFile string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("no certificate in %s", caFile)
	}
	return NewTLS(cert, pool), nil
}

// NewTLS is LoadTLS with the certificate and the CA pool in hand.
func NewTLS(cert tls.Certificate, ca *x509.CertPool) *tls.Config {
	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		RootCAs:      ca,
		ClientCAs:    ca,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS13,
		// The server's certificate is checked against the CA below, not
		// against the dialed address (see LoadTLS).
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
