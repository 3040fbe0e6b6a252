// Package config is a node's configuration: defaults, then a YAML file, then
// FROGNANO_* environment variables, then command-line flags, each layer
// overriding the one before. The resolved result is printed at start so an
// operator can see what a node is really running with.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"gopkg.in/yaml.v3"
)

// Config is everything a frognano node needs to start.
type Config struct {
	Node        Node        `yaml:"node"`
	Remote      Remote      `yaml:"remote"`
	Cluster     Cluster     `yaml:"cluster"`
	Containerd  Containerd  `yaml:"containerd"`
	Image       Image       `yaml:"image"`
	Supervision Supervision `yaml:"supervision"`
	Log         Log         `yaml:"log"`
	Policy      Policy      `yaml:"policy"`
}

// Policy is the model the node's Sampler serves (and so the model a
// training run on the node trains: the Learner's publications must fit it).
type Policy struct {
	// Model is a model store name or a .gguf or Hugging Face path; empty
	// means the model store's default (smollm2-135m).
	Model string `yaml:"model"`
	// Quantization is the weights the Sampler's products read: f32 (empty
	// too), q8_0 or q8_0-f32 (docs/quantized-sampling.md).
	Quantization string `yaml:"quantization"`
	// Swap is when the Sampler applies a new policy version:
	// between-steps (empty too: between two forward passes, the sequences
	// in flight going on with the new weights) or drain (once every
	// sequence in flight has finished on the old weights, admitting none
	// meanwhile); actors/sampler's package documentation.
	Swap string `yaml:"swap"`
}

// Node is this process's identity and addresses.
type Node struct {
	// ID names the node in logs and membership; empty means "hostname-<remote port>".
	ID string `yaml:"id"`
	// DataDir holds the Badger database and everything else the node keeps.
	DataDir string `yaml:"data_dir"`
	// HTTPAddr serves /healthz, /readyz, /metrics, the node API and membership.
	HTTPAddr string `yaml:"http_addr"`
	// RemoteAddr is the actor remoting (gRPC) listen address; port 0 picks a free one.
	RemoteAddr string `yaml:"remote_addr"`
	// Advertise is the remoting address other nodes should dial, when it differs
	// from RemoteAddr (NAT, 0.0.0.0 listeners).
	Advertise string `yaml:"advertise"`
	// APIToken, when set, is the bearer token every call of the HTTP API
	// must carry (all but /healthz, /livez and /readyz), membership polls
	// included; nodes of one cluster share it. It is required when HTTPAddr
	// is not a loopback address.
	APIToken string `yaml:"api_token"`
	// MemoryLimit is the Go runtime's soft limit on this process's memory
	// (runtime/debug.SetMemoryLimit). Empty is the default: GOMEMLIMIT when
	// that is set, else 70% of the memory the process may use (MemTotal,
	// lowered to its cgroups' limit), raised after each collection to
	// 1.25× the live heap up to 85% (runtime/capabilities.SetMemoryLimit:
	// a limit below what is live makes the collector run back to back).
	// A size ("12GiB", "800MiB", with GOMEMLIMIT's suffixes B, KiB, MiB,
	// GiB, TiB) or a share ("45%") is a fixed limit, which wins over
	// GOMEMLIMIT: for processes that share a machine, such as the two arms
	// of the learning benchmark. "off" lifts the limit.
	MemoryLimit string `yaml:"memory_limit"`
}

// ParseMemoryLimit reads an explicit node.memory_limit value for a
// process that may use total bytes: the fixed limit in bytes, or 0 for
// "off". Empty is no explicit value (the default applies) and is an error
// here.
func ParseMemoryLimit(s string, total uint64) (int64, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, errors.New("node.memory_limit: empty")
	}
	if s == "off" {
		return 0, nil
	}
	if pct, ok := strings.CutSuffix(s, "%"); ok {
		f, err := strconv.ParseFloat(pct, 64)
		if err != nil || math.IsNaN(f) || f <= 0 || f > 100 {
			return 0, fmt.Errorf("node.memory_limit: %q is not a share between 0%% and 100%%", s)
		}
		if total == 0 {
			return 0, fmt.Errorf("node.memory_limit: %q is a share, and this process's memory is unknown: give a size", s)
		}
		if float64(total)*f/100 < 1<<20 {
			return 0, fmt.Errorf("node.memory_limit: %q of %d bytes is under 1 MiB, too little to run in", s, total)
		}
		return int64(float64(total) * f / 100), nil
	}
	units := []struct {
		suffix string
		mult   float64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}}
	for _, u := range units {
		num, ok := strings.CutSuffix(s, u.suffix)
		if !ok {
			continue
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || f <= 0 || f*u.mult >= math.MaxInt64 {
			break
		}
		if f*u.mult < 1<<20 {
			return 0, fmt.Errorf("node.memory_limit: %q is under 1 MiB, too little to run in", s)
		}
		return int64(f * u.mult), nil
	}
	return 0, fmt.Errorf("node.memory_limit: %q is not a size (12GiB, 800MiB: suffixes B, KiB, MiB, GiB, TiB), a share (90%%) or off", s)
}

// Remote secures actor remoting (node.remote_addr, gRPC) with mutual TLS:
// when the three files are set, a node accepts only connections that
// present a certificate signed by TLSCA, and presents TLSCert when it
// dials, checking that the other side's certificate is signed by TLSCA and
// names the host it dialled. `frognano cert` makes such files; any PEM CA,
// certificate and key do.
type Remote struct {
	// TLSCA is a PEM file of the CA certificate(s) that sign the cluster's
	// node certificates.
	TLSCA string `yaml:"tls_ca"`
	// TLSCert is this node's (or client's) PEM certificate, usable for both
	// server and client authentication.
	TLSCert string `yaml:"tls_cert"`
	// TLSKey is the PEM private key of TLSCert.
	TLSKey string `yaml:"tls_key"`
	// AllowInsecure lets remoting bind off loopback without TLS. UNSAFE:
	// anyone who can reach node.remote_addr can then spawn actors of any
	// registered kind (sandbox workers included) and send any message.
	AllowInsecure bool `yaml:"allow_insecure"`
}

// TLS reports whether mutual TLS is configured (any of the three files).
func (r Remote) TLS() bool { return r.TLSCA != "" || r.TLSCert != "" || r.TLSKey != "" }

// Cluster is how nodes find each other.
type Cluster struct {
	// Name must match between nodes of one cluster.
	Name string `yaml:"name"`
	// Seeds are HTTP addresses of nodes to join through; empty means a one-node cluster.
	Seeds []string `yaml:"seeds"`
	// Heartbeat is how often members are polled (provider static) and how
	// often a node republishes its facts and load in the cluster's gossip state.
	Heartbeat time.Duration `yaml:"heartbeat"`
	// FailureTimeout is how long a member may stay silent before it is declared gone.
	// With the etcd provider it is the TTL of the member's lease (whole
	// seconds, rounded up).
	FailureTimeout time.Duration `yaml:"failure_timeout"`
	// Provider is how members find each other: "static" (seeds polled over
	// HTTP, the default) or "etcd" (members register under a lease in etcd
	// and watch each other there).
	Provider string `yaml:"provider"`
	// EtcdEndpoints are the etcd cluster's client addresses (HOST:PORT,
	// http://HOST:PORT or https://HOST:PORT), for provider etcd. https://
	// endpoints, or plain HOST:PORT ones with EtcdTLSCA or EtcdTLSCert set,
	// are dialled with TLS.
	EtcdEndpoints []string `yaml:"etcd_endpoints"`
	// EtcdPrefix is the key prefix under which members register
	// (PREFIX/CLUSTER/members/ID).
	EtcdPrefix string `yaml:"etcd_prefix"`
	// EtcdRefresh is how often a member rewrites its record in etcd (its
	// facts and load travel in the cluster's gossip state, not there).
	EtcdRefresh time.Duration `yaml:"etcd_refresh"`
	// EtcdTLSCA is a PEM file of the CA certificate(s) etcd's server
	// certificate must verify against; empty with TLS on means the
	// system's roots.
	EtcdTLSCA string `yaml:"etcd_tls_ca"`
	// EtcdTLSCert and EtcdTLSKey are the PEM client certificate and key
	// this node presents to etcd (etcd's --client-cert-auth); both or
	// neither.
	EtcdTLSCert string `yaml:"etcd_tls_cert"`
	EtcdTLSKey  string `yaml:"etcd_tls_key"`
	// EtcdUsername is the etcd user this node authenticates as, when etcd
	// has auth enabled; it needs read and write on the prefix.
	EtcdUsername string `yaml:"etcd_username"`
	// EtcdPassword is that user's password; printed as "<redacted>". Set
	// it in the config file or FROGNANO_CLUSTER_ETCD_PASSWORD, or use
	// EtcdPasswordFile; there is no flag, so that it does not show in ps.
	EtcdPassword string `yaml:"etcd_password"`
	// EtcdPasswordFile is a file holding the password (one trailing line
	// break is dropped), read at start.
	EtcdPasswordFile string `yaml:"etcd_password_file"`
}

// EtcdTLS reports whether TLS to etcd is on: an https:// endpoint, or a CA
// or client certificate given.
func (cl Cluster) EtcdTLS() bool {
	if cl.EtcdTLSCA != "" || cl.EtcdTLSCert != "" || cl.EtcdTLSKey != "" {
		return true
	}
	for _, e := range cl.EtcdEndpoints {
		if strings.HasPrefix(strings.ToLower(e), "https://") {
			return true
		}
	}
	return false
}

// Cluster providers (cluster.provider).
const (
	ProviderStatic = "static"
	ProviderEtcd   = "etcd"
)

// Containerd says where the container runtime is.
type Containerd struct {
	Address   string `yaml:"address"`
	Namespace string `yaml:"namespace"`
	// StateDir holds what sandboxes are made of outside their images: the
	// user-namespace slots every process on a machine shares, and the
	// layers of a user-namespaced sandbox, which runc mounts on the host
	// (a node in a container must see it at the same path as the host).
	StateDir string `yaml:"state_dir"`
}

// Image is how the sandboxes' base image is built.
type Image struct {
	// DebianMirror is the Debian archive debootstrap fetches from; empty
	// means the main archive in the host's apt sources. Set it where the
	// host has no Debian sources, or the base image should come from
	// another mirror.
	DebianMirror string `yaml:"debian_mirror"`
}

// Supervision bounds how hard a supervisor tries to keep a child alive.
type Supervision struct {
	// MaxRestarts within Window before the child is stopped for good.
	MaxRestarts int           `yaml:"max_restarts"`
	Window      time.Duration `yaml:"window"`
	// BackoffMin and BackoffMax bound the exponential delay before a restart.
	BackoffMin time.Duration `yaml:"backoff_min"`
	BackoffMax time.Duration `yaml:"backoff_max"`
}

// Log selects the slog handler.
type Log struct {
	Level  string `yaml:"level"`  // debug, info, warn, error
	Format string `yaml:"format"` // text or json
}

// Default is the configuration of a single-machine, one-node cluster.
func Default() Config {
	return Config{
		Node: Node{
			DataDir:    defaultDataDir(),
			HTTPAddr:   "127.0.0.1:7070",
			RemoteAddr: "127.0.0.1:7071",
		},
		Cluster: Cluster{
			Name:           "frognano",
			Heartbeat:      500 * time.Millisecond,
			FailureTimeout: 3 * time.Second,
			Provider:       ProviderStatic,
			EtcdPrefix:     "/frognano",
			EtcdRefresh:    5 * time.Second,
		},
		Containerd: Containerd{
			Address:   "/run/containerd/containerd.sock",
			Namespace: "frognano",
			StateDir:  "/run/frognano",
		},
		Supervision: Supervision{
			MaxRestarts: 10,
			Window:      time.Minute,
			BackoffMin:  100 * time.Millisecond,
			BackoffMax:  10 * time.Second,
		},
		Log: Log{Level: "info", Format: "text"},
	}
}

func defaultDataDir() string {
	if d := os.Getenv("XDG_DATA_HOME"); d != "" {
		return filepath.Join(d, "frognano")
	}
	if h, err := os.UserHomeDir(); err == nil {
		return filepath.Join(h, ".local", "share", "frognano")
	}
	return "frognano-data"
}

// EnvPrefix starts every environment variable that overrides a setting, e.g.
// FROGNANO_NODE_DATA_DIR or FROGNANO_CLUSTER_SEEDS=a:1,b:2.
const EnvPrefix = "FROGNANO_"

// Load builds a configuration from defaults, the YAML file at path (skipped
// when path is empty) and the environment. Unknown keys in the file are an
// error, so a typo cannot silently fall back to a default.
func Load(path string, environ []string) (Config, error) {
	cfg := Default()
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return cfg, fmt.Errorf("config: %w", err)
		}
		if err := decodeYAML(data, &cfg); err != nil {
			return cfg, fmt.Errorf("config %s: %w", path, err)
		}
	}
	if err := applyEnv(&cfg, environ); err != nil {
		return cfg, err
	}
	return cfg, nil
}

func decodeYAML(data []byte, cfg *Config) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(cfg); err != nil {
		return err
	}
	return nil
}

// Set assigns one setting by its dotted key (e.g. "node.http_addr"), parsing
// value for the field's type. Flags and environment variables both land here.
func (c *Config) Set(key, value string) error {
	f, ok := fieldByKey(reflect.ValueOf(c).Elem(), strings.Split(key, "."))
	if !ok {
		return fmt.Errorf("config: unknown setting %q", Clip(key, 80))
	}
	if err := setValue(f, value); err != nil {
		return fmt.Errorf("config: %s=%q: %w", key, Clip(value, 80), err)
	}
	return nil
}

// Keys lists every settable key, in file order.
func Keys() []string {
	var keys []string
	walk(reflect.TypeOf(Config{}), "", func(key string, _ reflect.Type) { keys = append(keys, key) })
	return keys
}

// EnvName is the environment variable that overrides key.
func EnvName(key string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
}

func applyEnv(cfg *Config, environ []string) error {
	env := map[string]string{}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok && strings.HasPrefix(k, EnvPrefix) {
			env[k] = v
		}
	}
	known := map[string]bool{}
	sections := map[string]bool{}
	for _, key := range Keys() {
		name := EnvName(key)
		known[name] = true
		sections[EnvName(strings.Split(key, ".")[0])+"_"] = true
		if v, ok := env[name]; ok {
			if err := cfg.Set(key, v); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
		}
	}
	// A variable inside a configuration section that names no setting is a
	// typo; other FROGNANO_* variables belong to other parts of frognano.
	var unknown []string
	for k := range env {
		for sec := range sections {
			if strings.HasPrefix(k, sec) && !known[k] {
				unknown = append(unknown, k)
			}
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return fmt.Errorf("config: unknown environment variable(s) %s", strings.Join(unknown, ", "))
	}
	return nil
}

func walk(t reflect.Type, prefix string, fn func(key string, t reflect.Type)) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name := strings.Split(f.Tag.Get("yaml"), ",")[0]
		key := name
		if prefix != "" {
			key = prefix + "." + name
		}
		if f.Type.Kind() == reflect.Struct {
			walk(f.Type, key, fn)
			continue
		}
		fn(key, f.Type)
	}
}

func fieldByKey(v reflect.Value, path []string) (reflect.Value, bool) {
	for i := 0; i < v.NumField(); i++ {
		name := strings.Split(v.Type().Field(i).Tag.Get("yaml"), ",")[0]
		if name != path[0] {
			continue
		}
		f := v.Field(i)
		if len(path) == 1 {
			return f, f.Kind() != reflect.Struct
		}
		if f.Kind() != reflect.Struct {
			return reflect.Value{}, false
		}
		return fieldByKey(f, path[1:])
	}
	return reflect.Value{}, false
}

var durationType = reflect.TypeOf(time.Duration(0))

func setValue(f reflect.Value, s string) error {
	switch {
	case f.Type() == durationType:
		d, err := time.ParseDuration(s)
		if err != nil {
			return errors.New("not a duration (e.g. 500ms, 3s, 1m)")
		}
		f.SetInt(int64(d))
	case f.Kind() == reflect.String:
		f.SetString(s)
	case f.Kind() == reflect.Int:
		n, err := strconv.Atoi(s)
		if err != nil {
			return errors.New("not an integer")
		}
		f.SetInt(int64(n))
	case f.Kind() == reflect.Bool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return errors.New("not true or false")
		}
		f.SetBool(b)
	case f.Kind() == reflect.Slice && f.Type().Elem().Kind() == reflect.String:
		var items []string
		for _, p := range strings.Split(s, ",") {
			if p = strings.TrimSpace(p); p != "" {
				items = append(items, p)
			}
		}
		f.Set(reflect.ValueOf(items))
	default:
		return fmt.Errorf("unsupported type %s", f.Type())
	}
	return nil
}

// Validate reports every problem at once, each naming its setting.
func (c *Config) Validate() error {
	var errs []error
	if c.Node.DataDir == "" {
		errs = append(errs, errors.New("node.data_dir: must not be empty"))
	}
	for key, addr := range map[string]string{"node.http_addr": c.Node.HTTPAddr, "node.remote_addr": c.Node.RemoteAddr} {
		if _, port, err := net.SplitHostPort(addr); err != nil {
			errs = append(errs, fmt.Errorf("%s: %q is not HOST:PORT: %w", key, addr, err))
		} else if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
			errs = append(errs, fmt.Errorf("%s: %q has no valid port", key, addr))
		}
	}
	if err := c.checkToken(); err != nil {
		errs = append(errs, err)
	}
	// A share is checked against a nominal size here; Start resolves it
	// against the memory the process may really use.
	if c.Node.MemoryLimit != "" {
		if _, err := ParseMemoryLimit(c.Node.MemoryLimit, 1<<40); err != nil {
			errs = append(errs, err)
		}
	}
	if err := c.checkRemoteTLS(); err != nil {
		errs = append(errs, err)
	}
	for _, s := range c.Cluster.Seeds {
		if err := HostPort(s); err != nil {
			errs = append(errs, fmt.Errorf("cluster.seeds: %w", err))
		}
	}
	if c.Cluster.Name == "" {
		errs = append(errs, errors.New("cluster.name: must not be empty"))
	}
	if c.Cluster.Heartbeat <= 0 {
		errs = append(errs, errors.New("cluster.heartbeat: must be positive"))
	}
	if c.Cluster.FailureTimeout < 2*c.Cluster.Heartbeat {
		errs = append(errs, errors.New("cluster.failure_timeout: must be at least twice cluster.heartbeat"))
	}
	errs = append(errs, c.checkProvider()...)
	if c.Supervision.MaxRestarts < 0 || c.Supervision.Window <= 0 {
		errs = append(errs, errors.New("supervision: max_restarts must be >= 0 and window positive"))
	}
	if c.Supervision.BackoffMin <= 0 || c.Supervision.BackoffMax < c.Supervision.BackoffMin {
		errs = append(errs, errors.New("supervision: need 0 < backoff_min <= backoff_max"))
	}
	if m := c.Image.DebianMirror; m != "" {
		if !archiveURL(m) {
			errs = append(errs, fmt.Errorf("image.debian_mirror: %q is not an http://, https:// or file:// URL of a Debian archive", m))
		}
	}
	switch c.Policy.Swap {
	case "", "between-steps", "drain":
	default:
		errs = append(errs, fmt.Errorf("policy.swap: %q is not between-steps or drain", c.Policy.Swap))
	}
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		errs = append(errs, fmt.Errorf("log.level: %q is not one of debug, info, warn, error", c.Log.Level))
	}
	switch c.Log.Format {
	case "text", "json":
	default:
		errs = append(errs, fmt.Errorf("log.format: %q is not text or json", c.Log.Format))
	}
	return errors.Join(errs...)
}

// Redacted stands for a secret in printed configurations.
const Redacted = "<redacted>"

// MinTokenLength is the shortest node.api_token accepted.
const MinTokenLength = 16

// checkToken enforces the HTTP API's binding rule: off loopback, a token.
func (c *Config) checkToken() error {
	env := EnvName("node.api_token")
	switch t := c.Node.APIToken; {
	case t != "" && len(t) < MinTokenLength:
		return fmt.Errorf("node.api_token: must be at least %d characters (e.g. the output of `openssl rand -hex 32`)", MinTokenLength)
	case strings.ContainsAny(t, " \t\r\n"):
		return errors.New("node.api_token: must not contain spaces or line breaks")
	case t == "" && !LoopbackAddr(c.Node.HTTPAddr):
		return fmt.Errorf("node.api_token: required because node.http_addr %s is not a loopback address "+
			"(anyone who can reach it could drive the node): set node.api_token in the config file or %s "+
			"to a secret of at least %d characters shared by the cluster's nodes and clients, or bind node.http_addr to 127.0.0.1",
			Clip(c.Node.HTTPAddr, 80), env, MinTokenLength)
	}
	return nil
}

// RemoteTLSKeys are the settings that turn on mutual TLS for remoting.
var RemoteTLSKeys = []string{"remote.tls_ca", "remote.tls_cert", "remote.tls_key"}

// checkRemoteTLS enforces remoting's binding rule: off loopback, mutual TLS
// (or the explicit, unsafe remote.allow_insecure), and the TLS files come
// as a set of three.
func (c *Config) checkRemoteTLS() error {
	r := c.Remote
	if r.TLS() {
		var missing []string
		for i, v := range []string{r.TLSCA, r.TLSCert, r.TLSKey} {
			if v == "" {
				missing = append(missing, RemoteTLSKeys[i]+" ("+EnvName(RemoteTLSKeys[i])+")")
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("remote: mutual TLS needs all of %s; missing %s", strings.Join(RemoteTLSKeys, ", "), strings.Join(missing, ", "))
		}
		return nil
	}
	if !r.AllowInsecure && !LoopbackAddr(c.Node.RemoteAddr) {
		return RemoteTLSRequired(c.Node.RemoteAddr, "")
	}
	return nil
}

// RemoteTLSRequired is the error for remoting off loopback without TLS;
// bound, when not empty, is the address the listener really bound.
func RemoteTLSRequired(addr, bound string) error {
	where := "node.remote_addr " + Clip(addr, 80)
	if bound != "" {
		where += " bound to " + bound + ", which"
	}
	var envs []string
	for _, k := range RemoteTLSKeys {
		envs = append(envs, EnvName(k))
	}
	return fmt.Errorf("remote.tls_ca, remote.tls_cert, remote.tls_key: required because %s is not a loopback address "+
		"(anyone who can reach it could spawn actors, sandbox workers included, and send any message to the node): "+
		"make a CA and node certificates with `frognano cert ca` and `frognano cert node` and set remote.tls_ca, remote.tls_cert "+
		"and remote.tls_key in the config file, %s or --remote-tls-ca, --remote-tls-cert, --remote-tls-key; "+
		"or bind node.remote_addr to 127.0.0.1; remote.allow_insecure: true (%s) skips this check and is unsafe",
		where, strings.Join(envs, ", "), EnvName("remote.allow_insecure"))
}

// LoopbackAddr reports whether a HOST:PORT listen address binds to loopback
// only: an IP in 127.0.0.0/8 or ::1, or "localhost". An empty host, 0.0.0.0,
// :: and every other name bind (or may bind) beyond the machine.
func LoopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// HostPort checks that s is a plain HOST:PORT that a node may dial: a host
// (an IP or a DNS name) and a port in 1..65535, nothing else: no scheme,
// path, query, fragment or user information.
func HostPort(s string) error {
	if len(s) > 300 {
		return fmt.Errorf("%q is not HOST:PORT (too long)", Clip(s, 40))
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("%q is not HOST:PORT", Clip(s, 80))
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 || port != strconv.Itoa(p) {
		return fmt.Errorf("%q has no valid port", Clip(s, 80))
	}
	if net.ParseIP(host) != nil {
		return nil
	}
	if host == "" || len(host) > 253 {
		return fmt.Errorf("%q has no valid host", Clip(s, 80))
	}
	for _, label := range strings.Split(host, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return fmt.Errorf("%q has no valid host", Clip(s, 80))
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-') {
				return fmt.Errorf("%q has no valid host", Clip(s, 80))
			}
		}
	}
	return nil
}

// Clip shortens s for an error message: a huge argument is not echoed back
// whole.
func Clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s… (%d bytes)", s[:cut], len(s))
}

// archiveURL reports whether s is a URL debootstrap can fetch from.
func archiveURL(s string) bool {
	u, err := url.Parse(s)
	if err != nil {
		return false
	}
	switch u.Scheme {
	case "http", "https":
		return u.Host != ""
	case "file":
		return u.Path != ""
	}
	return false
}

// YAML renders the resolved configuration, the form printed at start. A
// set node.api_token or cluster.etcd_password shows as "<redacted>".
func (c Config) YAML() string {
	if c.Node.APIToken != "" {
		c.Node.APIToken = Redacted
	}
	if c.Cluster.EtcdPassword != "" {
		c.Cluster.EtcdPassword = Redacted
	}
	out, err := yaml.Marshal(c)
	if err != nil { // a plain struct of strings, ints and durations always marshals
		panic(err)
	}
	return string(out)
}

// checkProvider checks cluster.provider and the settings it needs.
func (c *Config) checkProvider() []error {
	var errs []error
	cl := c.Cluster
	switch cl.Provider {
	case ProviderStatic, "":
	case ProviderEtcd:
		if len(cl.EtcdEndpoints) == 0 {
			errs = append(errs, fmt.Errorf("cluster.etcd_endpoints: required with cluster.provider etcd (e.g. 10.0.0.5:2379, or %s=10.0.0.5:2379)", EnvName("cluster.etcd_endpoints")))
		}
		for _, e := range cl.EtcdEndpoints {
			if err := EtcdEndpoint(e); err != nil {
				errs = append(errs, fmt.Errorf("cluster.etcd_endpoints: %w", err))
			}
		}
		if len(cl.Seeds) > 0 {
			errs = append(errs, errors.New("cluster.seeds: not used with cluster.provider etcd (members find each other in etcd): remove them"))
		}
		if !strings.HasPrefix(cl.EtcdPrefix, "/") || strings.HasSuffix(cl.EtcdPrefix, "/") || strings.ContainsAny(cl.EtcdPrefix, " \t\r\n") {
			errs = append(errs, fmt.Errorf("cluster.etcd_prefix: %q must start with / and not end with one (e.g. /frognano)", Clip(cl.EtcdPrefix, 80)))
		}
		if cl.EtcdRefresh <= 0 {
			errs = append(errs, errors.New("cluster.etcd_refresh: must be positive"))
		}
		errs = append(errs, CheckEtcdSecurity(cl)...)
	default:
		errs = append(errs, fmt.Errorf("cluster.provider: %q is not static or etcd", Clip(cl.Provider, 80)))
	}
	return errs
}

// CheckEtcdSecurity checks the TLS and auth settings of the etcd client
// that need no file read: the files themselves are read, and the
// certificates checked, when the node connects.
func CheckEtcdSecurity(cl Cluster) []error {
	var errs []error
	if (cl.EtcdTLSCert == "") != (cl.EtcdTLSKey == "") {
		set, unset := "cluster.etcd_tls_cert", "cluster.etcd_tls_key"
		if cl.EtcdTLSCert == "" {
			set, unset = unset, set
		}
		errs = append(errs, fmt.Errorf("%s: set without %s (%s): a client certificate needs its key and the key its certificate", set, unset, EnvName(unset)))
	}
	schemes := map[string]bool{}
	for _, e := range cl.EtcdEndpoints {
		scheme := ""
		if s, _, ok := strings.Cut(e, "://"); ok {
			scheme = strings.ToLower(s)
		}
		schemes[scheme] = true
	}
	if schemes["http"] && schemes["https"] {
		errs = append(errs, errors.New("cluster.etcd_endpoints: some are http:// and some https://: etcd's client dials all endpoints alike; use https:// for all"))
	} else if schemes["http"] && (cl.EtcdTLSCA != "" || cl.EtcdTLSCert != "" || cl.EtcdTLSKey != "") {
		errs = append(errs, errors.New("cluster.etcd_endpoints: http:// endpoints are dialled without TLS, but cluster.etcd_tls_ca, cluster.etcd_tls_cert or cluster.etcd_tls_key is set: use https:// (or plain HOST:PORT)"))
	}
	switch {
	case cl.EtcdPassword != "" && cl.EtcdPasswordFile != "":
		errs = append(errs, errors.New("cluster.etcd_password, cluster.etcd_password_file: both set; set one"))
	case cl.EtcdUsername == "" && (cl.EtcdPassword != "" || cl.EtcdPasswordFile != ""):
		errs = append(errs, fmt.Errorf("cluster.etcd_username: required with cluster.etcd_password or cluster.etcd_password_file (%s)", EnvName("cluster.etcd_username")))
	case cl.EtcdUsername != "" && cl.EtcdPassword == "" && cl.EtcdPasswordFile == "":
		errs = append(errs, fmt.Errorf("cluster.etcd_password: required with cluster.etcd_username: set %s or cluster.etcd_password_file (%s)",
			EnvName("cluster.etcd_password"), EnvName("cluster.etcd_password_file")))
	}
	if strings.ContainsAny(cl.EtcdUsername, " \t\r\n") {
		errs = append(errs, errors.New("cluster.etcd_username: must not contain spaces or line breaks"))
	}
	return errs
}

// EtcdEndpoint checks one etcd client address: HOST:PORT, or an http:// or
// https:// URL of one with no path.
func EtcdEndpoint(e string) error {
	hp := e
	if strings.Contains(e, "://") {
		u, err := url.Parse(e)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.User != nil || u.RawQuery != "" {
			return fmt.Errorf("%q is not HOST:PORT, http://HOST:PORT or https://HOST:PORT", Clip(e, 80))
		}
		hp = u.Host
	}
	return HostPort(hp)
}
