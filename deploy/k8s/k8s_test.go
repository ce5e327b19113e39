package k8s

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/cure-oss/cure/provisioner-lite/pki"
	"github.com/cure-oss/cure/provisioner-lite/statedir"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// overlays are the kustomizations a site applies, with the namespace
// each puts every object in.
var overlays = map[string]string{"overlays/dev": "cure-dev", "overlays/production": "cure", "overlays/proxy-dhcp": "cure"}

// decoder decodes YAML into the core, apps, policy and networking groups' Go types
// strictly: an unknown or duplicated field is an error, not dropped.
func decoder(t *testing.T) *kjson.Serializer {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, appsv1.AddToScheme, policyv1.AddToScheme, networkingv1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	return kjson.NewSerializerWithOptions(kjson.DefaultMetaFactory, scheme, scheme, kjson.SerializerOptions{Yaml: true, Strict: true})
}

// render runs kustomize on dir (of fsys) and decodes every object.
func render(t *testing.T, fsys filesys.FileSystem, dir string) ([]runtime.Object, error) {
	t.Helper()
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize %s: %w", dir, err)
	}
	dec := decoder(t)
	var objs []runtime.Object
	for _, r := range m.Resources() {
		y, err := r.AsYAML()
		if err != nil {
			return nil, err
		}
		obj, _, err := dec.Decode(y, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("%s %s/%s: %w", dir, r.GetKind(), r.GetName(), err)
		}
		objs = append(objs, obj)
	}
	return objs, nil
}

// TestKubernetesManifests renders every overlay, decodes it strictly, and
// checks what a site relies on: names and namespaces, the probes on the
// metrics listener, the secrets from Secrets, a pinned image, replicas in
// production, the proxy DHCP privileges only in their overlay, the peer
// URL from the pod's IP, and every
// flag and CURE_* variable the pods pass taken by the real provisioner-lite.
func TestKubernetesManifests(t *testing.T) {
	bin := buildCoordinator(t)
	for dir, ns := range overlays {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			objs, err := render(t, filesys.MakeFsOnDisk(), dir)
			if err != nil {
				t.Fatal(err)
			}
			var sts *appsv1.StatefulSet
			config := map[string]string{}
			for _, o := range objs {
				checkObject(t, o, ns)
				switch o := o.(type) {
				case *appsv1.StatefulSet:
					if o.Name == "cure-coordinator" {
						sts = o
					}
				case *corev1.ConfigMap:
					if strings.HasPrefix(o.Name, "cure-config") {
						config = o.Data
					}
				}
			}
			if sts == nil {
				t.Fatal("no StatefulSet cure-coordinator")
			}
			checkCoordinator(t, filepath.Base(dir), sts, objs)
			runCoordinator(t, bin, filepath.Base(dir), sts, config)
		})
	}
}

// checkObject: a kind of the three groups, named, in the overlay's
// namespace, its containers' images pinned.
func checkObject(t *testing.T, o runtime.Object, ns string) {
	t.Helper()
	var meta interface {
		GetName() string
		GetNamespace() string
	}
	var pod *corev1.PodSpec
	switch o := o.(type) {
	case *appsv1.StatefulSet:
		meta, pod = o, &o.Spec.Template.Spec
	case *appsv1.Deployment:
		meta, pod = o, &o.Spec.Template.Spec
	case *corev1.Service, *corev1.ServiceAccount, *corev1.ConfigMap, *corev1.Secret, *corev1.PersistentVolumeClaim, *policyv1.PodDisruptionBudget, *networkingv1.NetworkPolicy:
		meta = o.(interface {
			GetName() string
			GetNamespace() string
		})
	default:
		t.Errorf("an object of an unexpected kind: %T", o)
		return
	}
	if meta.GetName() == "" || meta.GetNamespace() != ns {
		t.Errorf("%T %q: namespace %q, want a name and %q", o, meta.GetName(), meta.GetNamespace(), ns)
	}
	if pod == nil {
		return
	}
	pinned := regexp.MustCompile(`^[a-z0-9.-]+(:[0-9]+)?/[a-z0-9._/-]+(:[A-Za-z0-9][A-Za-z0-9._-]*|@sha256:[0-9a-f]{64})$`)
	for _, c := range slices.Concat(pod.InitContainers, pod.Containers) {
		if !pinned.MatchString(c.Image) || strings.HasSuffix(c.Image, ":latest") || !strings.ContainsAny(c.Image, ":@") {
			t.Errorf("%s: container %s: image %q: want a registry, a name and a pinned tag or digest", meta.GetName(), c.Name, c.Image)
		}
		sc := c.SecurityContext
		if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
			sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
			t.Errorf("%s: container %s: want a read-only root, no privilege escalation and every capability dropped", meta.GetName(), c.Name)
		}
		if c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
			t.Errorf("%s: container %s: no memory request or limit", meta.GetName(), c.Name)
		}
	}
}

// checkCoordinator checks the coordinator's pod.
func checkCoordinator(t *testing.T, overlay string, sts *appsv1.StatefulSet, objs []runtime.Object) {
	t.Helper()
	spec := sts.Spec.Template.Spec
	c := container(t, spec.Containers, "provisioner-lite")
	replicas := int32(1)
	if sts.Spec.Replicas != nil {
		replicas = *sts.Spec.Replicas
	}
	if overlay != "dev" && replicas < 2 {
		t.Errorf("replicas %d: want several instances behind one address", replicas)
	}
	port := map[string]int32{}
	for _, p := range c.Ports {
		port[p.Name] = p.ContainerPort
	}
	if port["http"] != 8080 || port["grpc"] != 8443 || port["https-boot"] != 8444 || port["metrics"] != 9464 {
		t.Errorf("container ports %v: want http 8080, grpc 8443, https-boot 8444, metrics 9464", port)
	}
	for name, p := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
		want := map[string]string{"readiness": "/readyz", "liveness": "/healthz"}[name]
		if p == nil || p.HTTPGet == nil {
			t.Errorf("%s probe: want GET %s on the port metrics", name, want)
		} else if p.HTTPGet.Path != want || p.HTTPGet.Port.String() != "metrics" {
			t.Errorf("%s probe: GET %s on port %s, want GET %s on the port metrics", name, p.HTTPGet.Path, p.HTTPGet.Port.String(), want)
		}
	}
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	if ref := env["CURE_DB"].ValueFrom; ref == nil || ref.SecretKeyRef == nil || env["CURE_DB"].Value != "" {
		t.Error("CURE_DB: want it from a Secret (secretKeyRef) and nowhere else")
	}
	if ref := env["POD_IP"].ValueFrom; ref == nil || ref.FieldRef == nil || ref.FieldRef.FieldPath != "status.podIP" ||
		!strings.Contains(env["CURE_PEER_URL"].Value, "$(POD_IP)") {
		t.Errorf("POD_IP %+v, CURE_PEER_URL %q: want the pod's IP (status.podIP) in the peer URL, so peers reach this instance and not the Service",
			env["POD_IP"].ValueFrom, env["CURE_PEER_URL"].Value)
	}
	checkStateFromSecret(t, spec)
	checkPrivileges(t, overlay, spec, c)
	checkServiceAndPDB(t, overlay, objs)
}

func container(t *testing.T, cs []corev1.Container, name string) corev1.Container {
	t.Helper()
	for _, c := range cs {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no container %s", name)
	return corev1.Container{}
}

// checkStateFromSecret: the initContainer seeds the state dir from the
// Secret cure-state, mounted read-only.
func checkStateFromSecret(t *testing.T, spec corev1.PodSpec) {
	t.Helper()
	seed := container(t, spec.InitContainers, "seed-state")
	if len(seed.Args) == 0 || seed.Args[0] != "seed" {
		t.Errorf("seed-state: args %q: want provisioner-lite seed", seed.Args)
	}
	var secretVol string
	for _, v := range spec.Volumes {
		if v.Secret != nil && v.Secret.SecretName == "cure-state" {
			secretVol = v.Name
		}
	}
	from := flagValue(seed.Args, "--from")
	ok := false
	for _, m := range seed.VolumeMounts {
		ok = ok || m.Name == secretVol && m.MountPath == from && m.ReadOnly
	}
	if secretVol == "" || !ok {
		t.Errorf("seed-state: --from %q is not the Secret cure-state mounted read-only", from)
	}
}

// checkPrivileges: non-root without capabilities, except the proxy-dhcp
// overlay's two on the host network.
func checkPrivileges(t *testing.T, overlay string, spec corev1.PodSpec, c corev1.Container) {
	t.Helper()
	added := c.SecurityContext.Capabilities.Add
	if overlay == "proxy-dhcp" {
		if !spec.HostNetwork || !slices.Equal(added, []corev1.Capability{"NET_BIND_SERVICE", "NET_RAW"}) {
			t.Errorf("proxy-dhcp: host network %v, capabilities %v: want the host network and NET_BIND_SERVICE, NET_RAW", spec.HostNetwork, added)
		}
		return
	}
	psc := spec.SecurityContext
	if spec.HostNetwork || len(added) > 0 || psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 {
		t.Errorf("%s: want a non-root pod off the host network with no capability added", overlay)
	}
}

// checkServiceAndPDB: one Service for the three TCP ports, a PDB that
// lets a drain take one instance at a time.
func checkServiceAndPDB(t *testing.T, overlay string, objs []runtime.Object) {
	t.Helper()
	var svc, pdb, policy, metricsOpen bool
	for _, o := range objs {
		switch o := o.(type) {
		case *corev1.Service:
			if o.Name != "cure" {
				continue
			}
			svc = true
			var ports []int32
			for _, p := range o.Spec.Ports {
				ports = append(ports, p.Port)
			}
			if !slices.Equal(ports, []int32{8080, 8443, 8444}) {
				t.Errorf("Service cure: ports %v, want 8080 8443 8444", ports)
			}
			if overlay != "dev" && o.Spec.Type != corev1.ServiceTypeLoadBalancer {
				t.Errorf("Service cure: type %s: a site's nodes reach it from outside the cluster", o.Spec.Type)
			}
		case *policyv1.PodDisruptionBudget:
			pdb = o.Spec.MaxUnavailable != nil && o.Spec.MaxUnavailable.IntValue() == 1
		case *networkingv1.NetworkPolicy:
			metricsOpen = metricsOpen || !metricsFromSome(o)
			policy = true
		}
	}
	if overlay != "dev" && (!policy || metricsOpen) {
		t.Errorf("NetworkPolicy %v, metrics open to all %v: a site's /metrics is for Prometheus alone", policy, metricsOpen)
	}
	if !svc || !pdb {
		t.Errorf("Service cure %v, PodDisruptionBudget maxUnavailable 1 %v: want both", svc, pdb)
	}
}

// metricsFromSome: every ingress rule that admits 9464 names its sources.
func metricsFromSome(np *networkingv1.NetworkPolicy) bool {
	for _, r := range np.Spec.Ingress {
		for _, p := range r.Ports {
			if (p.Port == nil || p.Port.IntValue() == 9464) && len(r.From) == 0 {
				return false
			}
		}
		if len(r.Ports) == 0 && len(r.From) == 0 {
			return false
		}
	}
	return true
}

func flagValue(args []string, name string) string {
	for i, a := range args {
		if a == name && i+1 < len(args) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
	}
	return ""
}

// buildCoordinator builds provisioner-lite (the Go cache makes it about a
// link).
func buildCoordinator(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "provisioner-lite")
	if out, err := exec.Command("go", "build", "-o", bin, "../../provisioner-lite/cmd/provisioner-lite").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// pod is the coordinator's pod laid out in a temporary root: each volume
// mount a directory there, filled as the kubelet would.
type pod struct {
	root string
	sts  *appsv1.StatefulSet
}

// path is where the pod's absolute path p lies in the root.
func (p pod) path(abs string) string { return filepath.Join(p.root, abs) }

// rewrite maps the pod's paths in args into the root.
func (p pod) rewrite(args []string, mounts []corev1.VolumeMount) []string {
	out := slices.Clone(args)
	for i, a := range out {
		for _, m := range mounts {
			if a == m.MountPath || strings.HasPrefix(a, m.MountPath+"/") {
				out[i] = p.path(a)
			}
		}
	}
	return out
}

// runCoordinator runs the pod's two command lines with the real binary:
// the initContainer's seed from a Secret as `provisioner-lite init` makes
// it, then `config show` with the main container's args, config file and
// environment. Every flag, key and CURE_* variable must be taken, and
// the listeners must be the ports the probes and Services use.
func runCoordinator(t *testing.T, bin, overlay string, sts *appsv1.StatefulSet, config map[string]string) {
	t.Helper()
	p := pod{root: t.TempDir(), sts: sts}
	spec := sts.Spec.Template.Spec
	seed := container(t, spec.InitContainers, "seed-state")
	main := container(t, spec.Containers, "provisioner-lite")
	secretDir := p.path(flagValue(seed.Args, "--from"))
	fillSecret(t, secretDir)
	for _, m := range main.VolumeMounts {
		if err := os.MkdirAll(p.path(m.MountPath), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	configDir := ""
	for _, v := range spec.Volumes {
		for _, m := range main.VolumeMounts {
			if v.ConfigMap != nil && m.Name == v.Name {
				configDir = m.MountPath
			}
		}
	}
	if configDir == "" || len(config) == 0 {
		t.Fatal("no ConfigMap cure-config mounted in the coordinator's container")
	}
	for name, data := range config {
		if err := os.WriteFile(filepath.Join(p.path(configDir), name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run(t, bin, p.rewrite(seed.Args, seed.VolumeMounts), nil)
	out := run(t, bin, append([]string{"config", "show", "-o", "json"}, p.rewrite(main.Args, main.VolumeMounts)...), podEnv(t, main))
	var eff map[string]any
	if err := json.Unmarshal(out, &eff); err != nil {
		t.Fatalf("config show: %v\n%s", err, out)
	}
	for _, e := range main.Env {
		if name, ok := strings.CutPrefix(e.Name, "CURE_"); ok {
			if _, known := eff[strings.ToLower(strings.ReplaceAll(name, "_", "-"))]; !known {
				t.Errorf("env %s: provisioner-lite has no such flag (it would be ignored)", e.Name)
			}
		}
	}
	checkEffective(t, overlay, p, seed, main, eff)
}

// checkEffective: the configuration the coordinator starts with matches
// the pod around it.
func checkEffective(t *testing.T, overlay string, p pod, seed, main corev1.Container, eff map[string]any) {
	t.Helper()
	str := func(k string) string { s, _ := eff[k].(string); return s }
	for flag, want := range map[string]string{"http-listen": "8080", "grpc-listen": "8443", "metrics-listen": "9464"} {
		if _, port, err := net.SplitHostPort(str(flag)); err != nil || port != want {
			t.Errorf("%s %q: want port %s (the container port the Service or probes use)", flag, str(flag), want)
		}
	}
	if host, _, _ := net.SplitHostPort(str("metrics-listen")); overlay != "proxy-dhcp" && host != "0.0.0.0" {
		t.Errorf("metrics-listen %q: the kubelet probes the pod's address: want 0.0.0.0", str("metrics-listen"))
	}
	if hl := str("https-listen"); hl != "" && hl != ":8444" || hl != "" && !slices.Contains(seed.Args, "--https-boot") {
		t.Errorf("https-listen %q: want :8444 with the seed requiring the boot CA (--https-boot)", hl)
	}
	if eff["manifests-from-store"] != true {
		t.Error("manifests-from-store: want every instance on the store's bundle")
	}
	if str("state-dir") != flagValue(seed.Args, "--state-dir") {
		t.Errorf("state-dir %q is not the dir the initContainer seeds (%q)", str("state-dir"), flagValue(seed.Args, "--state-dir"))
	}
	if !strings.HasPrefix(str("db"), "postgres://") {
		t.Errorf("db %q: want the PostgreSQL DSN from CURE_DB", str("db"))
	}
	if str("instance-id") != "cure-coordinator-0" {
		t.Errorf("instance-id %q: want the pod's name", str("instance-id"))
	}
	if overlay != "dev" && (str("advertise") == "" || str("artifact-mirror") == "") {
		t.Errorf("advertise %q, artifact-mirror %q: a site's fleet needs both", str("advertise"), str("artifact-mirror"))
	}
	// podEnv's status.podIP: this pod's own address, port http.
	if str("peer-url") != "http://10.1.2.3:8080" {
		t.Errorf("peer-url %q: want http://<the pod's IP>:8080 (peers fetch artifacts from this instance, not through the Service)", str("peer-url"))
	}
	if overlay == "proxy-dhcp" && (eff["proxy-dhcp"] != true || str("pxe-interface") == "") {
		t.Error("proxy-dhcp overlay: want proxy-dhcp on and a pxe-interface")
	}
	// The seeded dir is one the coordinator opens: its key, the CA.
	sd, err := statedir.Open(p.path(str("state-dir")), nil)
	if err != nil {
		t.Fatalf("the seeded state dir: %v", err)
	}
	defer sd.Close()
	want, _ := os.ReadFile(filepath.Join(p.path(flagValue(seed.Args, "--from")), statedir.KeyFile))
	if !bytes.Equal(sd.Key, want) {
		t.Error("the seeded state key is not the Secret's")
	}
}

// fillSecret writes what `provisioner-lite init` (and the boot CA) made as
// the Secret cure-state's files.
func fillSecret(t *testing.T, dir string) {
	t.Helper()
	src := t.TempDir()
	if _, err := pki.EnsureCA(src); err != nil {
		t.Fatal(err)
	}
	if _, err := pki.EnsureBootCA(src); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{pki.CACertFile, pki.CAKeyFile, pki.BootCACertFile, pki.BootCAKeyFile} {
		b, err := os.ReadFile(filepath.Join(src, k))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, k), b, 0o440); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, statedir.KeyFile), bytes.Repeat([]byte{0x5a}, 32), 0o440); err != nil {
		t.Fatal(err)
	}
}

// podEnv is the container's environment as the kubelet gives it: field
// references and Secret keys filled, $(VAR) expanded.
func podEnv(t *testing.T, c corev1.Container) []string {
	t.Helper()
	fields := map[string]string{"metadata.name": "cure-coordinator-0", "metadata.namespace": "cure", "status.hostIP": "192.0.2.10", "status.podIP": "10.1.2.3"}
	vars := map[string]string{}
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	ref := regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)
	for _, e := range c.Env {
		v := e.Value
		switch {
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil:
			v = fields[e.ValueFrom.FieldRef.FieldPath]
			if v == "" {
				t.Errorf("env %s: field %s unknown to the test", e.Name, e.ValueFrom.FieldRef.FieldPath)
			}
		case e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil:
			v = "postgres://cure:secret@db.example:5432/cure"
		case e.ValueFrom != nil:
			t.Errorf("env %s: a source the test does not fill", e.Name)
		default:
			v = ref.ReplaceAllStringFunc(v, func(m string) string {
				name := ref.FindStringSubmatch(m)[1]
				if val, ok := vars[name]; ok {
					return val
				}
				t.Errorf("env %s: $(%s) is not defined before it (the kubelet would leave it as is)", e.Name, name)
				return m
			})
		}
		vars[e.Name] = v
		env = append(env, e.Name+"="+v)
	}
	return env
}

func run(t *testing.T, bin string, args, env []string) []byte {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("provisioner-lite %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return out
}

// TestKubernetesStrict proves the decoding strict: a misspelled field and
// a field given twice are refused, through kustomize too.
func TestKubernetesStrict(t *testing.T) {
	dec := decoder(t)
	for name, doc := range map[string]string{
		"misspelled": "apiVersion: v1\nkind: Service\nmetadata:\n  name: x\nspec:\n  prots:\n    - port: 80\n",
		"duplicate":  "apiVersion: v1\nkind: Service\nmetadata:\n  name: x\nspec:\n  type: ClusterIP\n  type: NodePort\n",
	} {
		if _, _, err := dec.Decode([]byte(doc), nil, nil); err == nil || !strings.Contains(err.Error(), map[string]string{"misspelled": "prots", "duplicate": "type"}[name]) {
			t.Errorf("%s: %v, want a strict decoding error naming the field", name, err)
		}
	}
	fsys := filesys.MakeFsInMemory()
	files := map[string]string{
		"/k/kustomization.yaml": "resources:\n  - sts.yaml\n",
		"/k/sts.yaml": "apiVersion: apps/v1\nkind: StatefulSet\nmetadata:\n  name: x\nspec:\n  replcas: 3\n  selector:\n    matchLabels: {a: b}\n" +
			"  template:\n    metadata:\n      labels: {a: b}\n    spec:\n      containers:\n        - name: c\n          image: r.example/c:1\n",
	}
	for p, s := range files {
		if err := fsys.WriteFile(p, []byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := render(t, fsys, "/k"); err == nil || !strings.Contains(err.Error(), "replcas") {
		t.Errorf("a rendered StatefulSet with replcas: %v, want it refused naming the field", err)
	}
}
