package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "frognano.yaml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestDefaultIsValid(t *testing.T) {
	cfg := Default()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("default config invalid: %v", err)
	}
	for _, m := range []string{"http://mirror.example/debian", "https://mirror.example:8443/debian/", "file:///srv/debian"} {
		cfg.Image.DebianMirror = m
		if err := cfg.Validate(); err != nil {
			t.Errorf("mirror %s rejected: %v", m, err)
		}
	}
}

func TestPrecedence(t *testing.T) {
	path := writeFile(t, `
node:
  data_dir: /from/file
  http_addr: 127.0.0.1:9000
cluster:
  seeds: [a:1, b:2]
  heartbeat: 250ms
image:
  debian_mirror: http://file.example/debian
`)
	cfg, err := Load(path, []string{"FROGNANO_NODE_HTTP_ADDR=127.0.0.1:9100", "FROGNANO_CLUSTER_FAILURE_TIMEOUT=7s", "FROGNANO_IMAGE_DEBIAN_MIRROR=http://mirror.example/debian", "PATH=/bin"})
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Set("node.remote_addr", "127.0.0.1:9201"); err != nil { // a flag
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		got, want any
	}{
		{"file beats default", cfg.Node.DataDir, "/from/file"},
		{"env beats file", cfg.Node.HTTPAddr, "127.0.0.1:9100"},
		{"flag beats default", cfg.Node.RemoteAddr, "127.0.0.1:9201"},
		{"list from file", strings.Join(cfg.Cluster.Seeds, ","), "a:1,b:2"},
		{"duration from file", cfg.Cluster.Heartbeat, 250 * time.Millisecond},
		{"duration from env", cfg.Cluster.FailureTimeout, 7 * time.Second},
		{"untouched default", cfg.Containerd.Namespace, "frognano"},
		{"mirror: env beats file", cfg.Image.DebianMirror, "http://mirror.example/debian"},
		{"no mirror by default (the host's apt sources)", Default().Image.DebianMirror, ""},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: got %v, want %v", tt.name, tt.got, tt.want)
		}
	}
}

func TestBadInput(t *testing.T) {
	tests := []struct {
		name    string
		file    string
		env     []string
		wantErr string
	}{
		{"unknown key", "node:\n  data_dri: /x\n", nil, "data_dri"},
		{"malformed yaml", "node: [unclosed\n", nil, "yaml"},
		{"wrong type", "cluster:\n  heartbeat: fast\n", nil, "line 2"},
		{"unknown env var", "", []string{"FROGNANO_NODE_DATADIR=/x"}, "FROGNANO_NODE_DATADIR"},
		{"bad env duration", "", []string{"FROGNANO_CLUSTER_HEARTBEAT=soon"}, "FROGNANO_CLUSTER_HEARTBEAT"},
		{"unknown env var in a section", "", []string{"FROGNANO_LOG_LEVLE=debug", "FROGNANO_MODELS=/elsewhere"}, "FROGNANO_LOG_LEVLE"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := ""
			if tt.file != "" {
				path = writeFile(t, tt.file)
			}
			_, err := Load(path, tt.env)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("got error %v, want one mentioning %q", err, tt.wantErr)
			}
		})
	}
	if _, err := Load("", []string{"FROGNANO_TEST_GGUF=/x", "FROGNANO_CACHE=/y"}); err != nil {
		t.Fatalf("variables outside the configuration sections rejected: %v", err)
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing.yaml"), nil); err == nil {
		t.Fatal("missing file accepted")
	}
}

func TestValidateNamesEachProblem(t *testing.T) {
	cfg := Default()
	cfg.Node.HTTPAddr = "nonsense"
	cfg.Log.Level = "loud"
	cfg.Cluster.FailureTimeout = cfg.Cluster.Heartbeat
	cfg.Image.DebianMirror = "mirror.example/debian" // no scheme: debootstrap would take it for a path
	err := cfg.Validate()
	if err == nil {
		t.Fatal("invalid config accepted")
	}
	for _, want := range []string{"node.http_addr", "log.level", "cluster.failure_timeout", "image.debian_mirror"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
}

func TestSetUnknownKey(t *testing.T) {
	cfg := Default()
	if err := cfg.Set("node.nope", "x"); err == nil {
		t.Fatal("unknown key accepted")
	}
	if err := cfg.Set("node", "x"); err == nil {
		t.Fatal("section accepted as a key")
	}
}

func TestYAMLRoundTrip(t *testing.T) {
	cfg := Default()
	cfg.Cluster.Seeds = []string{"h:1"}
	back, err := Load(writeFile(t, cfg.YAML()), nil)
	if err != nil {
		t.Fatal(err)
	}
	if back.YAML() != cfg.YAML() {
		t.Fatalf("round trip changed the config:\n%s\nvs\n%s", cfg.YAML(), back.YAML())
	}
}

func TestEveryKeyHasAnEnvName(t *testing.T) {
	for _, k := range Keys() {
		if !strings.HasPrefix(EnvName(k), EnvPrefix) || strings.Contains(EnvName(k), ".") {
			t.Errorf("key %s has env name %s", k, EnvName(k))
		}
	}
	if len(Keys()) < 10 {
		t.Fatalf("only %d keys", len(Keys()))
	}
}
