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
	cfg.Policy.Swap = "sometimes"
	err := cfg.Validate()
	if err == nil {
		t.Fatal("invalid config accepted")
	}
	for _, want := range []string{"node.http_addr", "log.level", "cluster.failure_timeout", "image.debian_mirror", "policy.swap"} {
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

func TestAPITokenRequiredOffLoopback(t *testing.T) {
	token := "0123456789abcdef0123"
	tests := []struct {
		addr, token string
		wantErr     string // "" when valid
	}{
		{"127.0.0.1:7070", "", ""},
		{"127.0.0.2:0", "", ""},
		{"[::1]:7070", "", ""},
		{"localhost:7070", "", ""},
		{"0.0.0.0:7070", "", "FROGNANO_NODE_API_TOKEN"},
		{":7070", "", "node.api_token"},
		{"[::]:7070", "", "node.api_token"},
		{"10.0.0.2:7070", "", "node.api_token"},
		{"myhost.example:7070", "", "node.api_token"},
		{"0.0.0.0:7070", token, ""},
		{"127.0.0.1:7070", token, ""},
		{"0.0.0.0:7070", "short", "at least 16"},
		{"0.0.0.0:7070", "0123456789abcdef 0123", "spaces"},
	}
	for _, tt := range tests {
		cfg := Default()
		cfg.Node.HTTPAddr, cfg.Node.APIToken = tt.addr, tt.token
		err := cfg.Validate()
		switch {
		case tt.wantErr == "" && err != nil:
			t.Errorf("%s with token %q: %v", tt.addr, tt.token, err)
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("%s with token %q: error %v, want one mentioning %q", tt.addr, tt.token, err, tt.wantErr)
		}
	}
	cfg, err := Load("", []string{"FROGNANO_NODE_HTTP_ADDR=0.0.0.0:7070", "FROGNANO_NODE_API_TOKEN=" + token})
	if err != nil || cfg.Node.APIToken != token || cfg.Validate() != nil {
		t.Fatalf("token from the environment: %v %q %v", err, cfg.Node.APIToken, cfg.Validate())
	}
}

func TestYAMLRedactsTheToken(t *testing.T) {
	cfg := Default()
	cfg.Node.APIToken = "s3cret-s3cret-s3cret"
	out := cfg.YAML()
	if strings.Contains(out, "s3cret") || !strings.Contains(out, "api_token: "+Redacted) {
		t.Fatalf("printed configuration shows the token:\n%s", out)
	}
	if cfg.Node.APIToken != "s3cret-s3cret-s3cret" {
		t.Fatal("YAML changed the configuration")
	}
}

func TestHostPort(t *testing.T) {
	for _, ok := range []string{"10.0.0.1:7070", "[::1]:1", "node-a.example:65535", "a:1"} {
		if err := HostPort(ok); err != nil {
			t.Errorf("HostPort(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{
		"", "host", "host:0", "host:65536", "host:http", "host:+80", "http://host:80", "host:80/path",
		"evil.example/x?y=:80", "user@host:80", "user:pw@host:80", "host:80?q", "host:80#f", "ho st:80",
		"-host:80", "host..example:80", strings.Repeat("a", 400) + ":80", "[::1]:80/x",
	} {
		if err := HostPort(bad); err == nil {
			t.Errorf("HostPort(%q) accepted", bad)
		}
	}
	if err := HostPort(strings.Repeat("x", 100000) + ":1"); err == nil || len(err.Error()) > 200 {
		t.Errorf("a huge address is echoed back: %d bytes", len(err.Error()))
	}
}

func TestHugeValuesAreClipped(t *testing.T) {
	cfg := Default()
	err := cfg.Set("cluster.heartbeat", strings.Repeat("9", 1<<20))
	if err == nil || len(err.Error()) > 300 {
		t.Fatalf("error of %d bytes for a 1 MiB value", len(err.Error()))
	}
	if got := Clip("héllo", 2); got != "h… (6 bytes)" {
		t.Fatalf("Clip cut inside a rune: %q", got)
	}
}

// TestRemoteTLSRequiredOffLoopback: remoting bound off loopback needs the
// three remote.tls_* files (or the unsafe remote.allow_insecure); the
// files come as a set; each is settable from YAML and the environment.
func TestRemoteTLSRequiredOffLoopback(t *testing.T) {
	tlsFiles := Remote{TLSCA: "ca.crt", TLSCert: "node.crt", TLSKey: "node.key"}
	tests := []struct {
		addr    string
		remote  Remote
		wantErr string // "" when valid
	}{
		{"127.0.0.1:7071", Remote{}, ""},
		{"127.0.0.1:0", Remote{}, ""},
		{"[::1]:7071", Remote{}, ""},
		{"localhost:7071", Remote{}, ""},
		{"0.0.0.0:7071", Remote{}, "FROGNANO_REMOTE_TLS_CA"},
		{":7071", Remote{}, "remote.tls_cert"},
		{"[::]:7071", Remote{}, "remote.tls_key"},
		{"10.0.0.2:7071", Remote{}, "frognano cert"},
		{"myhost.example:7071", Remote{}, "remote.allow_insecure"},
		{"0.0.0.0:7071", tlsFiles, ""},
		{"127.0.0.1:7071", tlsFiles, ""},
		{"0.0.0.0:7071", Remote{AllowInsecure: true}, ""},
		{"0.0.0.0:7071", Remote{TLSCA: "ca.crt"}, "missing remote.tls_cert (FROGNANO_REMOTE_TLS_CERT), remote.tls_key (FROGNANO_REMOTE_TLS_KEY)"},
		{"127.0.0.1:7071", Remote{TLSCert: "n.crt", TLSKey: "n.key"}, "missing remote.tls_ca"},
	}
	for _, tt := range tests {
		cfg := Default()
		cfg.Node.RemoteAddr, cfg.Remote = tt.addr, tt.remote
		err := cfg.Validate()
		switch {
		case tt.wantErr == "" && err != nil:
			t.Errorf("%s with %+v: %v", tt.addr, tt.remote, err)
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("%s with %+v: error %v, want one mentioning %q", tt.addr, tt.remote, err, tt.wantErr)
		}
	}
	cfg, err := Load("", []string{"FROGNANO_NODE_REMOTE_ADDR=0.0.0.0:7071", "FROGNANO_REMOTE_TLS_CA=/c/ca.crt",
		"FROGNANO_REMOTE_TLS_CERT=/c/node.crt", "FROGNANO_REMOTE_TLS_KEY=/c/node.key"})
	if err != nil || cfg.Remote != (Remote{TLSCA: "/c/ca.crt", TLSCert: "/c/node.crt", TLSKey: "/c/node.key"}) || cfg.Validate() != nil {
		t.Fatalf("TLS from the environment: %v %+v %v", err, cfg.Remote, cfg.Validate())
	}
	if _, err := Load("", []string{"FROGNANO_REMOTE_TLS_CRT=/c/node.crt"}); err == nil || !strings.Contains(err.Error(), "FROGNANO_REMOTE_TLS_CRT") {
		t.Errorf("a misspelt FROGNANO_REMOTE_ variable: %v", err)
	}
	path := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(path, []byte("node:\n  remote_addr: 0.0.0.0:7071\nremote:\n  allow_insecure: true\n"), 0o644)
	if cfg, err := Load(path, nil); err != nil || !cfg.Remote.AllowInsecure || cfg.Validate() != nil {
		t.Fatalf("allow_insecure from YAML: %v %+v", err, cfg.Remote)
	}
}

func TestParseMemoryLimit(t *testing.T) {
	const gib = 1 << 30
	for _, c := range []struct {
		in   string
		want int64
	}{
		{"90%", 9 * gib}, {"45%", 4.5 * gib}, {"100%", 10 * gib}, {"off", 0},
		{"12GiB", 12 * gib}, {"1.5GiB", 1.5 * gib}, {"800MiB", 800 << 20}, {"2TiB", 2 << 40},
		{"1048576B", 1 << 20}, {" 4GiB ", 4 * gib},
	} {
		got, err := ParseMemoryLimit(c.in, 10*gib)
		if err != nil || got != c.want {
			t.Errorf("ParseMemoryLimit(%q, 10 GiB) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{"", "0.001%", "lots", "12", "12GB", "12G", "-1GiB", "0GiB", "0%", "101%", "NaN%", "x%", "1KiB", "OFF", "9e30TiB", "GiB"} {
		if got, err := ParseMemoryLimit(bad, 10*gib); err == nil || !strings.Contains(err.Error(), "node.memory_limit") {
			t.Errorf("ParseMemoryLimit(%q) = %d, %v; want an error naming node.memory_limit", bad, got, err)
		}
	}
	if _, err := ParseMemoryLimit("50%", 0); err == nil {
		t.Error("a share of unknown memory was accepted")
	}
	cfg := Default()
	cfg.Node.MemoryLimit = "12 parsecs"
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "node.memory_limit") {
		t.Errorf("Validate with a bad node.memory_limit: %v", err)
	}
}
