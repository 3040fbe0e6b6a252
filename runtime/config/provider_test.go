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
		{"https", func(c *Config) {
			c.Cluster.Provider, c.Cluster.EtcdEndpoints = ProviderEtcd, []string{"https://etcd:2379"}
		}, "TLS to etcd is not supported yet"},
		{"path", func(c *Config) {
			c.Cluster.Provider, c.Cluster.EtcdEndpoints = ProviderEtcd, []string{"http://etcd:2379/x"}
		}, "is not HOST:PORT or http://HOST:PORT"},
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
