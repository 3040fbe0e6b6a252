// Package mtls is mutual TLS for actor remoting: a small certificate
// authority for a cluster (what `frognano cert` runs) and the TLS settings
// a node and the CLI use on protoactor-go's gRPC connections, from those
// certificates or the user's own.
package mtls

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/frognano/frognano/runtime/config"
)

// File names inside the directories `frognano cert` writes.
const (
	CACertFile   = "ca.crt"
	CAKeyFile    = "ca.key"
	NodeCertFile = "node.crt"
	NodeKeyFile  = "node.key"
)

// ErrExists means a key or certificate is already where one would be
// written, and overwriting it was not asked for.
var ErrExists = errors.New("already exists")

// CAOptions describe a new cluster CA.
type CAOptions struct {
	// Name goes into the CA's common name ("frognano cluster CA: NAME").
	Name string
	// Validity is how long the CA is valid (0: 10 years).
	Validity time.Duration
	// Force overwrites an existing CA in the directory.
	Force bool
	// Now is the start of validity (zero: time.Now()).
	Now time.Time
}

// NewCA makes a cluster CA in dir: an ECDSA P-256 key (ca.key, mode 0600)
// and its self-signed certificate (ca.crt), allowed to sign node
// certificates and nothing below them.
func NewCA(dir string, o CAOptions) error {
	if o.Validity == 0 {
		o.Validity = 10 * 365 * 24 * time.Hour
	}
	if o.Validity < 0 {
		return errors.New("validity must be positive")
	}
	if o.Now.IsZero() {
		o.Now = time.Now()
	}
	certPath, keyPath := filepath.Join(dir, CACertFile), filepath.Join(dir, CAKeyFile)
	if err := refuseOverwrite(o.Force, "every certificate the old CA signed must then be reissued", keyPath, certPath); err != nil {
		return err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	serial, err := serialNumber()
	if err != nil {
		return err
	}
	cn := "frognano cluster CA"
	if o.Name != "" {
		cn += ": " + o.Name
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: cn, Organization: []string{"frognano"}},
		NotBefore:             o.Now.Add(-5 * time.Minute), // clocks of a cluster's machines differ a little
		NotAfter:              o.Now.Add(o.Validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLen:            0,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return err
	}
	return writePair(dir, certPath, keyPath, der, key, o.Force)
}

// NodeOptions describe a node certificate.
type NodeOptions struct {
	// CADir holds ca.crt and ca.key (from NewCA).
	CADir string
	// Name is the node's common name.
	Name string
	// Hosts are the IP addresses and DNS names other nodes and the CLI dial
	// this node at; they become the certificate's subject alternative names.
	Hosts []string
	// Validity is how long the certificate is valid (0: one year), capped
	// at the CA's own end.
	Validity time.Duration
	// Force overwrites an existing key and certificate in the directory.
	Force bool
	// Now is the start of validity (zero: time.Now()).
	Now time.Time
}

// IssueNode writes into dir a new ECDSA P-256 key (node.key, mode 0600), a
// certificate for it signed by the CA in o.CADir for both server and client
// use (node.crt), and a copy of the CA's certificate (ca.crt), the three
// files remote.tls_key, remote.tls_cert and remote.tls_ca name.
func IssueNode(dir string, o NodeOptions) error {
	if o.Validity == 0 {
		o.Validity = 365 * 24 * time.Hour
	}
	if o.Validity < 0 {
		return errors.New("validity must be positive")
	}
	if o.Now.IsZero() {
		o.Now = time.Now()
	}
	if strings.TrimSpace(o.Name) == "" {
		return errors.New("a node certificate needs a name")
	}
	if len(o.Name) > 64 {
		return fmt.Errorf("name %q is longer than 64 characters", clip(o.Name))
	}
	if len(o.Hosts) == 0 {
		return errors.New("a node certificate needs at least one host (an IP address or DNS name it is dialled at)")
	}
	var ips []net.IP
	var names []string
	for _, h := range o.Hosts {
		h = strings.TrimSpace(h)
		if ip := net.ParseIP(h); ip != nil {
			ips = append(ips, ip)
			continue
		}
		if !dnsName(h) {
			return fmt.Errorf("host %q is not an IP address or a DNS name", clip(h))
		}
		names = append(names, h)
	}
	ca, caKey, err := loadCA(o.CADir)
	if err != nil {
		return err
	}
	if !o.Now.Before(ca.NotAfter) {
		return fmt.Errorf("the CA in %s expired on %s", o.CADir, ca.NotAfter.Format(time.DateOnly))
	}
	notAfter := o.Now.Add(o.Validity)
	if notAfter.After(ca.NotAfter) {
		notAfter = ca.NotAfter
	}
	certPath, keyPath := filepath.Join(dir, NodeCertFile), filepath.Join(dir, NodeKeyFile)
	caCopy := filepath.Join(dir, CACertFile)
	sameDir, err := samePath(caCopy, filepath.Join(o.CADir, CACertFile))
	if err != nil {
		return err
	}
	if err := refuseOverwrite(o.Force, "the node using them needs the new files and a restart", keyPath, certPath); err != nil {
		return err
	}
	if !sameDir {
		if err := refuseOtherCA(caCopy, ca, o.Force); err != nil {
			return err
		}
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	serial, err := serialNumber()
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: o.Name, Organization: []string{"frognano"}},
		NotBefore:             o.Now.Add(-5 * time.Minute),
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
		IPAddresses:           ips,
		DNSNames:              names,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return err
	}
	if err := writePair(dir, certPath, keyPath, der, key, o.Force); err != nil {
		return err
	}
	if !sameDir {
		// Rewritten when it is already this CA's certificate.
		return writeAtomic(caCopy, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Raw}), 0o644, true)
	}
	return nil
}

// loadCA reads and checks the CA key pair in dir.
func loadCA(dir string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	certPath, keyPath := filepath.Join(dir, CACertFile), filepath.Join(dir, CAKeyFile)
	certs, err := ReadCerts(certPath)
	if err != nil {
		return nil, nil, fmt.Errorf("CA certificate: %w (make a CA with `frognano cert ca --out %s`)", err, dir)
	}
	ca := certs[0]
	if !ca.IsCA || ca.KeyUsage&x509.KeyUsageCertSign == 0 {
		return nil, nil, fmt.Errorf("%s is not a CA certificate", certPath)
	}
	data, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, nil, fmt.Errorf("CA key: %w", err)
	}
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, nil, fmt.Errorf("%s holds no PEM key", keyPath)
	}
	var key *ecdsa.PrivateKey
	switch block.Type {
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(block.Bytes)
	case "PRIVATE KEY":
		var k any
		if k, err = x509.ParsePKCS8PrivateKey(block.Bytes); err == nil {
			var ok bool
			if key, ok = k.(*ecdsa.PrivateKey); !ok {
				err = fmt.Errorf("a %T, not an ECDSA key", k)
			}
		}
	default:
		err = fmt.Errorf("PEM block %q is not an ECDSA private key", block.Type)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", keyPath, err)
	}
	if pub, ok := ca.PublicKey.(*ecdsa.PublicKey); !ok || !pub.Equal(&key.PublicKey) {
		return nil, nil, fmt.Errorf("%s is not the key of %s", keyPath, certPath)
	}
	return ca, key, nil
}

// ReadCerts parses every CERTIFICATE block of a PEM file; a file with none
// is an error naming it.
func ReadCerts(path string) ([]*x509.Certificate, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var certs []*x509.Certificate
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	return certs, nil
}

// refuseOverwrite fails when any of paths exists, unless force; consequence
// says what replacing it means.
func refuseOverwrite(force bool, consequence string, paths ...string) error {
	if force {
		return nil
	}
	for _, p := range paths {
		if _, err := os.Lstat(p); err == nil {
			return fmt.Errorf("%s %w: pass --force to replace it (%s)", p, ErrExists, consequence)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// refuseOtherCA fails when path already holds a certificate that is not ca,
// unless force: a directory's ca.crt is what the node trusts.
func refuseOtherCA(path string, ca *x509.Certificate, force bool) error {
	if force {
		return nil
	}
	old, err := ReadCerts(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil || len(old) != 1 || !old[0].Equal(ca) {
		return fmt.Errorf("%s %w and is not this CA's certificate: pass --force to replace it", path, ErrExists)
	}
	return nil
}

func samePath(a, b string) (bool, error) {
	aa, err := filepath.Abs(a)
	if err != nil {
		return false, err
	}
	bb, err := filepath.Abs(b)
	if err != nil {
		return false, err
	}
	if aa == bb {
		return true, nil
	}
	sa, errA := os.Stat(aa)
	sb, errB := os.Stat(bb)
	return errA == nil && errB == nil && os.SameFile(sa, sb), nil
}

// writePair writes the key (0600) and then the certificate (0644) into dir,
// each through a temporary file renamed into place, so a reader never sees
// half a key and a key is never readable by others, whatever the umask.
func writePair(dir, certPath, keyPath string, der []byte, key *ecdsa.PrivateKey, force bool) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := writeAtomic(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600, force); err != nil {
		return err
	}
	return writeAtomic(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644, force)
}

// writeAtomic writes data to path through a temporary file: renamed over
// an existing file when force, otherwise linked into place, which fails
// when path has appeared meanwhile.
func writeAtomic(path string, data []byte, mode os.FileMode, force bool) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if force {
		return os.Rename(tmp, path)
	}
	if err := os.Link(tmp, path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("%s %w: pass --force to replace it", path, ErrExists)
		}
		return err
	}
	return nil
}

func serialNumber() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
}

// dnsName reports whether s is a plain DNS name (labels of letters, digits
// and hyphens; a leading "*." wildcard is not allowed).
func dnsName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for _, label := range strings.Split(strings.TrimSuffix(s, "."), ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-') {
				return false
			}
		}
	}
	return true
}

func clip(s string) string { return config.Clip(s, 80) }
