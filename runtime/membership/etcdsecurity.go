package membership

// The etcd client's security: TLS (the server verified against
// cluster.etcd_tls_ca or the system's roots, and a client certificate for
// etcd's --client-cert-auth) and etcd's user auth (user name and
// password). Everything goes through go.etcd.io/etcd/client/v3's own
// support (clientv3.Config's TLS, Username and Password); what is here
// reads and checks the files at start, and turns a refusal by etcd into
// one error naming the setting to fix.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/frognano/frognano/runtime/config"
	"github.com/frognano/frognano/runtime/mtls"
)

// EtcdSecurity is how the etcd client proves itself and checks etcd; the
// zero value is plaintext without auth. TLS is on when an endpoint is
// https:// or CAFile, CertFile or KeyFile is set.
type EtcdSecurity struct {
	// CAFile is a PEM file of the CA certificate(s) that etcd's server
	// certificate must verify against; empty means the system's roots.
	CAFile string
	// CertFile and KeyFile are the PEM client certificate and key
	// presented to etcd; both or neither.
	CertFile, KeyFile string
	// Username and Password authenticate to etcd's user auth; Password,
	// when empty, is read from PasswordFile.
	Username, Password, PasswordFile string
}

// settings are o's endpoints and security as the configuration holds them.
func (o EtcdOptions) settings() config.Cluster {
	s := o.Security
	return config.Cluster{
		EtcdEndpoints:    o.Endpoints,
		EtcdTLSCA:        s.CAFile,
		EtcdTLSCert:      s.CertFile,
		EtcdTLSKey:       s.KeyFile,
		EtcdUsername:     s.Username,
		EtcdPassword:     s.Password,
		EtcdPasswordFile: s.PasswordFile,
	}
}

// clientSecurity reads the files o.Security names and returns the client's
// TLS configuration (nil without TLS), its user name and password, and
// the client certificate presented (nil without one). Each error names
// its setting.
func (o EtcdOptions) clientSecurity(now time.Time) (cfg *tls.Config, user, password string, leaf *x509.Certificate, err error) {
	s := o.Security
	// The rules config.Validate applies, for callers that did not.
	if errs := config.CheckEtcdSecurity(o.settings()); len(errs) > 0 {
		return nil, "", "", nil, errs[0]
	}
	if o.settings().EtcdTLS() {
		cfg = &tls.Config{MinVersion: tls.VersionTLS12}
		if s.CAFile != "" {
			pool, err := readCertPool(s.CAFile)
			if err != nil {
				return nil, "", "", nil, fmt.Errorf("cluster.etcd_tls_ca: %w", err)
			}
			cfg.RootCAs = pool
		}
		if s.CertFile != "" {
			pair, err := tls.LoadX509KeyPair(s.CertFile, s.KeyFile)
			if err != nil {
				return nil, "", "", nil, fmt.Errorf("cluster.etcd_tls_cert %s, cluster.etcd_tls_key %s: %w", s.CertFile, s.KeyFile, err)
			}
			leaf = pair.Leaf
			if leaf == nil {
				if leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
					return nil, "", "", nil, fmt.Errorf("cluster.etcd_tls_cert %s: %w", s.CertFile, err)
				}
			}
			if now.Before(leaf.NotBefore) || now.After(leaf.NotAfter) {
				return nil, "", "", nil, fmt.Errorf("cluster.etcd_tls_cert %s (%q) is not valid now: valid from %s to %s",
					s.CertFile, leaf.Subject.CommonName, leaf.NotBefore.UTC().Format(time.RFC3339), leaf.NotAfter.UTC().Format(time.RFC3339))
			}
			if !clientUsage(leaf) {
				return nil, "", "", nil, fmt.Errorf("cluster.etcd_tls_cert %s (%q) is not for client authentication (its extended key usage lacks clientAuth), so etcd would refuse it",
					s.CertFile, leaf.Subject.CommonName)
			}
			cfg.Certificates = []tls.Certificate{pair}
		}
	}
	user, password = s.Username, s.Password
	if s.PasswordFile != "" {
		data, err := os.ReadFile(s.PasswordFile)
		if err != nil {
			return nil, "", "", nil, fmt.Errorf("cluster.etcd_password_file: %w", err)
		}
		password = strings.TrimSuffix(strings.TrimSuffix(string(data), "\n"), "\r")
		if password == "" || strings.ContainsAny(password, "\r\n") {
			return nil, "", "", nil, fmt.Errorf("cluster.etcd_password_file %s: must hold the password on one line", s.PasswordFile)
		}
	}
	return cfg, user, password, leaf, nil
}

// clientUsage reports whether a certificate may authenticate a TLS client.
func clientUsage(c *x509.Certificate) bool {
	if len(c.ExtKeyUsage) == 0 {
		return true // no restriction
	}
	for _, u := range c.ExtKeyUsage {
		if u == x509.ExtKeyUsageClientAuth || u == x509.ExtKeyUsageAny {
			return true
		}
	}
	return false
}

// readCertPool reads every CERTIFICATE block of a PEM file into a pool.
func readCertPool(path string) (*x509.CertPool, error) {
	certs, err := mtls.ReadCerts(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	for _, c := range certs {
		pool.AddCert(c)
	}
	return pool, nil
}

// describe is the connection's security as logged at start: never the
// password.
func (p *Etcd) describe() (tlsDesc, auth string) {
	switch {
	case p.tls == nil:
		tlsDesc = "off"
	case p.leaf != nil:
		tlsDesc = fmt.Sprintf("mutual (client certificate %q)", p.leaf.Subject.CommonName)
	default:
		tlsDesc = "server verified"
	}
	if p.tls != nil {
		if p.o.Security.CAFile != "" {
			tlsDesc += ", CA " + p.o.Security.CAFile
		} else {
			tlsDesc += ", system roots"
		}
	}
	auth = "none"
	if p.user != "" {
		auth = "user " + p.user
	}
	return tlsDesc, auth
}

// explain turns an error of the first contact with etcd into one error
// naming the setting to fix: a refused user or password, a missing
// permission, or, when etcd did not answer, the TLS problem a handshake
// with each endpoint shows (a server certificate that does not verify, a
// client certificate etcd requires or refuses, TLS on one side only).
func (p *Etcd) explain(ctx context.Context, err error) error {
	eps := strings.Join(p.o.Endpoints, ",")
	switch {
	case errors.Is(err, rpctypes.ErrAuthFailed):
		return fmt.Errorf("cluster.etcd_username, cluster.etcd_password: etcd at %s refused user %q: wrong user name or password (%v)", eps, p.user, err)
	case errors.Is(err, rpctypes.ErrUserEmpty) || errors.Is(err, rpctypes.ErrInvalidAuthToken) || errors.Is(err, rpctypes.ErrInvalidAuthMgmt):
		return fmt.Errorf("cluster.etcd_username: etcd at %s has authentication enabled: set cluster.etcd_username and cluster.etcd_password (%s) or cluster.etcd_password_file (%v)",
			eps, config.EnvName("cluster.etcd_password"), err)
	case errors.Is(err, rpctypes.ErrPermissionDenied):
		who := "this node's etcd user"
		if p.user != "" {
			who = fmt.Sprintf("etcd user %q", p.user)
		}
		return fmt.Errorf("cluster.etcd_username: %s may not read and write %s at %s: grant it a role with readwrite on that prefix "+
			"(etcdctl role grant-permission ROLE --prefix=true readwrite %s) (%v)", who, p.o.membersKey(), eps, p.o.Prefix+"/", err)
	}
	for _, ep := range p.o.Endpoints {
		if cause := p.probeTLS(ctx, ep); cause != nil {
			return cause
		}
	}
	if errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("no answer within %s", p.o.DialTimeout)
	}
	return fmt.Errorf("cluster.etcd_endpoints %s: etcd does not answer (is it running, and reachable from this node?): %w", eps, err)
}

// probeTLS opens one TLS connection to ep the way the client does (or,
// without TLS, checks whether etcd expects it) and returns the problem it
// shows, or nil where TLS is not what fails.
func (p *Etcd) probeTLS(ctx context.Context, ep string) error {
	addr := ep
	if strings.Contains(ep, "://") {
		u, err := url.Parse(ep)
		if err != nil {
			return nil
		}
		addr = u.Host
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	var d net.Dialer
	raw, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil // nothing listens: not a TLS problem
	}
	defer raw.Close()
	deadline, _ := ctx.Deadline()
	raw.SetDeadline(deadline)
	if p.tls == nil {
		c := tls.Client(raw, &tls.Config{InsecureSkipVerify: true, ServerName: host})
		if c.HandshakeContext(ctx) == nil {
			return fmt.Errorf("cluster.etcd_endpoints %s: etcd serves TLS there, and this node dials it without: use https://%s and set cluster.etcd_tls_ca "+
				"(and cluster.etcd_tls_cert, cluster.etcd_tls_key if etcd requires client certificates)", ep, addr)
		}
		return nil
	}
	cfg := p.tls.Clone()
	cfg.ServerName = host
	c := tls.Client(raw, cfg)
	err = c.HandshakeContext(ctx)
	if err == nil {
		// Under TLS 1.3 the server checks the client's certificate after
		// the client's side of the handshake is done: a refusal is the
		// alert the first read returns. etcd answers GET /version on its
		// client port.
		if _, err = fmt.Fprintf(c, "GET /version HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", addr); err == nil {
			_, err = c.Read(make([]byte, 1))
		}
		if err == nil {
			return nil
		}
	}
	var (
		unknown  x509.UnknownAuthorityError
		invalid  x509.CertificateInvalidError
		hostname x509.HostnameError
		noRoots  x509.SystemRootsError
		header   tls.RecordHeaderError
		op       *net.OpError
	)
	roots := "the system's root CAs"
	if p.o.Security.CAFile != "" {
		roots = p.o.Security.CAFile
	}
	switch {
	case errors.As(err, &hostname):
		return fmt.Errorf("cluster.etcd_endpoints %s: etcd's server certificate does not name %s (%v): dial etcd at a name or address its certificate carries", ep, host, err)
	case errors.As(err, &unknown) || errors.As(err, &invalid) || errors.As(err, &noRoots):
		return fmt.Errorf("cluster.etcd_tls_ca: etcd's server certificate at %s does not verify against %s (%v): set cluster.etcd_tls_ca to the CA that signs etcd's certificate", ep, roots, err)
	case errors.As(err, &header):
		return fmt.Errorf("cluster.etcd_endpoints %s: etcd does not serve TLS there, and this node dials it with TLS (cluster.etcd_tls_* set or https://): "+
			"turn on TLS in etcd (--cert-file, --key-file) or dial it without", ep)
	case errors.As(err, &op) && op.Op == "remote error":
		if p.leaf == nil {
			return fmt.Errorf("cluster.etcd_tls_cert: etcd at %s requires a client certificate (%v): set cluster.etcd_tls_cert and cluster.etcd_tls_key "+
				"to a certificate signed by a CA in etcd's --trusted-ca-file", ep, err)
		}
		return fmt.Errorf("cluster.etcd_tls_cert: etcd at %s refused this node's client certificate %s (%q, issued by %q) (%v): "+
			"it must be signed by a CA in etcd's --trusted-ca-file", ep, p.o.Security.CertFile, p.leaf.Subject.CommonName, p.leaf.Issuer.CommonName, err)
	}
	return nil
}
