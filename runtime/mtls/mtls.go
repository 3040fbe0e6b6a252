package mtls

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/frognano/frognano/runtime/config"
)

// Credentials are a node's (or client's) side of mutual TLS.
type Credentials struct {
	pool *x509.CertPool
	cert tls.Certificate
	// Leaf is the certificate presented, for logs.
	Leaf *x509.Certificate
}

// Load reads the files r names and checks that they fit together: the key
// is the certificate's, the certificate is signed by the CA, usable for
// both server and client authentication, and valid now. Each error names
// the setting to fix.
func Load(r config.Remote) (*Credentials, error) {
	roots, err := ReadCerts(r.TLSCA)
	if err != nil {
		return nil, fmt.Errorf("remote.tls_ca: %w", err)
	}
	pool := x509.NewCertPool()
	for _, c := range roots {
		pool.AddCert(c)
	}
	pair, err := tls.LoadX509KeyPair(r.TLSCert, r.TLSKey)
	if err != nil {
		return nil, fmt.Errorf("remote.tls_cert %s, remote.tls_key %s: %w", r.TLSCert, r.TLSKey, err)
	}
	leaf := pair.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return nil, fmt.Errorf("remote.tls_cert: %w", err)
		}
	}
	inter := x509.NewCertPool()
	for _, der := range pair.Certificate[1:] {
		if c, err := x509.ParseCertificate(der); err == nil {
			inter.AddCert(c)
		}
	}
	for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
			return nil, fmt.Errorf("remote.tls_cert %s (%q, valid %s to %s) does not verify against remote.tls_ca %s for %s: %w",
				r.TLSCert, leaf.Subject.CommonName, leaf.NotBefore.Format(time.DateOnly), leaf.NotAfter.Format(time.DateOnly),
				r.TLSCA, usageName(usage), err)
		}
	}
	return &Credentials{pool: pool, cert: pair, Leaf: leaf}, nil
}

func usageName(u x509.ExtKeyUsage) string {
	if u == x509.ExtKeyUsageServerAuth {
		return "server authentication"
	}
	return "client authentication"
}

// ServerConfig accepts only clients presenting a certificate signed by the
// CA (TLS 1.3).
func (c *Credentials) ServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{c.cert},
		ClientCAs:    c.pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
	}
}

// ClientConfig presents the certificate and accepts only servers whose
// certificate is signed by the CA and names the host dialled (gRPC sets
// the server name from the address).
func (c *Credentials) ClientConfig() *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{c.cert},
		RootCAs:      c.pool,
	}
}

// RemoteOptions are the protoactor-go remoting options for r: gRPC server
// credentials that require and verify client certificates, and dial
// credentials that present ours and verify the server. Without TLS
// configured they are none (plaintext, protoactor's default).
func RemoteOptions(r config.Remote) ([]remote.ConfigOption, *Credentials, error) {
	if !r.TLS() {
		return nil, nil, nil
	}
	if r.TLSCA == "" || r.TLSCert == "" || r.TLSKey == "" {
		return nil, nil, errors.New("remote: mutual TLS needs all of remote.tls_ca, remote.tls_cert and remote.tls_key")
	}
	c, err := Load(r)
	if err != nil {
		return nil, nil, err
	}
	return []remote.ConfigOption{
		remote.WithServerOptions(grpc.Creds(credentials.NewTLS(c.ServerConfig()))),
		remote.WithDialOptions(grpc.WithTransportCredentials(credentials.NewTLS(c.ClientConfig()))),
	}, c, nil
}

// CheckHost fails when the certificate does not name host, the host others
// dial this node at: they would refuse the connection.
func (c *Credentials) CheckHost(host string) error {
	if err := c.Leaf.VerifyHostname(host); err != nil {
		return fmt.Errorf("remote.tls_cert: the certificate (%q) does not name %s, the host other nodes dial this node at, so they would refuse it "+
			"(it names %s): issue it with `frognano cert node --host %s,…`", c.Leaf.Subject.CommonName, host, c.names(), host)
	}
	return nil
}

func (c *Credentials) names() string {
	var names []string
	for _, ip := range c.Leaf.IPAddresses {
		names = append(names, ip.String())
	}
	names = append(names, c.Leaf.DNSNames...)
	if len(names) == 0 {
		return "no host"
	}
	return strings.Join(names, ", ")
}
