// Package sitecheck lints a site's configuration as the coordinator will
// read it: the manifests directory (SKUs and validation suites, resolved by
// name as catalog.Catalog resolves them) and the nodes file (through
// provisioner-lite/nodes, with every node's SKU looked up in that
// directory). `provisioner-lite check` prints the result; the coordinator
// runs the same lint at start and refuses to start on any problem. Every
// problem names its file, line and field.
//
// Each YAML file is also checked against its published JSON Schema
// (manifests/schema), the one editors use. The loaders check more than a
// schema can say, so their word wins: a schema problem on a line or field
// the loader already reported is dropped (one problem per place), and
// one the loader missed is reported, marked "(schema FILE)": the schema
// and the loader disagree, and the generator needs fixing.
package sitecheck

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/manifests/schema"
	"github.com/cure-oss/cure/provisioner-lite/catalog"
	"github.com/cure-oss/cure/provisioner-lite/nodes"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"github.com/cure-oss/cure/provisioner-lite/textsafe"
)

// Result is what a lint found.
type Result struct {
	ManifestDir string
	SKUs        []string // names (file names without .yaml) of valid SKUs
	Suites      []string // names of valid validation suites
	NodesFile   string
	Nodes       []store.Node // the nodes file's nodes, when it has no problem
	// Problems lists every problem, one per line: "file:line[:col]: field: message".
	Problems []string
	// acceptance is each SKU's admission suite, checked once every suite
	// is known.
	acceptance []suiteRef
}

// suiteRef is a SKU's reference to a suite, where it is written.
type suiteRef struct {
	path, suite string
}

// OK reports whether the lint found nothing.
func (r *Result) OK() bool { return len(r.Problems) == 0 }

// MaxErrProblems bounds the problems Err lists (the count is whole; Problems
// and `provisioner-lite check` have them all): an inventory of 20,000 bad
// lines must not make a log line of megabytes.
const MaxErrProblems = 50

// Err is nil when the lint found nothing, or an error counting every
// problem and listing the first MaxErrProblems.
func (r *Result) Err() error {
	if r.OK() {
		return nil
	}
	return fmt.Errorf("%d problem(s) in the site configuration:\n  %s", len(r.Problems), textsafe.JoinFirst(r.Problems, MaxErrProblems, 1024, "\n  "))
}

// Site lints manifestDir and, when nodesFile is not empty, the nodes file
// against it.
func Site(manifestDir, nodesFile string) *Result {
	r := &Result{ManifestDir: manifestDir, NodesFile: nodesFile}
	r.manifests()
	if nodesFile != "" {
		ns, err := nodes.Load(nodesFile, nodes.WithSKUCheck(KnownSKU(manifestDir)))
		var sp []manifests.FieldError
		var serr error
		if ext := strings.ToLower(filepath.Ext(nodesFile)); ext == ".yaml" || ext == ".yml" {
			if data, rerr := os.ReadFile(nodesFile); rerr == nil {
				sp, serr = schema.ValidateNodes(nodesFile, data)
			}
		}
		r.addChecked(nodesFile, err, sp, serr)
		if err == nil {
			r.Nodes = ns
		}
	}
	return r
}

// addChecked records a file's problems: the loader's (loaderErr) and the
// schema's that fall on no line and no field the loader reported.
// schemaErr (the file could not be checked) counts only when the loader
// found nothing, since a file the loader refuses (YAML syntax) is one the
// schema cannot read either.
func (r *Result) addChecked(file string, loaderErr error, schemaProblems []manifests.FieldError, schemaErr error) {
	before := len(r.Problems)
	if loaderErr != nil {
		r.add(loaderErr)
	}
	lines, fields := map[int]bool{}, map[string]bool{}
	for _, p := range r.Problems[before:] {
		if line, field, ok := place(file, p); ok {
			lines[line], fields[field] = true, true
		}
	}
	for _, fe := range schemaProblems {
		if lines[fe.Line] || fe.Field != "" && fields[fe.Field] {
			continue
		}
		r.Problems = append(r.Problems, fe.Error())
	}
	if schemaErr != nil && loaderErr == nil {
		r.addf("%s: schema check: %v", file, schemaErr)
	}
}

// place reads the line and field of a problem "file:line[:col]: field: msg".
func place(file, problem string) (int, string, bool) {
	rest, ok := strings.CutPrefix(problem, file+":")
	if !ok {
		return 0, "", false
	}
	num, rest, _ := strings.Cut(rest, ": ")
	num, _, _ = strings.Cut(num, ":") // a column
	line, err := strconv.Atoi(num)
	if err != nil {
		return 0, "", false
	}
	field, _, _ := strings.Cut(rest, ": ")
	return line, field, true
}

// add appends every error err joins, one problem each.
func (r *Result) add(err error) {
	var joined interface{ Unwrap() []error }
	var ve *manifests.ValidationError
	switch {
	case errors.As(err, &ve):
		for _, fe := range ve.Errors {
			r.Problems = append(r.Problems, fe.Error())
		}
	case errors.As(err, &joined):
		for _, e := range joined.Unwrap() {
			r.add(e)
		}
	default:
		for _, line := range strings.Split(err.Error(), "\n") {
			if line = strings.TrimSpace(line); line != "" {
				r.Problems = append(r.Problems, line)
			}
		}
	}
}

func (r *Result) addf(format string, args ...any) {
	r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
}

// manifests lints every manifest file of the directory and its suites/:
// each must validate, be found under its own name, and not be shadowed.
func (r *Result) manifests() {
	dir := r.ManifestDir
	st, err := os.Stat(dir)
	if err != nil {
		r.addf("%s: manifests directory: %v", dir, err)
		return
	}
	if !st.IsDir() {
		r.addf("%s: manifests directory: not a directory", dir)
		return
	}
	top := r.lintDir(dir, nil)
	r.lintDir(filepath.Join(dir, "suites"), top)
	for _, ref := range r.acceptance {
		if !slices.Contains(r.Suites, ref.suite) {
			r.addf("%s:%d: spec.admission.acceptance.suite: %q is not a valid ValidationSuite in %s or its suites/ (valid suites: %s): no node of this SKU could ever be admitted",
				ref.path, keyLine(ref.path, "spec", "admission", "acceptance", "suite"), ref.suite, dir, strings.Join(r.Suites, ", "))
		}
	}
	slices.Sort(r.SKUs)
	slices.Sort(r.Suites)
	if len(r.SKUs) == 0 {
		r.addf("%s: no SKU manifest (NAME.yaml with kind: %s): nodes have nothing to be provisioned to", dir, manifests.KindSKU)
	}
}

// lintDir lints the manifests of one directory and returns their names.
// shadowing holds the names the catalog finds first (the top directory's).
func (r *Result) lintDir(dir string, shadowing map[string]string) map[string]string {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) && shadowing != nil {
		return nil // suites/ is optional
	}
	if err != nil {
		r.addf("%s: %v", dir, err)
		return nil
	}
	names := map[string]string{}
	for _, e := range entries {
		name := e.Name()
		path := filepath.Join(dir, name)
		if e.IsDir() || strings.HasPrefix(name, ".") {
			continue
		}
		switch filepath.Ext(name) {
		case ".yaml":
		case ".yml":
			r.addf("%s: never read: the coordinator finds manifests as NAME.yaml (rename it to %s.yaml)", path, strings.TrimSuffix(name, ".yml"))
			continue
		default:
			continue // READMEs and the like
		}
		base := strings.TrimSuffix(name, ".yaml")
		if prev, ok := shadowing[base]; ok {
			r.addf("%s: never read: %s has the same name and is found first", path, prev)
			continue
		}
		names[base] = path
		data, err := os.ReadFile(path)
		if err != nil {
			r.addf("%s: %v", path, err)
			continue
		}
		doc, err := manifests.Parse(path, data)
		sp, serr := schema.ValidateManifest(path, data)
		r.addChecked(path, err, sp, serr)
		if err != nil {
			continue
		}
		var meta manifests.Metadata
		switch {
		case doc.SKU != nil:
			meta = doc.SKU.Metadata
			r.SKUs = append(r.SKUs, base)
			if a := doc.SKU.Spec.Admission; a != nil && a.Acceptance != nil {
				r.acceptance = append(r.acceptance, suiteRef{path: path, suite: a.Acceptance.Suite})
			}
		case doc.Suite != nil:
			meta = doc.Suite.Metadata
			r.Suites = append(r.Suites, base)
		}
		if meta.Name != base {
			r.addf("%s:%d: metadata.name: %q differs from the file name: nodes and `curectl --manifest` name this manifest %q; rename one",
				path, nameLine(path), meta.Name, base)
		}
	}
	return names
}

// nameLine finds the line of metadata.name for a message (0 if unknown).
func nameLine(path string) int { return keyLine(path, "metadata", "name") }

// keyLine finds the line of the value at keys in a YAML file (0 if unknown).
func keyLine(path string, keys ...string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	var doc yaml.Node
	if yaml.Unmarshal(b, &doc) != nil || len(doc.Content) == 0 {
		return 0
	}
	find := func(m *yaml.Node, key string) *yaml.Node {
		if m == nil || m.Kind != yaml.MappingNode {
			return nil
		}
		for i := 0; i+1 < len(m.Content); i += 2 {
			if m.Content[i].Value == key {
				return m.Content[i+1]
			}
		}
		return nil
	}
	n := doc.Content[0]
	for _, k := range keys {
		if n = find(n, k); n == nil {
			return 0
		}
	}
	return n.Line
}

// Images checks that the OS image of every SKU the nodes file uses (every
// SKU, without a nodes file) is in the coordinator's artifact store: a
// provision of a node whose image is missing fails its preflight. stateDir
// is the state dir as the operator named it (for the fix in the message).
// Images served from a URL are the node's to fetch and are not checked.
func (r *Result) Images(stateDir string) {
	store := filepath.Join(stateDir, "artifacts")
	skus := r.SKUs
	if r.NodesFile != "" {
		used := map[string]bool{}
		for _, n := range r.Nodes {
			if n.SKU != "" {
				used[n.SKU] = true
			}
		}
		skus = nil
		for name := range used {
			skus = append(skus, name)
		}
		slices.Sort(skus)
	}
	cat := &catalog.Catalog{Dir: r.ManifestDir}
	for _, name := range skus {
		_, sku, err := cat.Load(name)
		if err != nil || sku.Spec.OS == nil {
			continue // reported by the manifests lint, or no OS to install
		}
		img := sku.Spec.OS.Image
		if img.URL != "" {
			continue
		}
		path := filepath.Join(r.ManifestDir, name+".yaml")
		at := path
		if ln := keyLine(path, "spec", "os", "image", "sha256"); ln > 0 {
			at = fmt.Sprintf("%s:%d", path, ln)
		}
		fix := fmt.Sprintf("import the image and set its digest with `provisioner-lite artifacts add --state-dir %s --sku %s IMAGE`", stateDir, path)
		st, err := os.Stat(filepath.Join(store, "sha256", img.SHA256))
		switch {
		case err != nil:
			r.addf("%s: spec.os.image: sha256:%s (%d bytes) is not in the artifact store %s: every provision of SKU %s fails its preflight; %s",
				at, img.SHA256, img.Size, store, name, fix)
		case st.Size() != img.Size:
			r.addf("%s: spec.os.image: sha256:%s is %d bytes in the artifact store %s, the manifest says %d; %s", at, img.SHA256, st.Size(), store, img.Size, fix)
		}
	}
}

// KnownSKU returns the check the nodes file's sku fields get: name must
// resolve, as the coordinator resolves it (catalog.Catalog), to a valid
// SKU manifest in dir. It reads the directory on every call, like the
// catalog, so nodes added at run time are checked against the manifests as
// they are then.
func KnownSKU(dir string) func(string) error {
	cat := &catalog.Catalog{Dir: dir}
	return func(name string) error {
		_, doc, err := cat.LoadDocument(name)
		switch {
		case err != nil && (errors.Is(err, os.ErrNotExist) || strings.Contains(err.Error(), "not a plain name")):
			return fmt.Errorf("unknown SKU %q: no %s.yaml in %s%s", name, name, dir, available(dir))
		case err != nil:
			return fmt.Errorf("SKU %q: its manifest does not validate: %s", name, firstLine(err))
		case doc.SKU == nil:
			return fmt.Errorf("%q is a %s, not a SKU%s", name, doc.Kind, available(dir))
		}
		return nil
	}
}

// available lists the SKU-looking files of dir for an error message.
func available(dir string) string {
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		if n := e.Name(); !e.IsDir() && strings.HasSuffix(n, ".yaml") {
			names = append(names, strings.TrimSuffix(n, ".yaml"))
		}
	}
	if len(names) == 0 {
		return " (it has none)"
	}
	if len(names) > 12 {
		names = append(names[:12], "…")
	}
	return " (there: " + strings.Join(names, ", ") + ")"
}

func firstLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}
