package deploy

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	containerd "github.com/containerd/containerd"
	"github.com/containerd/containerd/images"
	"github.com/containerd/containerd/leases"
	"github.com/containerd/containerd/namespaces"
	"github.com/containerd/errdefs"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/frognano/frognano/actors/sandbox"
	"github.com/frognano/frognano/runtime/membership/etcdtest"
	"github.com/frognano/frognano/runtime/mtls"
)

// kubeDir is where scripts/install-kubernetes.sh installs the Kubernetes
// binaries, CoreDNS and the pause program.
const kubeDir = "/usr/local/lib/frognano"

// kubeTool is the installed binary name ("" when missing): in kubeDir,
// else on PATH.
func kubeTool(name string) string {
	if p := filepath.Join(kubeDir, name); fileExists(p) {
		return p
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	return ""
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// syncBuffer is a log several goroutines write and the test reads.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// proc is a daemon the test started and stops.
type proc struct {
	name   string
	cmd    *exec.Cmd
	log    *syncBuffer
	exited chan struct{}
}

func startProc(t *testing.T, name, bin string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, cmd: exec.Command(bin, args...), log: &syncBuffer{}, exited: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if dir := os.Getenv("FROGNANO_K8S_TEST_LOGS"); dir != "" {
		// Whole logs, for a person debugging the cluster while it runs.
		if f, err := os.Create(filepath.Join(dir, name+".log")); err == nil {
			go func() { <-p.exited; f.Close() }()
			w := io.MultiWriter(p.log, f)
			p.cmd.Stdout, p.cmd.Stderr = w, w
		}
	}
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { p.cmd.Wait(); close(p.exited) }()
	return p
}

// stop ends the daemon: SIGTERM, then SIGKILL after grace.
func (p *proc) stop(grace time.Duration) {
	select {
	case <-p.exited:
		return
	default:
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(grace):
		p.cmd.Process.Kill()
		<-p.exited
	}
}

func (p *proc) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// kubeCluster is a one-machine Kubernetes started by the test: the API
// server on Debian's etcd, the controller manager, the scheduler, CoreDNS
// serving cluster.local from the API, a containerd of its own for the
// kubelet (its CRI plugin; CNI's bridge plugin from Debian's
// containernetworking-plugins), and the kubelet.
type kubeCluster struct {
	api        *apiServer
	dir        string
	kubeconfig string
	procs      []*proc
	crictd     string // the kubelet's containerd socket
	node       string
	dnsIP      string
	bridge     string
	cniNet     string
	// sysctls: the kernel settings the kubelet and the CNI bridge change,
	// as they were before, put back at the end.
	sysctls map[string]string
	// hadContainerLogs: /var/log/containers, where the kubelet links
	// container logs, was there before the test.
	hadContainerLogs bool
	// kubeRules: the machine's iptables rules and chains named KUBE-*
	// before the test (a real kubelet's or kube-proxy's, if any).
	kubeRules int
}

// kubeRules counts the lines of iptables-save that name a KUBE- chain (-1
// without iptables).
func kubeRules() int {
	out, err := exec.Command("iptables-save").Output()
	if err != nil {
		return -1
	}
	return strings.Count(string(out), "KUBE-")
}

// The pods' network: a bridge on the host whose address is also where
// CoreDNS answers (it listens on every address, port 53).
const (
	podSubnet  = "10.213.0.0/24"
	podGateway = "10.213.0.1"
	podBridge  = "frognano-k8s0"
	podCNINet  = "frognano-k8s-test"
	// The kubelet's cgroups (kubepods and below) go under this root in
	// every hierarchy, apart from a real kubelet's and removed at the end.
	kubeCgroupRoot = "frognano-k8s-test"
)

// TestManifestsRunOnKubernetes runs deploy/'s manifests on a real
// one-machine Kubernetes (v1.31.4's API server, controller manager,
// scheduler and kubelet, built from the Kubernetes module by
// scripts/install-kubernetes.sh; CoreDNS; containerd's CRI plugin; Debian's
// CNI plugins) and checks that the pods work: etcd's StatefulSet and a
// sandbox node start from the manifests as written; the node finds etcd
// through the cluster's DNS and registers there (its readiness probe needs
// itself in the member list it reads from etcd), and over the HTTP API
// behind the token it names itself by its pod DNS name, with the machine's
// containerd (reached through the host paths) among its capabilities;
// killed, it comes back under the same name and registers again. The
// learner needs a GPU: with none here it must stay unschedulable, not run.
//
// What the test changes, and why: the images are built locally (no
// registry is reachable; imagePullPolicy Never), the sandbox StatefulSet
// has one replica (its pods must be on different machines and there is one
// machine), the data hostPath is a temporary directory (not the host's
// /var/lib/frognano), and the claims are bound to hostPath volumes the
// test makes (a cluster's storage class would). Everything else —
// configuration, probes, environment, TLS, the containerd host paths,
// privileges, DNS names — is as written.
func TestManifestsRunOnKubernetes(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starting a Kubernetes takes minutes")
	}
	if os.Geteuid() != 0 {
		t.Skip("not root: a kubelet and a containerd need root")
	}
	var missing []string
	for _, b := range []string{"kube-controller-manager", "kube-scheduler", "kubelet", "coredns", "pause"} {
		if kubeTool(b) == "" {
			missing = append(missing, b)
		}
	}
	if len(missing) > 0 {
		t.Skipf("%s not installed (scripts/install-kubernetes.sh builds them; scripts/setup.sh runs it)", strings.Join(missing, ", "))
	}
	for _, p := range []string{"bridge", "host-local", "loopback", "portmap"} {
		if !fileExists(filepath.Join("/usr/lib/cni", p)) {
			t.Skipf("CNI plugin %s missing in /usr/lib/cni (Debian's containernetworking-plugins; scripts/setup.sh installs it)", p)
		}
	}
	if _, err := exec.LookPath("containerd"); err != nil {
		t.Skip("containerd not installed")
	}
	if etcdtest.Binary() == "" {
		t.Skip("etcd not installed (Debian's etcd-server)")
	}
	hostCtrd := "/run/containerd/containerd.sock"
	if !fileExists(hostCtrd) {
		t.Skipf("the host's containerd is not running at %s (scripts/setup-containerd.sh)", hostCtrd)
	}

	objs := load(t)
	k := startKube(t)
	ctx := context.Background()

	// Images: the base image frognano's sandboxes start from, plus one
	// binary each.
	bins := filepath.Join(k.dir, "bin")
	goBuild(t, filepath.Join(bins, "node"), "../cmd/frognano-node")
	copyFile(t, etcdtest.Binary(), filepath.Join(bins, "etcd", "etcd"), 0o755)
	nodeImage := "frognano.local/k8s-test/frognano-node:" + randHex(t, 4)
	etcdImage := "frognano.local/k8s-test/etcd:" + randHex(t, 4)
	rt, err := sandbox.New(ctx, sandbox.Config{Address: k.crictd, Namespace: "k8s.io", Agent: "off", UserNS: "off",
		StateDir: filepath.Join(k.dir, "sandbox-state")})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	base, err := rt.EnsureBaseImage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	entry := func(argv ...string) func(*ocispec.ImageConfig) {
		return func(c *ocispec.ImageConfig) { c.Entrypoint, c.Cmd, c.WorkingDir = argv, nil, "/" }
	}
	if err := rt.DeriveImage(ctx, base, nodeImage, map[string]string{"/usr/local/bin": filepath.Join(bins, "node")},
		entry("/usr/local/bin/frognano-node")); err != nil {
		t.Fatal(err)
	}
	if err := rt.DeriveImage(ctx, base, etcdImage, map[string]string{"/usr/local/bin": filepath.Join(bins, "etcd")},
		func(c *ocispec.ImageConfig) { c.WorkingDir = "/" }); err != nil {
		t.Fatal(err)
	}

	// The node must be there before anything is scheduled, with room for
	// the sandbox pod's requests.
	k.waitNodeReady(t, 2*time.Minute)
	k.needAllocatable(t, 2, 4<<30)
	k.api.patch(t, "/api/v1/nodes/"+k.node, obj{"metadata": obj{"labels": obj{"frognano.dev/sandbox": "true"}}})

	// The namespace, then what deploy/README.md asks for before applying:
	// the API token, the remoting certificates, and storage for the claims.
	data := filepath.Join(k.dir, "frognano-data")
	sharedMount(t, data)
	state := filepath.Join(k.dir, "frognano-state")
	sharedMount(t, state)
	// The node's objects in the machine's containerd, apart from other
	// tests' (whose sandboxes its start-up sweep must not judge).
	ctrdNS := "frognano-k8s-" + randHex(t, 4)
	t.Cleanup(func() { removeHostNamespace(t, hostCtrd, ctrdNS) })
	token := randHex(t, 32)
	var rest []obj
	for _, o := range objs {
		if str(o, "kind") == "Namespace" {
			k.api.mustCreate(t, o)
		} else {
			rest = append(rest, o)
		}
	}
	k.api.mustCreate(t, obj{"apiVersion": "v1", "kind": "Secret", "metadata": obj{"name": "frognano-api-token", "namespace": "frognano"},
		"stringData": obj{"token": token}})
	ca := filepath.Join(k.dir, "ca")
	if err := mtls.NewCA(ca, mtls.CAOptions{Name: "k8s-test"}); err != nil {
		t.Fatal(err)
	}
	tls := obj{"ca.crt": readString(t, filepath.Join(ca, mtls.CACertFile))}
	for _, pod := range []struct{ name, host string }{
		{"frognano-sandbox-0", "frognano-sandbox-0.frognano-nodes.frognano.svc.cluster.local"},
		{"frognano-learner", "frognano-learner.frognano.svc.cluster.local"},
	} {
		d := filepath.Join(k.dir, "certs", pod.name)
		if err := mtls.IssueNode(d, mtls.NodeOptions{CADir: ca, Name: pod.name, Hosts: []string{pod.host}}); err != nil {
			t.Fatal(err)
		}
		tls[pod.name+".crt"] = readString(t, filepath.Join(d, mtls.NodeCertFile))
		tls[pod.name+".key"] = readString(t, filepath.Join(d, mtls.NodeKeyFile))
	}
	k.api.mustCreate(t, obj{"apiVersion": "v1", "kind": "Secret", "metadata": obj{"name": "frognano-node-tls", "namespace": "frognano"},
		"stringData": tls})
	for i, size := range claimSizes(rest) {
		pv := filepath.Join(k.dir, "volumes", fmt.Sprint(i))
		if err := os.MkdirAll(pv, 0o700); err != nil {
			t.Fatal(err)
		}
		k.api.mustCreate(t, obj{"apiVersion": "v1", "kind": "PersistentVolume", "metadata": obj{"name": fmt.Sprintf("frognano-test-%d", i)},
			"spec": obj{"capacity": obj{"storage": size}, "accessModes": []any{"ReadWriteOnce"},
				"persistentVolumeReclaimPolicy": "Delete", "hostPath": obj{"path": pv, "type": "Directory"}}})
	}

	// The manifests, changed only as the doc comment says.
	for _, o := range rest {
		kind, name := str(o, "kind"), str(o, "metadata", "name")
		if tmpl, ok := at(o, "spec", "template", "spec").(obj); ok {
			for _, c := range list(tmpl, "containers") {
				c := c.(obj)
				switch {
				case strings.HasPrefix(str(c, "image"), "frognano-node:"):
					c["image"] = nodeImage
				case strings.Contains(str(c, "image"), "/etcd:"):
					c["image"] = etcdImage
				default:
					t.Fatalf("%s %s: image %q: the test builds no image for it", kind, name, str(c, "image"))
				}
				c["imagePullPolicy"] = "Never"
			}
			moved := map[string]string{"/var/lib/frognano": data, "/run/frognano": state}
			for _, v := range list(tmpl, "volumes") {
				if to, ok := moved[str(v, "hostPath", "path")]; ok {
					at(v, "hostPath").(obj)["path"] = to
				}
			}
			tmpl["volumes"] = append(list(tmpl, "volumes"),
				obj{"name": "host-ca", "hostPath": obj{"path": "/etc/ssl/certs/ca-certificates.crt", "type": "File"}})
			for _, c := range list(tmpl, "containers") {
				c := c.(obj)
				for _, m := range list(c, "volumeMounts") {
					if to, ok := moved[str(m, "mountPath")]; ok {
						m.(obj)["mountPath"] = to
					}
				}
				// This machine reaches the package registries through a
				// TLS-inspecting proxy whose CA only the host trusts: the
				// node gives build sandboxes its own bundle (trustHostCAs),
				// so it gets the host's.
				c["volumeMounts"] = append(list(c, "volumeMounts"),
					obj{"name": "host-ca", "mountPath": "/etc/ssl/certs/ca-certificates.crt", "readOnly": true})
				c["env"] = append(list(c, "env"),
					obj{"name": "FROGNANO_NODE_DATA_DIR", "value": data},
					obj{"name": "FROGNANO_CONTAINERD_STATE_DIR", "value": state},
					obj{"name": "FROGNANO_CONTAINERD_NAMESPACE", "value": ctrdNS})
			}
		}
		if kind == "StatefulSet" && name == "frognano-sandbox" {
			at(o, "spec").(obj)["replicas"] = 1
		}
		k.api.mustCreate(t, o)
	}

	// etcd, then the sandbox node, ready.
	deadline := time.Now().Add(6 * time.Minute)
	etcdIP := k.waitPodReady(t, "frognano-etcd-0", deadline)
	podIP := k.waitPodReady(t, "frognano-sandbox-0", deadline)

	// The node behind its token: itself among the members (from etcd,
	// found by the cluster's DNS), with the host's containerd.
	nodeURL := "http://" + net.JoinHostPort(podIP, "7070")
	client := &http.Client{Timeout: 10 * time.Second}
	get := func(path, tok string) (int, []byte) {
		req, _ := http.NewRequest("GET", nodeURL+path, nil)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, []byte(err.Error())
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		b.ReadFrom(resp.Body)
		return resp.StatusCode, b.Bytes()
	}
	if code, body := get("/v1/node", ""); code != http.StatusUnauthorized {
		t.Errorf("the node's API without the token: %d %s, want 401", code, body)
	}
	code, body := get("/v1/node", token)
	if code != http.StatusOK {
		t.Fatalf("GET /v1/node: %d %s", code, body)
	}
	var info struct {
		ID           string `json:"id"`
		Address      string `json:"address"`
		Capabilities struct {
			Containerd bool `json:"containerd"`
		} `json:"capabilities"`
	}
	if err := json.Unmarshal(body, &info); err != nil {
		t.Fatal(err)
	}
	if info.ID != "frognano-sandbox-0" || !info.Capabilities.Containerd ||
		info.Address != "frognano-sandbox-0.frognano-nodes.frognano.svc.cluster.local:7071" {
		t.Errorf("the pod's node: %s; want id frognano-sandbox-0, its DNS name as address, containerd true", body)
	}
	lease := waitMember(t, etcdIP, "frognano-sandbox-0", 0, time.Minute)

	// Sandboxes through the pod, on the machine's containerd: an
	// environment registered from a small project put in the pod's data
	// directory (the manifest's /var/lib/frognano host path). The node
	// derives its image, installs it in a build sandbox and runs its suite
	// once in a sandbox without network.
	proj := filepath.Join(data, "k8s-calc")
	if err := os.MkdirAll(proj, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, text := range map[string]string{
		"setup.py": "from setuptools import setup\nsetup(name='calc', version='0.1', py_modules=['calc'])\n",
		"calc.py":  "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n",
		"test_calc.py": "from calc import add, mul\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\ndef test_add_neg():\n    assert add(-2, 1) == -1\n\n\n" +
			"def test_mul():\n    assert mul(2, 3) == 6\n\n\ndef test_mul_zero():\n    assert mul(0, 7) == 0\n\n\ndef test_both():\n    assert add(mul(2, 2), 1) == 5\n",
	} {
		if err := os.WriteFile(filepath.Join(proj, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	typ, reply := gatewayCall(t, nodeURL, token, "environments", "frognano.messages.v1.EnvAddRequest",
		obj{"source": proj, "name": "k8s-calc", "minTests": 5}, 10*time.Minute)
	if typ != "frognano.messages.v1.EnvAddReply" {
		t.Fatalf("env add through the pod's node: %s %s\n%s", typ, clipBody(reply), k.diagnose(t))
	}
	var added struct {
		Environment struct {
			Name     string `json:"name"`
			Image    string `json:"image"`
			Baseline struct {
				Results []struct {
					Status string `json:"status"`
				} `json:"results"`
			} `json:"baseline"`
		} `json:"environment"`
	}
	if err := json.Unmarshal(reply, &added); err != nil {
		t.Fatal(err)
	}
	passed := 0
	for _, r := range added.Environment.Baseline.Results {
		if r.Status == "TEST_STATUS_PASS" {
			passed++
		}
	}
	if env := added.Environment; passed != 5 || env.Image == "" {
		t.Errorf("env add through the pod's node: %s; want 5 tests passing at baseline and an image", clipBody(reply))
	} else {
		t.Logf("the pod's node registered %s (image %s): its 5 tests passed in a sandbox", env.Name, env.Image)
	}

	// The learner asks for a GPU on a machine labelled as having one:
	// there is none, so it must wait unscheduled.
	k.waitUnschedulable(t, "app.kubernetes.io/name=frognano-learner", time.Minute)

	// Killed, the node comes back under its name (the StatefulSet) and
	// registers again.
	oldUID := k.podUID(t, "frognano-sandbox-0")
	if code, body := k.api.do(t, "DELETE", "/api/v1/namespaces/frognano/pods/frognano-sandbox-0", obj{"gracePeriodSeconds": 30}); code != http.StatusOK {
		t.Fatalf("delete the sandbox pod: %d %s", code, body)
	}
	deadline = time.Now().Add(4 * time.Minute)
	for k.podUID(t, "frognano-sandbox-0") == oldUID || k.podUID(t, "frognano-sandbox-0") == "" {
		if time.Now().After(deadline) {
			t.Fatalf("no new frognano-sandbox-0 after the old one was deleted\n%s", k.diagnose(t))
		}
		time.Sleep(time.Second)
	}
	podIP = k.waitPodReady(t, "frognano-sandbox-0", deadline)
	nodeURL = "http://" + net.JoinHostPort(podIP, "7070")
	waitMember(t, etcdIP, "frognano-sandbox-0", lease, time.Minute)
	t.Logf("frognano-sandbox-0 ran, was killed and came back at %s", podIP)
}

// removeHostNamespace deletes what the pod's node left in its namespace
// of the machine's containerd (its images; the containers of its
// sandboxes, which it destroys itself, if any are left) and the namespace.
func removeHostNamespace(t *testing.T, sock, ns string) {
	c, err := containerd.New(sock, containerd.WithTimeout(5*time.Second))
	if err != nil {
		t.Logf("cleanup: %v", err)
		return
	}
	defer c.Close()
	ctx := namespaces.WithNamespace(context.Background(), ns)
	if cs, err := c.Containers(ctx); err == nil {
		for _, ctr := range cs {
			t.Errorf("the pod's node left container %s in %s", ctr.ID(), ns)
			if task, err := ctr.Task(ctx, nil); err == nil {
				task.Delete(ctx, containerd.WithProcessKill)
			}
			ctr.Delete(ctx, containerd.WithSnapshotCleanup)
		}
	}
	imgs, _ := c.ImageService().List(ctx)
	for i, img := range imgs {
		var opts []images.DeleteOpt
		if i == len(imgs)-1 {
			opts = append(opts, images.SynchronousDelete()) // collect the content and snapshots
		}
		if err := c.ImageService().Delete(ctx, img.Name, opts...); err != nil {
			t.Logf("cleanup: image %s: %v", img.Name, err)
		}
	}
	if ls, err := c.LeasesService().List(ctx); err == nil {
		for _, l := range ls {
			c.LeasesService().Delete(ctx, l, leases.SynchronousDelete)
		}
	}
	if err := c.NamespaceService().Delete(context.Background(), ns); err != nil && !errdefs.IsNotFound(err) {
		t.Logf("cleanup: namespace %s: %v", ns, err)
	}
}

// gatewayCall sends one message to a named actor of the node through its
// HTTP gateway (actors/gateway) and returns the final answer's type and
// message ("error" and the text when none came).
func gatewayCall(t *testing.T, nodeURL, token, actor, typ string, msg obj, timeout time.Duration) (string, []byte) {
	t.Helper()
	body, _ := json.Marshal(obj{"type": typ, "message": msg, "timeout_seconds": timeout.Seconds()})
	req, _ := http.NewRequest("POST", nodeURL+"/v1/actors/"+actor, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: timeout + time.Minute}).Do(req)
	if err != nil {
		return "error", []byte(err.Error())
	}
	defer resp.Body.Close()
	var last struct {
		Type    string          `json:"type"`
		Message json.RawMessage `json:"message"`
		Error   string          `json:"error"`
	}
	dec := json.NewDecoder(resp.Body)
	for {
		var line struct {
			Type    string          `json:"type"`
			Message json.RawMessage `json:"message"`
			Error   string          `json:"error"`
		}
		if err := dec.Decode(&line); err != nil {
			break
		}
		last = line
	}
	if last.Error != "" || last.Type == "" {
		return "error", []byte(fmt.Sprintf("%d %s", resp.StatusCode, last.Error))
	}
	return last.Type, last.Message
}

// claimSizes is the storage each PersistentVolumeClaim of the manifests
// asks for, claim templates included.
func claimSizes(objs []obj) []string {
	var sizes []string
	for _, o := range objs {
		if str(o, "kind") == "PersistentVolumeClaim" {
			sizes = append(sizes, str(o, "spec", "resources", "requests", "storage"))
		}
		for _, c := range list(o, "spec", "volumeClaimTemplates") {
			sizes = append(sizes, str(c, "spec", "resources", "requests", "storage"))
		}
	}
	return sizes
}

func startKube(t *testing.T) *kubeCluster {
	t.Helper()
	// Unix socket paths are short: not under t.TempDir's long names. A
	// run killed before its cleanup leaves its directory (and mounts in
	// it) and the bridge: the next run removes them.
	sweepKilledRuns(t)
	dir, err := os.MkdirTemp("", fmt.Sprintf("fn-k8s-%d-", os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	k := &kubeCluster{dir: dir, dnsIP: podGateway, bridge: podBridge, cniNet: podCNINet,
		hadContainerLogs: fileExists("/var/log/containers"), kubeRules: kubeRules()}
	// After the API server's start, so that it runs before the server's
	// own cleanup stops it: the pods are deleted through it.
	k.api = startAPIServer(t)
	t.Cleanup(func() { k.teardown(t) })
	k.kubeconfig = filepath.Join(dir, "kubeconfig")
	writeFile(t, k.kubeconfig, fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: test
  cluster:
    server: %s
    certificate-authority: %s
    tls-server-name: kubernetes.default.svc
users:
- name: test
  user:
    token: %s
contexts:
- name: test
  context: {cluster: test, user: test}
current-context: test
`, k.api.url, k.api.caFile, k.api.token))

	// The kubelet's containerd: state of its own, the CRI plugin with the
	// locally built pause image and the test's CNI network.
	ctrd := filepath.Join(dir, "containerd")
	k.crictd = filepath.Join(ctrd, "containerd.sock")
	pauseImage := "frognano.local/k8s-test/pause:" + randHex(t, 4)
	cniConf := filepath.Join(ctrd, "cni")
	writeFile(t, filepath.Join(cniConf, "10-frognano-test.conflist"), fmt.Sprintf(`{
  "cniVersion": "0.4.0",
  "name": %q,
  "plugins": [
    {"type": "bridge", "bridge": %q, "isGateway": true, "ipMasq": false,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": %q, "gateway": %q}]], "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`, podCNINet, podBridge, podSubnet, podGateway))
	writeFile(t, filepath.Join(ctrd, "config.toml"), fmt.Sprintf(`version = 2
root = %q
state = %q
[grpc]
  address = %q
[ttrpc]
  address = %q
[debug]
  address = ""
  level = %q
[metrics]
  address = ""
[plugins]
  [plugins."io.containerd.internal.v1.opt"]
    path = %q
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = %q
    # Machines like this one withhold CAP_SYS_RESOURCE: no process may
    # lower its OOM score below containerd's own (the pod sandboxes' -998).
    restrict_oom_score_adj = true
    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "overlayfs"
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "/usr/lib/cni"
      conf_dir = %q
`, filepath.Join(ctrd, "root"), filepath.Join(ctrd, "state"), k.crictd, k.crictd+".ttrpc", ctrdLogLevel(),
		filepath.Join(ctrd, "opt"), pauseImage, cniConf))
	k.procs = append(k.procs, startProc(t, "containerd", "containerd", "--config", filepath.Join(ctrd, "config.toml")))
	waitFor(t, 30*time.Second, "the kubelet's containerd", func() error {
		c, err := containerd.New(k.crictd, containerd.WithTimeout(time.Second))
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Version(context.Background())
		return err
	}, k.procs[0])

	// The pause image, before the kubelet asks for a pod.
	pauseDir := filepath.Join(dir, "bin", "pause")
	copyFile(t, kubeTool("pause"), filepath.Join(pauseDir, "pause"), 0o755)
	rt, err := sandbox.New(context.Background(), sandbox.Config{Address: k.crictd, Namespace: "k8s.io", Agent: "off", UserNS: "off",
		StateDir: filepath.Join(dir, "sandbox-state")})
	if err != nil {
		t.Fatal(err)
	}
	base, err := rt.EnsureBaseImage(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.DeriveImage(context.Background(), base, pauseImage, map[string]string{"/": pauseDir},
		// The base image works in /repo, which a sandbox's read-only root
		// does not have (runc then fails to start the pod).
		func(c *ocispec.ImageConfig) { c.Entrypoint, c.Cmd, c.WorkingDir = []string{"/pause"}, nil, "/" }); err != nil {
		t.Fatal(err)
	}
	rt.Close()

	ports := func() string { a := etcdtest.FreePort(t); return a[strings.LastIndexByte(a, ':')+1:] }
	k.procs = append(k.procs, startProc(t, "kube-controller-manager", kubeTool("kube-controller-manager"),
		"--kubeconfig="+k.kubeconfig,
		"--authentication-kubeconfig="+k.kubeconfig,
		"--authorization-kubeconfig="+k.kubeconfig,
		"--bind-address=127.0.0.1", "--secure-port="+ports(),
		"--leader-elect=false",
		"--service-account-private-key-file="+k.api.saKey,
		"--root-ca-file="+k.api.caFile,
		"--use-service-account-credentials=false",
		"--controllers=*",
	))
	k.procs = append(k.procs, startProc(t, "kube-scheduler", kubeTool("kube-scheduler"),
		"--kubeconfig="+k.kubeconfig,
		"--authentication-kubeconfig="+k.kubeconfig,
		"--authorization-kubeconfig="+k.kubeconfig,
		"--bind-address=127.0.0.1", "--secure-port="+ports(),
		"--leader-elect=false",
	))
	// CoreDNS answers on the pods' gateway only: the bridge is made here
	// (the CNI plugin takes it as it finds it) so that CoreDNS can bind it.
	for _, args := range [][]string{
		{"link", "add", podBridge, "type", "bridge"},
		{"addr", "add", podGateway + "/24", "dev", podBridge},
		{"link", "set", podBridge, "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v %s", strings.Join(args, " "), err, out)
		}
	}
	for _, network := range []string{"udp", "tcp"} {
		var err error
		if network == "udp" {
			var c net.PacketConn
			if c, err = net.ListenPacket("udp4", podGateway+":53"); err == nil {
				c.Close()
			}
		} else {
			var l net.Listener
			if l, err = net.Listen("tcp4", podGateway+":53"); err == nil {
				l.Close()
			}
		}
		if err != nil {
			t.Skipf("port 53 of the pods' gateway is taken (a DNS server on all addresses?), CoreDNS cannot serve the pods: %v", err)
		}
	}
	corefile := filepath.Join(dir, "Corefile")
	writeFile(t, corefile, fmt.Sprintf(`.:53 {
    bind %s
    errors
    kubernetes cluster.local {
        kubeconfig %s test
    }
}
`, podGateway, k.kubeconfig))
	dns := startProc(t, "coredns", kubeTool("coredns"), "-conf", corefile)
	k.procs = append(k.procs, dns)
	resolver := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, podGateway+":53")
	}}
	waitFor(t, time.Minute, "CoreDNS", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := resolver.LookupHost(ctx, "kubernetes.default.svc.cluster.local.")
		if de, ok := err.(*net.DNSError); ok && de.IsNotFound {
			return nil // an answer: the server is up
		}
		return err
	}, dns)

	makeCgroupRoot(t)
	k.sysctls = map[string]string{}
	for _, name := range changedSysctls {
		if v, err := os.ReadFile(sysctlPath(name)); err == nil {
			k.sysctls[name] = strings.TrimSpace(string(v))
		}
	}
	k.node = "frognano-k8s-test"
	kubeletConfig := filepath.Join(dir, "kubelet.yaml")
	writeFile(t, kubeletConfig, fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: %s
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %s
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://%s
failSwapOn: false
clusterDNS: [%s]
clusterDomain: cluster.local
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "100Mi", nodefs.available: "1%%", imagefs.available: "1%%", nodefs.inodesFree: "1%%"}
serializeImagePulls: false
oomScoreAdj: 0
# No KUBE-FIREWALL or canary chains in the machine's iptables (kube-proxy
# would want them; no kube-proxy runs here).
makeIPTablesUtilChains: false
cgroupRoot: /%s
podLogsDir: %s
`, ports(), ports(), k.crictd, k.dnsIP, kubeCgroupRoot, filepath.Join(dir, "pod-logs")))
	k.procs = append(k.procs, startProc(t, "kubelet", kubeTool("kubelet"),
		"--config="+kubeletConfig,
		"--kubeconfig="+k.kubeconfig,
		"--root-dir="+filepath.Join(dir, "kubelet"),
		"--cert-dir="+filepath.Join(dir, "kubelet-pki"),
		"--hostname-override="+k.node,
		"--v=1",
	))
	return k
}

// sweepKilledRuns removes what runs of this test that were killed left:
// their directories (named after their pid), the mounts in them, the
// pods' bridge, its address leases and the kubelet's cgroups.
func sweepKilledRuns(t *testing.T) {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "fn-k8s-*"))
	live := false
	for _, d := range dirs {
		var pid int
		if _, err := fmt.Sscanf(filepath.Base(d), "fn-k8s-%d-", &pid); err != nil {
			continue
		}
		if pid != os.Getpid() && unix.Kill(pid, 0) == nil {
			live = true
			continue
		}
		t.Logf("removing %s, left by a killed run", d)
		killProcsNaming(d) // its containerds' shims
		unmountUnder(t, d)
		os.RemoveAll(d)
	}
	if !live {
		killCgroupProcs() // its pods' processes
		removeNetworkAndCgroups()
	}
}

// killProcsNaming SIGKILLs every process whose command line names
// something under dir.
func killProcsNaming(dir string) {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil || !strings.Contains(string(b), dir+"/") {
			continue
		}
		var pid int
		if _, err := fmt.Sscanf(filepath.Base(filepath.Dir(p)), "%d", &pid); err == nil && pid != os.Getpid() {
			unix.Kill(pid, unix.SIGKILL)
		}
	}
}

// kubeCgroupRoots are the kubelet's cgroup roots that exist, in every
// hierarchy (v1) or the unified one.
func kubeCgroupRoots() []string {
	roots, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", kubeCgroupRoot))
	if v2 := filepath.Join("/sys/fs/cgroup", kubeCgroupRoot); fileExists(v2) {
		roots = append(roots, v2)
	}
	return roots
}

// killCgroupProcs SIGKILLs every process in the kubelet's cgroups.
func killCgroupProcs() {
	for _, root := range kubeCgroupRoots() {
		filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err != nil || d.Name() != "cgroup.procs" {
				return nil
			}
			b, _ := os.ReadFile(p)
			for _, f := range strings.Fields(string(b)) {
				var pid int
				if _, err := fmt.Sscanf(f, "%d", &pid); err == nil && pid > 1 && pid != os.Getpid() {
					unix.Kill(pid, unix.SIGKILL)
				}
			}
			return nil
		})
	}
	time.Sleep(500 * time.Millisecond) // let the kills land before the rmdirs
}

// ctrdLogLevel is the kubelet's containerd's log level: debug with
// FROGNANO_K8S_TEST_DEBUG set (runc's own messages then reach the log; the
// whole logs go to files in FROGNANO_K8S_TEST_LOGS, a directory).
func ctrdLogLevel() string {
	if os.Getenv("FROGNANO_K8S_TEST_DEBUG") != "" {
		return "debug"
	}
	return "info"
}

// teardown deletes every pod through the kubelet (so the CRI plugin
// removes their containers and network namespaces), then stops the
// daemons, unmounts what is left under the test's directory and removes
// the pods' bridge and address leases.
func (k *kubeCluster) teardown(t *testing.T) {
	if t.Failed() {
		t.Logf("cluster state at the end:\n%s", k.diagnose(t))
	}
	var kubelet *proc
	for _, p := range k.procs {
		if p.name == "kubelet" {
			kubelet = p
		}
	}
	if kubelet != nil && kubelet.running() && k.api.client != nil {
		start := time.Now()
		k.api.do(t, "DELETE", "/api/v1/namespaces/frognano", obj{"gracePeriodSeconds": 0})
		for time.Since(start) < 2*time.Minute && k.runningTasks() != 0 {
			// StatefulSets go with the namespace; force the pods too.
			k.api.do(t, "DELETE", "/api/v1/namespaces/frognano/pods", obj{"gracePeriodSeconds": 0})
			time.Sleep(time.Second)
		}
		if n := k.runningTasks(); n != 0 {
			t.Logf("teardown: %d tasks still running in the kubelet's containerd after 2 min; killing them", n)
		} else {
			t.Logf("teardown: the kubelet stopped every pod in %.1f s", time.Since(start).Seconds())
		}
	}
	for i := len(k.procs) - 1; i >= 0; i-- {
		if k.procs[i].name == "containerd" {
			k.killCRITasks(t)
		}
		k.procs[i].stop(10 * time.Second)
	}
	unmountUnder(t, k.dir)
	// The kubelet links every container's log into /var/log/containers
	// (a fixed path); the links point into the test's directory.
	links, _ := filepath.Glob("/var/log/containers/*.log")
	for _, l := range links {
		if target, err := os.Readlink(l); err == nil && strings.HasPrefix(target, k.dir+"/") {
			os.Remove(l)
		}
	}
	if !k.hadContainerLogs {
		os.Remove("/var/log/containers") // only if empty
	}
	if err := os.RemoveAll(k.dir); err != nil {
		t.Logf("teardown: %v", err)
	}
	removeNetworkAndCgroups()
	for name, want := range k.sysctls {
		if got, err := os.ReadFile(sysctlPath(name)); err == nil && strings.TrimSpace(string(got)) != want {
			if err := os.WriteFile(sysctlPath(name), []byte(want), 0o644); err != nil {
				t.Errorf("teardown: restore %s = %s (it is %s): %v", name, want, strings.TrimSpace(string(got)), err)
			}
		}
	}
	if n := kubeRules(); n > k.kubeRules {
		t.Errorf("the machine's iptables name KUBE- chains %d times after the test, %d before: the kubelet left them", n, k.kubeRules)
	}
}

// changedSysctls are what the kubelet sets at start (vm.overcommit_memory=1,
// kernel.panic=10, kernel.panic_on_oops=1, …: its container manager's
// kernel tunables) and the CNI bridge as the pods' gateway
// (net.ipv4.ip_forward=1).
var changedSysctls = []string{
	"vm.overcommit_memory", "vm.panic_on_oom", "kernel.panic", "kernel.panic_on_oops",
	"kernel.keys.root_maxkeys", "kernel.keys.root_maxbytes", "net.ipv4.ip_forward",
}

func sysctlPath(name string) string {
	return filepath.Join("/proc/sys", strings.ReplaceAll(name, ".", "/"))
}

// makeCgroupRoot makes the kubelet's cgroup root in every hierarchy (the
// kubelet requires it to exist), with the parent's CPUs and memory nodes
// where cpusets are a hierarchy of their own.
func makeCgroupRoot(t *testing.T) {
	t.Helper()
	if fileExists("/sys/fs/cgroup/cgroup.controllers") { // unified (v2)
		if err := os.MkdirAll(filepath.Join("/sys/fs/cgroup", kubeCgroupRoot), 0o755); err != nil {
			t.Fatal(err)
		}
		return
	}
	hierarchies, _ := filepath.Glob("/sys/fs/cgroup/*")
	for _, h := range hierarchies {
		if fi, err := os.Lstat(h); err != nil || !fi.IsDir() || !fileExists(filepath.Join(h, "cgroup.procs")) {
			continue // a link to a co-mounted hierarchy, or not a hierarchy
		}
		root := filepath.Join(h, kubeCgroupRoot)
		if err := os.MkdirAll(root, 0o755); err != nil {
			t.Fatalf("cgroup root: %v", err)
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			if v, err := os.ReadFile(filepath.Join(h, f)); err == nil {
				if err := os.WriteFile(filepath.Join(root, f), v, 0o644); err != nil {
					t.Fatalf("cgroup root %s: %v", f, err)
				}
			}
		}
	}
}

// removeNetworkAndCgroups removes the pods' bridge, its address leases and
// the kubelet's cgroups, once nothing runs in them.
func removeNetworkAndCgroups() {
	exec.Command("ip", "link", "del", podBridge).Run()
	os.RemoveAll(filepath.Join("/var/lib/cni/networks", podCNINet))
	// The plugins' result caches: the network's, and the loopback's of
	// the same pod sandboxes.
	results, _ := filepath.Glob(filepath.Join("/var/lib/cni/results", podCNINet+"-*"))
	for _, r := range results {
		id := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(r), podCNINet+"-"), "-eth0")
		os.Remove(r)
		os.Remove(filepath.Join("/var/lib/cni/results", "cni-loopback-"+id+"-lo"))
	}
	for _, root := range kubeCgroupRoots() {
		var dirs []string
		filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			unix.Rmdir(dirs[i])
		}
	}
}

// runningTasks counts the running tasks in the kubelet's containerd (-1
// when it does not answer).
func (k *kubeCluster) runningTasks() int {
	c, err := containerd.New(k.crictd, containerd.WithTimeout(time.Second))
	if err != nil {
		return -1
	}
	defer c.Close()
	ctx := namespaces.WithNamespace(context.Background(), "k8s.io")
	cs, err := c.Containers(ctx)
	if err != nil {
		return -1
	}
	n := 0
	for _, ctr := range cs {
		if task, err := ctr.Task(ctx, nil); err == nil {
			if st, err := task.Status(ctx); err == nil && st.Status != containerd.Stopped {
				n++
			}
		}
	}
	return n
}

// killCRITasks kills and deletes whatever still runs in the kubelet's
// containerd, so no process outlives the test.
func (k *kubeCluster) killCRITasks(t *testing.T) {
	c, err := containerd.New(k.crictd, containerd.WithTimeout(time.Second))
	if err != nil {
		return
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(namespaces.WithNamespace(context.Background(), "k8s.io"), time.Minute)
	defer cancel()
	cs, _ := c.Containers(ctx)
	var netns []string
	for _, ctr := range cs {
		// A pod's network namespace, which only the CRI plugin's stop
		// would remove (with the pod's end of its veth pair).
		if spec, err := ctr.Spec(ctx); err == nil && spec.Linux != nil {
			for _, ns := range spec.Linux.Namespaces {
				if ns.Type == "network" && strings.HasPrefix(ns.Path, "/var/run/netns/cni-") {
					netns = append(netns, ns.Path)
				}
			}
		}
		if task, err := ctr.Task(ctx, nil); err == nil {
			task.Kill(ctx, syscall.SIGKILL)
			if ch, err := task.Wait(ctx); err == nil {
				select {
				case <-ch:
				case <-time.After(10 * time.Second):
				}
			}
			task.Delete(ctx, containerd.WithProcessKill)
		}
		if err := ctr.Delete(ctx, containerd.WithSnapshotCleanup); err != nil {
			t.Logf("teardown: container %s: %v", ctr.ID(), err)
		}
	}
	for _, p := range netns {
		if fileExists(p) {
			t.Logf("teardown: removing the network namespace %s", p)
			unix.Unmount(p, unix.MNT_DETACH)
			os.Remove(p)
		}
	}
}

// unmountUnder unmounts every mount below dir, deepest first.
func unmountUnder(t *testing.T, dir string) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return
	}
	var points []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 {
			p := unescapeMount(f[4])
			if p == dir || strings.HasPrefix(p, dir+"/") {
				points = append(points, p)
			}
		}
	}
	slices.SortFunc(points, func(a, b string) int { return len(b) - len(a) })
	for _, p := range points {
		if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && err != unix.EINVAL && err != unix.ENOENT {
			t.Logf("teardown: unmount %s: %v", p, err)
		}
	}
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space, …).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v int
			if _, err := fmt.Sscanf(s[i+1:i+4], "%o", &v); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// sharedMount makes dir a mount point of its own with shared propagation:
// a Bidirectional volume (the sandbox node's data directory) must be on a
// shared mount, and the host's / here is private.
func sharedMount(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(dir, dir, "", unix.MS_BIND, ""); err != nil {
		t.Fatalf("bind %s: %v", dir, err)
	}
	if err := unix.Mount("", dir, "", unix.MS_SHARED, ""); err != nil {
		t.Fatalf("make %s shared: %v", dir, err)
	}
}

// waitFor polls check until it succeeds; a daemon that exits meanwhile
// fails the test with its log.
func waitFor(t *testing.T, limit time.Duration, what string, check func() error, p *proc) {
	t.Helper()
	deadline := time.Now().Add(limit)
	var err error
	for time.Now().Before(deadline) {
		if err = check(); err == nil {
			return
		}
		if p != nil && !p.running() {
			t.Fatalf("%s exited:\n%s", p.name, tail(p.log.String()))
		}
		time.Sleep(200 * time.Millisecond)
	}
	msg := ""
	if p != nil {
		msg = tail(p.log.String())
	}
	t.Fatalf("%s not ready after %s: %v\n%s", what, limit, err, msg)
}

func (k *kubeCluster) proc(name string) *proc {
	for _, p := range k.procs {
		if p.name == name {
			return p
		}
	}
	return nil
}

// waitNodeReady waits for the kubelet's Node to be Ready.
func (k *kubeCluster) waitNodeReady(t *testing.T, limit time.Duration) {
	t.Helper()
	waitFor(t, limit, "node "+k.node, func() error {
		code, body := k.api.do(t, "GET", "/api/v1/nodes/"+k.node, nil)
		if code != http.StatusOK {
			return fmt.Errorf("%d %s", code, clipBody(body))
		}
		var n struct {
			Status struct {
				Conditions []struct{ Type, Status, Reason, Message string } `json:"conditions"`
			} `json:"status"`
		}
		json.Unmarshal(body, &n)
		for _, c := range n.Status.Conditions {
			if c.Type == "Ready" {
				if c.Status == "True" {
					return nil
				}
				return fmt.Errorf("not ready: %s %s", c.Reason, c.Message)
			}
		}
		return fmt.Errorf("no Ready condition yet")
	}, k.proc("kubelet"))
}

// needAllocatable skips the test on a machine whose node cannot take the
// sandbox pod's requests (cpu "2", memory 4Gi in sandbox-nodes.yaml).
func (k *kubeCluster) needAllocatable(t *testing.T, cpus int, memory int64) {
	t.Helper()
	_, body := k.api.do(t, "GET", "/api/v1/nodes/"+k.node, nil)
	var n struct {
		Status struct {
			Allocatable map[string]string `json:"allocatable"`
		} `json:"status"`
	}
	json.Unmarshal(body, &n)
	cpu, mem := n.Status.Allocatable["cpu"], n.Status.Allocatable["memory"]
	var c int
	if _, err := fmt.Sscanf(cpu, "%d", &c); err != nil || strings.HasSuffix(cpu, "m") {
		var milli int
		fmt.Sscanf(cpu, "%dm", &milli)
		c = milli / 1000
	}
	var m int64
	fmt.Sscanf(mem, "%d", &m)
	switch {
	case strings.HasSuffix(mem, "Ki"):
		m <<= 10
	case strings.HasSuffix(mem, "Mi"):
		m <<= 20
	case strings.HasSuffix(mem, "Gi"):
		m <<= 30
	}
	if c < cpus || m < memory {
		t.Skipf("this machine's node has %s CPUs and %s of memory allocatable; the sandbox pod asks for %d and %d GiB", cpu, mem, cpus, memory>>30)
	}
}

type podStatus struct {
	Metadata struct {
		Name string `json:"name"`
		UID  string `json:"uid"`
	} `json:"metadata"`
	Status struct {
		Phase      string                                           `json:"phase"`
		PodIP      string                                           `json:"podIP"`
		Conditions []struct{ Type, Status, Reason, Message string } `json:"conditions"`
		Containers []struct {
			Name         string         `json:"name"`
			Ready        bool           `json:"ready"`
			RestartCount int            `json:"restartCount"`
			State        map[string]any `json:"state"`
			LastState    map[string]any `json:"lastState"`
		} `json:"containerStatuses"`
	} `json:"status"`
}

func (k *kubeCluster) pod(t *testing.T, name string) (podStatus, bool) {
	var p podStatus
	code, body := k.api.do(t, "GET", "/api/v1/namespaces/frognano/pods/"+name, nil)
	if code != http.StatusOK {
		return p, false
	}
	json.Unmarshal(body, &p)
	return p, true
}

func (k *kubeCluster) podUID(t *testing.T, name string) string {
	p, _ := k.pod(t, name)
	return p.Metadata.UID
}

// waitPodReady waits for the pod's Ready condition and returns its IP.
func (k *kubeCluster) waitPodReady(t *testing.T, name string, deadline time.Time) string {
	t.Helper()
	for {
		p, ok := k.pod(t, name)
		if ok {
			for _, c := range p.Status.Conditions {
				if c.Type == "Ready" && c.Status == "True" && p.Status.PodIP != "" {
					t.Logf("%s ready at %s", name, p.Status.PodIP)
					return p.Status.PodIP
				}
			}
		}
		if !k.proc("kubelet").running() {
			t.Fatalf("the kubelet exited:\n%s", tail(k.proc("kubelet").log.String()))
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod %s not ready in time\n%s", name, k.diagnose(t))
		}
		time.Sleep(time.Second)
	}
}

// waitMember waits for member's registration in the pod etcd (read
// there, from the host, at the etcd pod's address, under the ConfigMap's
// prefix and cluster name) under a lease other than notLease, and returns
// its lease.
func waitMember(t *testing.T, etcdIP, member string, notLease clientv3.LeaseID, limit time.Duration) clientv3.LeaseID {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{net.JoinHostPort(etcdIP, "2379")}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var lease clientv3.LeaseID
	waitFor(t, limit, member+" registered in etcd", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		res, err := c.Get(ctx, "/frognano/frognano/members/", clientv3.WithPrefix())
		if err != nil {
			return err
		}
		var keys []string
		for _, kv := range res.Kvs {
			keys = append(keys, string(kv.Key))
			mine := strings.HasSuffix(string(kv.Key), "/"+member) || strings.Contains(string(kv.Value), member)
			if mine && clientv3.LeaseID(kv.Lease) != notLease && kv.Lease != 0 {
				lease = clientv3.LeaseID(kv.Lease)
				return nil
			}
		}
		return fmt.Errorf("keys under /frognano/frognano/members/: %v", keys)
	}, nil)
	return lease
}

// waitUnschedulable waits for the pods matching selector to be reported
// unschedulable by the scheduler.
func (k *kubeCluster) waitUnschedulable(t *testing.T, selector string, limit time.Duration) {
	t.Helper()
	waitFor(t, limit, "the scheduler's verdict on "+selector, func() error {
		code, body := k.api.do(t, "GET", "/api/v1/namespaces/frognano/pods?labelSelector="+url.QueryEscape(selector), nil)
		if code != http.StatusOK {
			return fmt.Errorf("%d %s", code, clipBody(body))
		}
		var l struct{ Items []podStatus }
		json.Unmarshal(body, &l)
		if len(l.Items) == 0 {
			return fmt.Errorf("no pod yet")
		}
		for _, p := range l.Items {
			if p.Status.Phase != "Pending" {
				t.Fatalf("pod %s is %s on a machine without a GPU", p.Metadata.Name, p.Status.Phase)
			}
			for _, c := range p.Status.Conditions {
				if c.Type == "PodScheduled" && c.Status == "False" && c.Reason == "Unschedulable" {
					// The learner asks for more CPU and memory than this
					// machine may have, too: the reason must be the GPU label.
					if !strings.Contains(c.Message, "didn't match Pod's node affinity/selector") {
						return fmt.Errorf("unschedulable, but not for its node selector: %s", c.Message)
					}
					t.Logf("%s: unschedulable: %s", p.Metadata.Name, c.Message)
					return nil
				}
			}
		}
		return fmt.Errorf("not reported unschedulable yet")
	}, nil)
}

// diagnose is what a failure needs: the pods, recent events, and the ends
// of the kubelet's and containerd's logs.
func (k *kubeCluster) diagnose(t *testing.T) string {
	var b strings.Builder
	if k.api != nil && k.api.client != nil {
		_, body := k.api.do(t, "GET", "/api/v1/namespaces/frognano/pods", nil)
		var l struct{ Items []podStatus }
		json.Unmarshal(body, &l)
		for _, p := range l.Items {
			st, _ := json.Marshal(p.Status)
			fmt.Fprintf(&b, "pod %s: %s\n", p.Metadata.Name, st)
		}
		_, body = k.api.do(t, "GET", "/api/v1/namespaces/frognano/events", nil)
		var ev struct {
			Items []struct {
				Reason, Message string
				InvolvedObject  struct{ Name string } `json:"involvedObject"`
			}
		}
		json.Unmarshal(body, &ev)
		for i, e := range ev.Items {
			if i >= len(ev.Items)-30 {
				fmt.Fprintf(&b, "event %s: %s %s\n", e.InvolvedObject.Name, e.Reason, e.Message)
			}
		}
	}
	for _, p := range k.procs {
		if p.name == "kubelet" || p.name == "containerd" || p.name == "coredns" {
			fmt.Fprintf(&b, "--- %s log:\n%s\n", p.name, tail(p.log.String()))
		}
	}
	return b.String()
}

// mustCreate stores o or fails.
func (s *apiServer) mustCreate(t *testing.T, o obj) {
	t.Helper()
	if code, body := s.create(t, o); code != http.StatusCreated {
		t.Fatalf("%s %s: %d %s", str(o, "kind"), str(o, "metadata", "name"), code, body)
	}
}

// patch merges fields into the object at path.
func (s *apiServer) patch(t *testing.T, path string, fields obj) {
	t.Helper()
	data, _ := json.Marshal(fields)
	req, _ := http.NewRequest("PATCH", s.url+path, bytes.NewReader(data))
	req.Header.Set("Authorization", "Bearer "+s.token)
	req.Header.Set("Content-Type", "application/merge-patch+json")
	resp, err := s.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var b bytes.Buffer
		b.ReadFrom(resp.Body)
		t.Fatalf("PATCH %s: %d %s", path, resp.StatusCode, b.String())
	}
}

func clipBody(b []byte) string {
	if len(b) > 600 {
		return string(b[:600]) + "…"
	}
	return string(b)
}

func randHex(t *testing.T, n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

func readString(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func copyFile(t *testing.T, src, dst string, mode os.FileMode) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, mode); err != nil {
		t.Fatal(err)
	}
}

// goBuild builds pkg into dir (the test's GOFLAGS apply: the Makefile's
// lazy binding of the NVIDIA driver).
func goBuild(t *testing.T, dir, pkg string) {
	t.Helper()
	cmd := exec.Command("go", "build", "-o", dir+"/", pkg)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, out)
	}
}
