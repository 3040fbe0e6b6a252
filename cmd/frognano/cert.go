package main

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/frognano/frognano/runtime/config"
	"github.com/frognano/frognano/runtime/mtls"
)

func certCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cert",
		Short: "Make the certificates that nodes authenticate each other with (mutual TLS on actor remoting)",
		Long: `cert makes a small certificate authority for a cluster and certificates for
its nodes, for mutual TLS on actor remoting (node.remote_addr, gRPC). A node
with remote.tls_ca, remote.tls_cert and remote.tls_key set accepts only
connections that present a certificate signed by that CA, and checks that
every node it dials presents one that names the host it dialled. Without
them, anyone who can reach the remoting port can spawn actors (sandbox
workers included) and send the node any message, which is why a node
refuses to bind remoting off loopback without TLS.

  frognano cert ca --out ca/
  frognano cert node --ca ca/ --name node-a --host 10.0.0.1,127.0.0.1 --out node-a/
  frognano cert node --ca ca/ --name node-b --host 10.0.0.2,127.0.0.1 --out node-b/

Copy node-a/ to node-a's machine and start it with

  frognano-node --remote-addr 10.0.0.1:7071 --remote-tls-ca node-a/ca.crt \
    --remote-tls-cert node-a/node.crt --remote-tls-key node-a/node.key …

(or remote: {tls_ca: …, tls_cert: …, tls_key: …} in its config file, or
FROGNANO_REMOTE_TLS_CA, FROGNANO_REMOTE_TLS_CERT, FROGNANO_REMOTE_TLS_KEY).
The CLI (frognano --node …) needs the same three settings; it listens on
127.0.0.1 for the node's answers, so its certificate must name 127.0.0.1
(a node certificate issued with 127.0.0.1 among its hosts does).

Keep ca/ca.key off the nodes: whoever holds it can make certificates the
whole cluster trusts. Certificates and CAs of your own work too: any PEM CA
bundle, certificate and key (RSA, ECDSA or Ed25519) whose certificate the CA
signs for server and client authentication.`,
	}
	cmd.AddCommand(certCACmd(), certNodeCmd())
	return cmd
}

func certCACmd() *cobra.Command {
	var out, name string
	var days int
	var force bool
	cmd := &cobra.Command{
		Use:   "ca --out DIR",
		Short: "Make a cluster CA: DIR/ca.key (ECDSA P-256, mode 0600) and DIR/ca.crt",
		Long: `ca makes a new certificate authority for one cluster: an ECDSA P-256 key in
DIR/ca.key (mode 0600) and its self-signed certificate in DIR/ca.crt. It
signs node certificates (frognano cert node --ca DIR) and nothing else. It
refuses to overwrite an existing CA unless --force is given; a new CA
invalidates every certificate the old one signed.`,
		Example: "  frognano cert ca --out /etc/frognano/ca",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out == "" {
				return errors.New("--out DIR is required: the directory to write ca.crt and ca.key into")
			}
			if days <= 0 {
				return fmt.Errorf("--days must be positive, not %d", days)
			}
			if err := mtls.NewCA(out, mtls.CAOptions{Name: name, Validity: time.Duration(days) * 24 * time.Hour, Force: force}); err != nil {
				return fmt.Errorf("cert ca: %w", err)
			}
			crt := filepath.Join(out, mtls.CACertFile)
			c, err := readCert(crt)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "wrote %s (mode 0600: keep it off the nodes) and %s\n", filepath.Join(out, mtls.CAKeyFile), crt)
			fmt.Fprintf(w, "CA %q, valid until %s\n", c.Subject.CommonName, c.NotAfter.Format(time.DateOnly))
			fmt.Fprintf(w, "next: frognano cert node --ca %s --name NODE --host HOST[,HOST] --out DIR\n", out)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&out, "out", "", "directory to write ca.crt and ca.key into (created if missing)")
	f.StringVar(&name, "name", "", "cluster name put into the CA's common name")
	f.IntVar(&days, "days", 3650, "days the CA is valid")
	f.BoolVar(&force, "force", false, "replace an existing CA in --out (every certificate it signed must then be reissued)")
	return cmd
}

func certNodeCmd() *cobra.Command {
	var caDir, name, out string
	var hosts []string
	var days int
	var force bool
	cmd := &cobra.Command{
		Use:   "node --ca DIR --name NODE --host HOST[,HOST] --out DIR",
		Short: "Issue a node certificate signed by the cluster CA, for server and client use",
		Long: `node issues a certificate for one node (or one CLI user) signed by the CA in
--ca: a new ECDSA P-256 key in OUT/node.key (mode 0600), the certificate in
OUT/node.crt, usable for both server and client authentication, and a copy
of the CA's certificate in OUT/ca.crt, so that OUT holds the three files
remote.tls_ca, remote.tls_cert and remote.tls_key name.

--host lists every IP address and DNS name other nodes and the CLI dial this
node's remoting at: the host of its --advertise address, or else the IP its
--remote-addr binds (a host name there is advertised as the IP it resolves
to); a peer refuses a
node whose certificate does not name the host it dialled, and a node refuses
to start with a certificate that does not name its own. Add 127.0.0.1 when
the CLI on that machine uses the same files: the node answers the CLI on
127.0.0.1. It refuses to overwrite an existing key or certificate in OUT
unless --force is given.`,
		Example: "  frognano cert node --ca /etc/frognano/ca --name node-a --host 10.0.0.1,node-a.internal,127.0.0.1 --out node-a/",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var missing []string
			for flag, v := range map[string]string{"--ca": caDir, "--name": name, "--out": out} {
				if v == "" {
					missing = append(missing, flag)
				}
			}
			if len(hosts) == 0 {
				missing = append(missing, "--host")
			}
			if len(missing) > 0 {
				slices.Sort(missing)
				return fmt.Errorf("cert node: %s required (see frognano cert node --help)", strings.Join(missing, ", "))
			}
			if days <= 0 {
				return fmt.Errorf("--days must be positive, not %d", days)
			}
			err := mtls.IssueNode(out, mtls.NodeOptions{CADir: caDir, Name: name, Hosts: hosts, Validity: time.Duration(days) * 24 * time.Hour, Force: force})
			if err != nil {
				return fmt.Errorf("cert node: %w", err)
			}
			crt := filepath.Join(out, mtls.NodeCertFile)
			c, err := readCert(crt)
			if err != nil {
				return err
			}
			printNodeFiles(cmd.OutOrStdout(), out, c)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&caDir, "ca", "", "directory holding the CA's ca.crt and ca.key (from frognano cert ca)")
	f.StringVar(&name, "name", "", "the node's name (the certificate's common name)")
	f.StringSliceVar(&hosts, "host", nil, "IP addresses and DNS names the node is dialled at, comma-separated or repeated")
	f.StringVar(&out, "out", "", "directory to write node.key, node.crt and ca.crt into (created if missing)")
	f.IntVar(&days, "days", 365, "days the certificate is valid (at most until the CA expires)")
	f.BoolVar(&force, "force", false, "replace an existing key and certificate in --out")
	return cmd
}

func printNodeFiles(w io.Writer, out string, c *x509.Certificate) {
	abs, err := filepath.Abs(out)
	if err != nil {
		abs = out
	}
	var names []string
	for _, ip := range c.IPAddresses {
		names = append(names, ip.String())
	}
	names = append(names, c.DNSNames...)
	fmt.Fprintf(w, "wrote %s (mode 0600), %s and %s\n", filepath.Join(out, mtls.NodeKeyFile), filepath.Join(out, mtls.NodeCertFile), filepath.Join(out, mtls.CACertFile))
	fmt.Fprintf(w, "certificate %q for %s, valid until %s\n", c.Subject.CommonName, strings.Join(names, ", "), c.NotAfter.Format(time.DateOnly))
	fmt.Fprintf(w, "configure the node (or the CLI) with\n  remote:\n    tls_ca: %s\n    tls_cert: %s\n    tls_key: %s\n",
		filepath.Join(abs, mtls.CACertFile), filepath.Join(abs, mtls.NodeCertFile), filepath.Join(abs, mtls.NodeKeyFile))
	fmt.Fprintf(w, "or %s, %s and %s\n", config.EnvName("remote.tls_ca"), config.EnvName("remote.tls_cert"), config.EnvName("remote.tls_key"))
}

func readCert(path string) (*x509.Certificate, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	return x509.ParseCertificate(block.Bytes)
}
