package config

import (
	"strings"
	"testing"
)

func TestClusterProviderSettings(t *testing.T) {
	cfg, err := Load("", []string{
		"FROGNANO_CLUSTER_PROVIDER=etcd",
		"FROGNANO_CLUSTER_ETCD_ENDPOINTS=10.0.0.5:2379,http://etcd-1:2379",
		"FROGNANO_CLUSTER_ETCD_PREFIX=/prod",
	})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Cluster.Provider != ProviderEtcd || len(cfg.Cluster.EtcdEndpoints) != 2 || cfg.Cluster.EtcdPrefix != "/prod" || cfg.Cluster.EtcdRefresh <= 0 {
		t.Fatalf("cluster = %+v", cfg.Cluster)
	}
	if Default().Cluster.Provider != ProviderStatic {
		t.Fatalf("default provider %q", Default().Cluster.Provider)
	}

	for _, c := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"unknown provider", func(c *Config) { c.Cluster.Provider = "consul" }, `cluster.provider: "consul" is not static or etcd`},
		{"no endpoints", func(c *Config) { c.Cluster.Provider = ProviderEtcd }, "cluster.etcd_endpoints: required with cluster.provider etcd"},
		{"bad endpoint", func(c *Config) { c.Cluster.Provider, c.Cluster.EtcdEndpoints = ProviderEtcd, []string{"etcd"} }, `cluster.etcd_endpoints: "etcd" is not HOST:PORT`},
		{"path", func(c *Config) {
			c.Cluster.Provider, c.Cluster.EtcdEndpoints = ProviderEtcd, []string{"http://etcd:2379/x"}
		}, "is not HOST:PORT, http://HOST:PORT or https://HOST:PORT"},
		{"other scheme", func(c *Config) {
			c.Cluster.Provider, c.Cluster.EtcdEndpoints = ProviderEtcd, []string{"unix://etcd:2379"}
		}, "is not HOST:PORT, http://HOST:PORT or https://HOST:PORT"},
		{"seeds too", func(c *Config) {
			c.Cluster.Provider, c.Cluster.EtcdEndpoints, c.Cluster.Seeds = ProviderEtcd, []string{"etcd:2379"}, []string{"10.0.0.1:7070"}
		}, "cluster.seeds: not used with cluster.provider etcd"},
		{"prefix", func(c *Config) {
			c.Cluster.Provider, c.Cluster.EtcdEndpoints, c.Cluster.EtcdPrefix = ProviderEtcd, []string{"etcd:2379"}, "frognano/"
		}, "cluster.etcd_prefix"},
	} {
		cfg := Default()
		c.edit(&cfg)
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want %q", c.name, err, c.want)
		}
	}
}

func TestEtcdSecuritySettings(t *testing.T) {
	cfg, err := Load("", []string{
		"FROGNANO_CLUSTER_PROVIDER=etcd",
		"FROGNANO_CLUSTER_ETCD_ENDPOINTS=https://etcd-1:2379,https://etcd-2:2379",
		"FROGNANO_CLUSTER_ETCD_TLS_CA=/etc/frognano/etcd-ca.crt",
		"FROGNANO_CLUSTER_ETCD_TLS_CERT=/etc/frognano/etcd-client.crt",
		"FROGNANO_CLUSTER_ETCD_TLS_KEY=/etc/frognano/etcd-client.key",
		"FROGNANO_CLUSTER_ETCD_USERNAME=frognano",
		"FROGNANO_CLUSTER_ETCD_PASSWORD=s3cret-etcd-pw",
	})
	if err != nil {
		t.Fatal(err)
	}
	cl := cfg.Cluster
	if cl.EtcdTLSCA != "/etc/frognano/etcd-ca.crt" || cl.EtcdTLSCert != "/etc/frognano/etcd-client.crt" || cl.EtcdTLSKey != "/etc/frognano/etcd-client.key" ||
		cl.EtcdUsername != "frognano" || cl.EtcdPassword != "s3cret-etcd-pw" || !cl.EtcdTLS() {
		t.Fatalf("cluster = %+v", cl)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	out := cfg.YAML()
	if strings.Contains(out, "s3cret") || !strings.Contains(out, "etcd_password: "+Redacted) {
		t.Fatalf("printed configuration shows the etcd password:\n%s", out)
	}
	if cfg.Cluster.EtcdPassword != "s3cret-etcd-pw" {
		t.Fatal("YAML changed the configuration")
	}

	// TLS is on with an https:// endpoint, or a CA or client certificate.
	for _, c := range []struct {
		cl   Cluster
		want bool
	}{
		{Cluster{EtcdEndpoints: []string{"etcd:2379"}}, false},
		{Cluster{EtcdEndpoints: []string{"http://etcd:2379"}}, false},
		{Cluster{EtcdEndpoints: []string{"HTTPS://etcd:2379"}}, true},
		{Cluster{EtcdEndpoints: []string{"etcd:2379"}, EtcdTLSCA: "ca.crt"}, true},
		{Cluster{EtcdEndpoints: []string{"etcd:2379"}, EtcdTLSCert: "c.crt", EtcdTLSKey: "c.key"}, true},
	} {
		if got := c.cl.EtcdTLS(); got != c.want {
			t.Errorf("EtcdTLS(%+v) = %v", c.cl, got)
		}
	}

	etcd := func(c *Config) {
		c.Cluster.Provider, c.Cluster.EtcdEndpoints = ProviderEtcd, []string{"https://etcd:2379"}
	}
	for _, c := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"cert without key", func(c *Config) { etcd(c); c.Cluster.EtcdTLSCert = "c.crt" },
			"cluster.etcd_tls_cert: set without cluster.etcd_tls_key (FROGNANO_CLUSTER_ETCD_TLS_KEY)"},
		{"key without cert", func(c *Config) { etcd(c); c.Cluster.EtcdTLSKey = "c.key" },
			"cluster.etcd_tls_key: set without cluster.etcd_tls_cert (FROGNANO_CLUSTER_ETCD_TLS_CERT)"},
		{"http and https", func(c *Config) {
			etcd(c)
			c.Cluster.EtcdEndpoints = append(c.Cluster.EtcdEndpoints, "http://etcd-2:2379")
		},
			"cluster.etcd_endpoints: some are http:// and some https://"},
		{"http with a CA", func(c *Config) {
			etcd(c)
			c.Cluster.EtcdEndpoints, c.Cluster.EtcdTLSCA = []string{"http://etcd:2379"}, "ca.crt"
		},
			"cluster.etcd_endpoints: http:// endpoints are dialled without TLS"},
		{"password and file", func(c *Config) {
			etcd(c)
			c.Cluster.EtcdUsername, c.Cluster.EtcdPassword, c.Cluster.EtcdPasswordFile = "u", "p", "/pw"
		}, "cluster.etcd_password, cluster.etcd_password_file: both set"},
		{"password without user", func(c *Config) { etcd(c); c.Cluster.EtcdPasswordFile = "/pw" },
			"cluster.etcd_username: required with cluster.etcd_password or cluster.etcd_password_file"},
		{"user without password", func(c *Config) { etcd(c); c.Cluster.EtcdUsername = "frognano" },
			"cluster.etcd_password: required with cluster.etcd_username: set FROGNANO_CLUSTER_ETCD_PASSWORD or cluster.etcd_password_file"},
	} {
		cfg := Default()
		c.edit(&cfg)
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want %q", c.name, err, c.want)
		}
	}
}
