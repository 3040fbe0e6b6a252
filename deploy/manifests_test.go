// Package deploy holds frognano's Kubernetes manifests. There is no
// Kubernetes cluster where frognano is built and tested: this test parses
// every manifest, checks each object's kind and required fields and the
// references between them, and loads the node configuration each pod would
// run with through the node's own config loader.
package deploy

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/frognano/frognano/runtime/config"
)

type obj = map[string]any

// at walks nested maps; nil when a step is missing.
func at(v any, path ...string) any {
	for _, p := range path {
		m, ok := v.(obj)
		if !ok {
			return nil
		}
		v = m[p]
	}
	return v
}

func str(v any, path ...string) string { s, _ := at(v, path...).(string); return s }
func list(v any, path ...string) []any { l, _ := at(v, path...).([]any); return l }

// load reads every document of every manifest.
func load(t *testing.T) []obj {
	t.Helper()
	files, err := filepath.Glob("*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	var objs []obj
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(data))
		for i := 0; ; i++ {
			var o obj
			err := dec.Decode(&o)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s document %d: %v", f, i, err)
			}
			if o == nil {
				continue
			}
			o["_file"] = f
			objs = append(objs, o)
		}
	}
	return objs
}

var apiVersions = map[string]string{
	"Namespace": "v1", "ConfigMap": "v1", "Service": "v1", "PersistentVolumeClaim": "v1",
	"StatefulSet": "apps/v1", "Deployment": "apps/v1",
}

func TestManifests(t *testing.T) {
	objs := load(t)
	byKind := map[string][]obj{}
	for _, o := range objs {
		kind, name := str(o, "kind"), str(o, "metadata", "name")
		where := o["_file"].(string) + ": " + kind + " " + name
		want, ok := apiVersions[kind]
		if !ok {
			t.Errorf("%s: unexpected kind", where)
			continue
		}
		if str(o, "apiVersion") != want {
			t.Errorf("%s: apiVersion %q, want %q", where, str(o, "apiVersion"), want)
		}
		if name == "" {
			t.Errorf("%s: no metadata.name", where)
		}
		if kind != "Namespace" && str(o, "metadata", "namespace") != "frognano" {
			t.Errorf("%s: namespace %q, want frognano", where, str(o, "metadata", "namespace"))
		}
		byKind[kind] = append(byKind[kind], o)
	}
	for kind := range apiVersions {
		if len(byKind[kind]) == 0 {
			t.Errorf("no %s among the manifests", kind)
		}
	}
	find := func(kind, name string) obj {
		for _, o := range byKind[kind] {
			if str(o, "metadata", "name") == name {
				return o
			}
		}
		return nil
	}

	// Workloads: selectors match their pods, volumes and services exist.
	workloads := append(slices.Clone(byKind["StatefulSet"]), byKind["Deployment"]...)
	for _, w := range workloads {
		name := str(w, "kind") + " " + str(w, "metadata", "name")
		tmpl := at(w, "spec", "template")
		sel, _ := at(w, "spec", "selector", "matchLabels").(obj)
		labels, _ := at(tmpl, "metadata", "labels").(obj)
		if len(sel) == 0 {
			t.Errorf("%s: no spec.selector.matchLabels", name)
		}
		for k, v := range sel {
			if labels[k] != v {
				t.Errorf("%s: selector %s=%v does not match the pod template's labels %v", name, k, v, labels)
			}
		}
		if s := str(w, "spec", "serviceName"); str(w, "kind") == "StatefulSet" {
			svc := find("Service", s)
			if svc == nil || str(svc, "spec", "clusterIP") != "None" {
				t.Errorf("%s: serviceName %q is not a headless Service of the manifests", name, s)
			}
		}
		volumes := map[string]obj{}
		for _, v := range list(tmpl, "spec", "volumes") {
			volumes[str(v, "name")] = v.(obj)
			if cm := str(v, "configMap", "name"); cm != "" && find("ConfigMap", cm) == nil {
				t.Errorf("%s: volume %s names ConfigMap %q, not in the manifests", name, str(v, "name"), cm)
			}
			if pvc := str(v, "persistentVolumeClaim", "claimName"); pvc != "" && find("PersistentVolumeClaim", pvc) == nil {
				t.Errorf("%s: volume %s names claim %q, not in the manifests", name, str(v, "name"), pvc)
			}
		}
		containers := list(tmpl, "spec", "containers")
		if len(containers) == 0 {
			t.Errorf("%s: no containers", name)
		}
		for _, c := range containers {
			if str(c, "name") == "" || str(c, "image") == "" {
				t.Errorf("%s: a container without name or image", name)
			}
			for _, m := range list(c, "volumeMounts") {
				if volumes[str(m, "name")] == nil && !claimTemplate(w, str(m, "name")) {
					t.Errorf("%s: mount of unknown volume %q", name, str(m, "name"))
				}
			}
		}
	}
	for _, s := range byKind["Service"] {
		sel, _ := at(s, "spec", "selector").(obj)
		matched := false
		for _, w := range workloads {
			labels, _ := at(w, "spec", "template", "metadata", "labels").(obj)
			ok := len(sel) > 0
			for k, v := range sel {
				ok = ok && labels[k] == v
			}
			matched = matched || ok
		}
		if !matched {
			t.Errorf("Service %s selects no workload's pods (%v)", str(s, "metadata", "name"), sel)
		}
	}

	// The sandbox nodes reach the host's containerd, privileged.
	sb := find("StatefulSet", "frognano-sandbox")
	if sb == nil {
		t.Fatal("no StatefulSet frognano-sandbox")
	}
	node := list(sb, "spec", "template", "spec", "containers")[0]
	if at(node, "securityContext", "privileged") != true {
		t.Error("sandbox nodes are not privileged")
	}
	hostPaths := map[string]bool{}
	for _, v := range list(sb, "spec", "template", "spec", "volumes") {
		if p := str(v, "hostPath", "path"); p != "" {
			hostPaths[p] = true
		}
	}
	for _, p := range []string{"/run/containerd", "/var/lib/containerd", "/var/lib/frognano"} {
		if !hostPaths[p] {
			t.Errorf("sandbox nodes do not mount the host's %s", p)
		}
	}

	// The learner asks for a GPU and is scheduled where one is.
	ln := find("Deployment", "frognano-learner")
	if ln == nil {
		t.Fatal("no Deployment frognano-learner")
	}
	lc := list(ln, "spec", "template", "spec", "containers")[0]
	if gpu := at(lc, "resources", "limits", "nvidia.com/gpu"); gpu != 1 {
		t.Errorf("learner nvidia.com/gpu limit = %v, want 1", gpu)
	}
	if sel, _ := at(ln, "spec", "template", "spec", "nodeSelector").(obj); len(sel) == 0 {
		t.Error("learner has no nodeSelector")
	}

	// Every node's configuration, as its pod would load it, is valid, on
	// the etcd provider, with the API token from the Secret.
	cm := find("ConfigMap", "frognano-config")
	if cm == nil {
		t.Fatal("no ConfigMap frognano-config")
	}
	file := filepath.Join(t.TempDir(), "node.yaml")
	if err := os.WriteFile(file, []byte(str(cm, "data", "node.yaml")), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, w := range workloads {
		if str(w, "metadata", "name") == "frognano-etcd" {
			continue
		}
		name := str(w, "metadata", "name")
		c := list(w, "spec", "template", "spec", "containers")[0]
		env := podEnv(t, name, c, name+"-0")
		if !slices.Contains(list(c, "args"), "/etc/frognano/node.yaml") {
			t.Errorf("%s: does not run with --config /etc/frognano/node.yaml: %v", name, list(c, "args"))
		}
		cfg, err := config.Load(file, env)
		if err == nil {
			err = cfg.Validate()
		}
		if err != nil {
			t.Errorf("%s: the node's configuration: %v", name, err)
			continue
		}
		if cfg.Cluster.Provider != config.ProviderEtcd || len(cfg.Cluster.EtcdEndpoints) == 0 {
			t.Errorf("%s: cluster %+v, want the etcd provider", name, cfg.Cluster)
		}
		for _, e := range cfg.Cluster.EtcdEndpoints {
			host := strings.Split(e, ".")[0]
			if find("Service", host) == nil {
				t.Errorf("%s: etcd endpoint %s is not a Service of the manifests", name, e)
			}
		}
		if cfg.Node.Advertise == "" || !cfg.Remote.TLS() {
			t.Errorf("%s: advertise %q, TLS %v", name, cfg.Node.Advertise, cfg.Remote.TLS())
		}
	}
}

func claimTemplate(w obj, name string) bool {
	for _, c := range list(w, "spec", "volumeClaimTemplates") {
		if str(c, "metadata", "name") == name {
			return true
		}
	}
	return false
}

var ref = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// podEnv is the container's environment as Kubernetes would set it for
// the pod named pod: $(VAR) expanded from variables defined before it, the
// API token from its Secret (a stand-in value here).
func podEnv(t *testing.T, name string, c any, pod string) []string {
	t.Helper()
	vals := map[string]string{}
	var env []string
	sawToken := false
	for _, e := range list(c, "env") {
		k := str(e, "name")
		v := str(e, "value")
		switch {
		case str(e, "valueFrom", "fieldRef", "fieldPath") == "metadata.name":
			v = pod
		case str(e, "valueFrom", "secretKeyRef", "name") != "":
			if k != "FROGNANO_NODE_API_TOKEN" {
				t.Errorf("%s: unexpected secret in %s", name, k)
			}
			sawToken = true
			v = strings.Repeat("t", 32)
		}
		v = ref.ReplaceAllStringFunc(v, func(m string) string {
			r, ok := vals[ref.FindStringSubmatch(m)[1]]
			if !ok {
				t.Errorf("%s: %s refers to %s, not defined before it", name, k, m)
			}
			return r
		})
		vals[k] = v
		env = append(env, k+"="+v)
	}
	if !sawToken {
		t.Errorf("%s: the API token does not come from a Secret", name)
	}
	return env
}
