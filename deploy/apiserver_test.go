package deploy

import (
	"bytes"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/frognano/frognano/runtime/membership/etcdtest"
)

// apiServerBinary is a kube-apiserver to apply the manifests to:
// FROGNANO_KUBE_APISERVER, else the one scripts/setup.sh builds from the
// Kubernetes module (scripts/install-kubernetes.sh), else one on PATH;
// "" when there is none.
func apiServerBinary() string {
	if p := os.Getenv("FROGNANO_KUBE_APISERVER"); p != "" {
		return p
	}
	if _, err := os.Stat("/usr/local/lib/frognano/kube-apiserver"); err == nil {
		return "/usr/local/lib/frognano/kube-apiserver"
	}
	if p, err := exec.LookPath("kube-apiserver"); err == nil {
		return p
	}
	return ""
}

// apiServer is a running kube-apiserver and a client of it with full rights.
type apiServer struct {
	url    string
	token  string
	client *http.Client
	log    *bytes.Buffer
	// caFile is the server's self-signed certificate (for kubeconfigs, with
	// the server name kubernetes.default.svc); saKey signs service account
	// tokens (the controller manager's --service-account-private-key-file).
	caFile, saKey string
}

// startAPIServer runs a kube-apiserver on a real etcd (Debian's, through
// etcdtest) for t: its own serving certificate, a bearer token in the
// system:masters group, RBAC on, privileged pods allowed, and no
// controllers (TestManifestsRunOnKubernetes starts those).
func startAPIServer(t *testing.T) *apiServer {
	t.Helper()
	bin := apiServerBinary()
	if bin == "" {
		t.Skip("kube-apiserver is not installed (scripts/install-kubernetes.sh builds it; scripts/setup.sh runs that): skipping the manifests' check against a real API server")
	}
	etcd := etcdtest.Start(t)
	dir := t.TempDir()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	saKey := write("sa.key", pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}))
	saPub := write("sa.pub", pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}))
	tok := make([]byte, 16)
	if _, err := rand.Read(tok); err != nil {
		t.Fatal(err)
	}
	token := hex.EncodeToString(tok)
	tokens := write("tokens.csv", []byte(token+`,frognano-test,frognano-test,"system:masters"`+"\n"))
	addr := etcdtest.FreePort(t)
	port := addr[strings.LastIndexByte(addr, ':')+1:]
	certDir := filepath.Join(dir, "certs")
	cmd := exec.Command(bin,
		"--etcd-servers="+etcd.URL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port="+port,
		"--cert-dir="+certDir,
		"--service-account-key-file="+saPub,
		"--service-account-signing-key-file="+saKey,
		"--service-account-issuer=https://kubernetes.default.svc",
		"--token-auth-file="+tokens,
		"--authorization-mode=RBAC",
		"--service-cluster-ip-range=10.96.0.0/16",
		// The sandbox nodes are privileged pods (deploy/sandbox-nodes.yaml).
		"--allow-privileged=true",
		// The endpoints of the "kubernetes" service would be 127.0.0.1,
		// which the server itself refuses to store.
		"--endpoint-reconciler-type=none",
	)
	s := &apiServer{url: "https://" + addr, token: token, log: &bytes.Buffer{},
		caFile: filepath.Join(certDir, "apiserver.crt"), saKey: saKey}
	cmd.Stdout, cmd.Stderr = s.log, s.log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // a killed test takes it along
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
	})
	// The server writes its self-signed certificate into the cert dir
	// before it listens; trust exactly that one.
	deadline := time.Now().Add(90 * time.Second)
	var last string
	for {
		select {
		case <-exited:
			t.Fatalf("kube-apiserver exited:\n%s", tail(s.log.String()))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("kube-apiserver not ready after 90 s (last /readyz: %s):\n%s", last, tail(s.log.String()))
		}
		if s.client == nil {
			if crt, err := os.ReadFile(s.caFile); err == nil {
				pool := x509.NewCertPool()
				if pool.AppendCertsFromPEM(crt) {
					s.client = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
						TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "kubernetes.default.svc"}}}
				}
			}
		}
		if s.client != nil {
			code, body := s.do(t, "GET", "/readyz", nil)
			if code == http.StatusOK {
				return s
			}
			last = fmt.Sprintf("%d %s", code, body)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// tail is the end of a server's log, for failure messages.
func tail(s string) string {
	if len(s) > 4000 {
		return "…" + s[len(s)-4000:]
	}
	return s
}

// do sends one request with the bearer token and returns the status and
// body; a transport error is status 0.
func (s *apiServer) do(t *testing.T, method, path string, body any) (int, []byte) {
	t.Helper()
	var r io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		r = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, s.url+path, r)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+s.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, []byte(err.Error())
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

// resource is where objects of one kind live, from the server's discovery.
type resource struct {
	base       string // /api/v1 or /apis/GROUP/VERSION
	name       string // the plural, e.g. statefulsets
	namespaced bool
}

// resourceFor asks the server which resource serves apiVersion/kind.
func (s *apiServer) resourceFor(t *testing.T, apiVersion, kind string) (resource, error) {
	t.Helper()
	base := "/apis/" + apiVersion
	if !strings.Contains(apiVersion, "/") {
		base = "/api/" + apiVersion
	}
	code, body := s.do(t, "GET", base, nil)
	if code != http.StatusOK {
		return resource{}, fmt.Errorf("discovery of %s: %d %s", apiVersion, code, body)
	}
	var list struct {
		Resources []struct {
			Name       string `json:"name"`
			Kind       string `json:"kind"`
			Namespaced bool   `json:"namespaced"`
		} `json:"resources"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return resource{}, err
	}
	for _, r := range list.Resources {
		if r.Kind == kind && !strings.Contains(r.Name, "/") {
			return resource{base: base, name: r.Name, namespaced: r.Namespaced}, nil
		}
	}
	return resource{}, fmt.Errorf("the API server serves no %s in %s", kind, apiVersion)
}

// create stores o through the server with strict field validation (an
// unknown or duplicate field is an error, not a warning) and returns the
// status and body.
func (s *apiServer) create(t *testing.T, o obj) (int, []byte) {
	t.Helper()
	r, err := s.resourceFor(t, str(o, "apiVersion"), str(o, "kind"))
	if err != nil {
		return 0, []byte(err.Error())
	}
	path := r.base
	if r.namespaced {
		ns := str(o, "metadata", "namespace")
		if ns == "" {
			ns = "default"
		}
		path += "/namespaces/" + ns
	}
	body := make(obj, len(o))
	for k, v := range o {
		if k != "_file" { // load's note of where the document came from
			body[k] = v
		}
	}
	return s.do(t, "POST", path+"/"+r.name+"?fieldValidation=Strict", body)
}

// TestManifestsOnARealAPIServer stores every manifest of deploy/ in a real
// kube-apiserver (built from the Kubernetes module by
// scripts/install-kubernetes.sh; Debian's etcd behind it), the
// namespace first, with strict field validation: each must be accepted as
// written, defaults and all, by the server's own validation of its kind
// (selectors that match their templates, resource quantities, probes,
// volume sources, …), which the parsing test above only approximates. As
// controls, the same server must refuse a copy with an unknown field and a
// StatefulSet whose selector does not match its pods. No controller,
// scheduler or kubelet runs: the pods are never started.
func TestManifestsOnARealAPIServer(t *testing.T) {
	objs := load(t)
	s := startAPIServer(t)
	var ns []obj
	var rest []obj
	for _, o := range objs {
		if str(o, "kind") == "Namespace" {
			ns = append(ns, o)
		} else {
			rest = append(rest, o)
		}
	}
	if len(ns) == 0 {
		t.Fatal("no Namespace among the manifests")
	}
	created := 0
	for _, o := range append(ns, rest...) {
		name := str(o, "kind") + " " + str(o, "metadata", "name")
		code, body := s.create(t, o)
		if code != http.StatusCreated {
			t.Errorf("%s: the API server answered %d: %s", name, code, body)
			continue
		}
		created++
		if str(o, "kind") == "Namespace" {
			// What the service account controller would do: pods are
			// admitted only where the default account exists.
			sa := obj{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": obj{"name": "default", "namespace": str(o, "metadata", "name")}}
			if code, body := s.create(t, sa); code != http.StatusCreated {
				t.Fatalf("default ServiceAccount in %s: %d %s", str(o, "metadata", "name"), code, body)
			}
		}
	}
	t.Logf("%d of %d objects stored by the API server", created, len(objs))

	// Controls: the server is strict where the manifests' test relies on
	// it. An unknown field in a pod template, and a selector that does not
	// match the template's labels, are refused.
	var sts obj
	for _, o := range rest {
		if str(o, "kind") == "StatefulSet" {
			sts = o
			break
		}
	}
	if sts == nil {
		t.Fatal("no StatefulSet among the manifests for the controls")
	}
	renamed := func(o obj, suffix string) obj {
		data, _ := json.Marshal(o)
		var c obj
		json.Unmarshal(data, &c)
		c["metadata"].(obj)["name"] = str(o, "metadata", "name") + suffix
		return c
	}
	bad := renamed(sts, "-unknown-field")
	at(bad, "spec", "template", "spec").(obj)["containerz"] = []any{}
	if code, body := s.create(t, bad); code == http.StatusCreated || !strings.Contains(string(body), "containerz") {
		t.Errorf("a StatefulSet with an unknown field: %d %s, want a refusal naming the field", code, body)
	}
	mismatch := renamed(sts, "-mismatch")
	at(mismatch, "spec", "selector").(obj)["matchLabels"] = obj{"frognano.dev/nothing": "here"}
	if code, body := s.create(t, mismatch); code == http.StatusCreated || !strings.Contains(string(body), "selector") {
		t.Errorf("a StatefulSet whose selector does not match its pods: %d %s, want a refusal about the selector", code, body)
	}
}
