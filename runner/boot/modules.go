package boot

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/u-root/u-root/pkg/kmodule"
	"golang.org/x/sys/unix"
)

// Loader inserts one kernel module file into the kernel. The path is the
// module file (.ko, .ko.xz, .ko.zst or .ko.gz). A module that is already
// loaded is not an error.
type Loader interface {
	Load(path string) error
}

// KernelLoader loads modules with finit_module(2) (init_module(2) for
// compressed files, after decompressing them in memory).
type KernelLoader struct{}

// Load implements Loader.
func (KernelLoader) Load(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return fmt.Errorf("opening module %s: %w", p, err)
	}
	defer f.Close()
	var img []byte
	if img, err = moduleImage(f, p); err == nil {
		if img == nil {
			err = unix.FinitModule(int(f.Fd()), "", 0)
		} else {
			err = unix.InitModule(img, "")
		}
	}
	if err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("loading module %s: %w", p, err)
	}
	return nil
}

// moduleImage is the decompressed module of a compressed file, nil for a
// plain .ko (finit_module reads it from the file).
func moduleImage(f *os.File, p string) ([]byte, error) {
	switch {
	case strings.HasSuffix(p, ".ko"):
		return nil, nil
	case strings.HasSuffix(p, ".zst"):
		// The image's own modules (compress_modules: zstd): one shared
		// decoder, whole file to whole image, no stream goroutines or
		// per-module window to allocate.
		z, err := io.ReadAll(f)
		if err != nil {
			return nil, err
		}
		return moduleDecoder().DecodeAll(z, nil)
	default:
		r, err := kmodule.CompressionReader(f)
		if err != nil {
			return nil, err
		}
		return io.ReadAll(r)
	}
}

// moduleDecoder is the zstd decoder of every .ko.zst: DecodeAll is safe
// for concurrent use, and the modules load several at once.
var moduleDecoder = sync.OnceValue(func() *zstd.Decoder {
	d, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(2), zstd.WithDecoderMaxMemory(256<<20))
	if err != nil {
		panic(err) // only for invalid options
	}
	return d
})

type moduleOptions struct {
	loader    Loader
	always    []string
	rounds    int
	settle    time.Duration
	procRoot  string
	parallel  int
	onNetwork func()
	onDevices func()
	// alwaysAfter holds the always-loaded modules back until it closes
	// (nil: no wait); they load after the devices' drivers in any case.
	alwaysAfter <-chan struct{}
}

// ModuleOption tunes LoadModulesForDevices.
type ModuleOption func(*moduleOptions)

// WithLoader replaces the kernel loader (tests use a fake).
func WithLoader(l Loader) ModuleOption { return func(o *moduleOptions) { o.loader = l } }

// WithAlwaysLoad names modules loaded whatever the devices (vfat, nls_*...):
// filesystems have no modalias. They load once the present devices'
// drivers are in (after WithDevicesLoaded's callback), so they never hold
// up the network or the inventory.
func WithAlwaysLoad(names ...string) ModuleOption {
	return func(o *moduleOptions) { o.always = append(o.always, names...) }
}

// WithAlwaysLoadAfter holds the WithAlwaysLoad modules back until gate
// closes (or the context ends): the runner loads the filesystems only the
// phases need after its Hello, off the boot's critical path.
// LoadModulesForDevices returns only once they are loaded.
func WithAlwaysLoadAfter(gate <-chan struct{}) ModuleOption {
	return func(o *moduleOptions) { o.alwaysAfter = gate }
}

// WithSettle sets the pause before the last look for new devices, for
// drivers that probe asynchronously (libata scans its ports after
// returning, and its disks then want sd_mod).
func WithSettle(d time.Duration) ModuleOption { return func(o *moduleOptions) { o.settle = d } }

// WithProcRoot points at the proc filesystem used to skip already loaded
// modules ("" disables the check).
func WithProcRoot(p string) ModuleOption { return func(o *moduleOptions) { o.procRoot = p } }

// WithParallel sets how many modules load at once (default 4). Signature
// checks, relocation and the drivers' probes run in the caller's context,
// so independent modules load faster side by side.
func WithParallel(n int) ModuleOption { return func(o *moduleOptions) { o.parallel = max(1, n) } }

// WithNetworkFirst loads the drivers of network devices (and of the devices
// those drivers create, virtio_pci's virtio-net) before anything else, then
// calls f, so the caller can bring the network up while storage and
// filesystem modules still load. f is called exactly once, also when
// loading stops early.
func WithNetworkFirst(f func()) ModuleOption { return func(o *moduleOptions) { o.onNetwork = f } }

// WithDevicesLoaded calls f, once, as soon as a look right after loading
// finds no device still wanting a module: the drivers of every device
// present at boot are in. Loading then goes on with the settle and the last
// look (for devices that asynchronous probes add later) without holding up
// the caller. f is also called when loading stops early.
func WithDevicesLoaded(f func()) ModuleOption { return func(o *moduleOptions) { o.onDevices = f } }

// LoadModulesForDevices loads the modules every device under
// <sysRoot>/bus/*/devices/*/modalias asks for, according to
// <modulesDir>/modules.alias, with their dependencies from modules.dep,
// independent modules in parallel and each after its dependencies. It looks
// again right after each round (probes create devices: virtio_pci's virtio
// devices) and once more after a settle, and stops when that finds nothing
// new. It returns the names of the modules it loaded, each after its
// dependencies. A module that fails to load is logged and reported in the
// joined error; the others still load.
func LoadModulesForDevices(ctx context.Context, sysRoot, modulesDir string, log *slog.Logger, opts ...ModuleOption) ([]string, error) {
	o := moduleOptions{loader: KernelLoader{}, rounds: 10, settle: 200 * time.Millisecond, procRoot: "/proc", parallel: 4}
	for _, f := range opts {
		f(&o)
	}
	notifyNetwork, notifyDevices := atMostOnce(o.onNetwork), atMostOnce(o.onDevices)
	defer notifyNetwork()
	defer notifyDevices()
	if log == nil {
		log = slog.Default()
	}
	db, err := loadModuleDB(modulesDir)
	if err != nil {
		return nil, err
	}
	if o.procRoot != "" {
		if f, err := os.Open(filepath.Join(o.procRoot, "modules")); err == nil {
			for _, n := range parseProcModules(f) {
				db.done[n] = true
			}
			f.Close()
		}
	}
	r := &moduleRun{db: db, o: &o, sysRoot: sysRoot, log: log}
	if o.onNetwork != nil {
		if err := r.networkRounds(ctx); err != nil {
			return r.loaded, errors.Join(append(r.errs, err)...)
		}
		notifyNetwork()
	}
	loadAlways := sync.OnceFunc(func() {
		if o.alwaysAfter != nil {
			select {
			case <-o.alwaysAfter:
			case <-ctx.Done():
			}
		}
		always := map[string]string{}
		for _, n := range o.always {
			always[normalizeModName(n)] = "always"
		}
		r.load(always)
	})
	err = r.deviceRounds(ctx, func() {
		notifyDevices()
		loadAlways()
	})
	loadAlways() // also when the rounds ended early
	if err != nil {
		return r.loaded, errors.Join(append(r.errs, err)...)
	}
	return r.loaded, errors.Join(r.errs...)
}

// moduleRun is one LoadModulesForDevices: what it loaded and what failed.
type moduleRun struct {
	db      *moduleDB
	o       *moduleOptions
	sysRoot string
	log     *slog.Logger
	loaded  []string
	errs    []error
}

func (r *moduleRun) load(want map[string]string) {
	l, e := r.db.loadSet(r.o.loader, want, r.o.parallel, r.log)
	r.loaded = append(r.loaded, l...)
	r.errs = append(r.errs, e...)
}

// pending returns the modules the devices present want and that were not
// tried yet, each with the modalias that wants it.
func (r *moduleRun) pending(only func(string) bool, buses ...string) (map[string]string, error) {
	aliases, err := readModaliases(r.sysRoot, buses...)
	if err != nil {
		return nil, err
	}
	want := map[string]string{}
	for _, a := range aliases {
		if only != nil && !only(a) {
			continue
		}
		for _, m := range r.db.match(a) {
			if _, seen := want[m]; !seen && !r.db.done[m] {
				want[m] = a
			}
		}
	}
	return want, nil
}

// networkRounds loads the network devices' modules first, until none is
// pending; the error ends the whole run.
func (r *moduleRun) networkRounds(ctx context.Context) error {
	for round := 0; round < r.o.rounds; round++ {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("loading modules: %w", err)
		}
		want, err := r.pending(isNetworkModalias, networkBuses...)
		if err != nil {
			return err
		}
		if len(want) == 0 {
			break
		}
		r.load(want)
	}
	return nil
}

// deviceRounds loads every device's modules, round after round, until a
// round after the settle time finds none pending (the probes run may make
// devices); quiet is called the first time none is pending, before the
// settle. The error ends the whole run.
func (r *moduleRun) deviceRounds(ctx context.Context, quiet func()) error {
	settled := false
	for round := 0; round < r.o.rounds; round++ {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("loading modules: %w", err)
		}
		want, err := r.pending(nil)
		if err != nil {
			return err
		}
		r.log.Debug("module round", "round", round, "pending", len(want), "loaded_total", len(r.loaded))
		if len(want) > 0 {
			r.load(want)
			settled = false
			continue // look again at once: the probes just run may have made devices
		}
		if settled {
			break
		}
		quiet()
		select {
		case <-ctx.Done():
		case <-time.After(r.o.settle):
		}
		settled = true
	}
	return nil
}

// atMostOnce is f made safe to call several times (a no-op for nil f).
func atMostOnce(f func()) func() {
	if f == nil {
		return func() {}
	}
	return sync.OnceFunc(f)
}

// networkBuses are the buses whose devices isNetworkModalias can accept:
// the network rounds read only theirs (a QEMU q35 guest has some 200
// devices, most on the acpi and platform buses, each a sysfs lookup and
// read under emulation on the boot's critical path).
var networkBuses = []string{"pci", "virtio"}

// isNetworkModalias reports whether a modalias is a network controller's:
// PCI base class 02, or a virtio network device (id 1).
func isNetworkModalias(a string) bool {
	if rest, ok := strings.CutPrefix(a, "pci:"); ok {
		// pci:v%08Xd%08Xsv%08Xsd%08Xbc%02Xsc%02Xi%02X: hex digits are
		// upper case, so "bc" is only ever the base-class field.
		_, class, found := strings.Cut(rest, "bc")
		return found && strings.HasPrefix(class, "02")
	}
	return strings.HasPrefix(a, "virtio:d00000001v")
}

// loadSet loads the modules in want (name → why) and their dependencies
// not tried yet: each after its dependencies, up to par at once. A module
// whose dependency failed is not tried. It returns the modules loaded, in
// completion order (so each after its dependencies), and the errors.
func (db *moduleDB) loadSet(l Loader, want map[string]string, par int, log *slog.Logger) ([]string, []error) {
	names := make([]string, 0, len(want))
	for n := range want {
		names = append(names, n)
	}
	sort.Strings(names)
	// Depth-first: the closure in dependency order, cycles refused.
	type node struct {
		name, why string
		deps      []string
		done      chan struct{}
		ok        bool
	}
	nodes := map[string]*node{}
	var order []*node
	var errs []error
	var visit func(name, why string, stack []string) bool
	visit = func(name, why string, stack []string) bool {
		if db.done[name] {
			return true
		}
		if _, ok := nodes[name]; ok {
			return true
		}
		if slices.Contains(stack, name) {
			errs = append(errs, fmt.Errorf("module dependency cycle: %s -> %s", strings.Join(stack, " -> "), name))
			return false
		}
		if _, ok := db.files[name]; !ok {
			db.done[name] = true
			errs = append(errs, fmt.Errorf("module %s: not in %s", name, filepath.Join(db.dir, "modules.dep")))
			log.Warn("kernel module failed to load", "module", name, "for", why, "err", "not in modules.dep")
			return false
		}
		for _, d := range db.deps[name] {
			if !visit(d, "dependency of "+name, append(stack, name)) {
				db.done[name] = true
				errs = append(errs, fmt.Errorf("module %s: dependency %s cannot load", name, d))
				return false
			}
		}
		n := &node{name: name, why: why, deps: db.deps[name], done: make(chan struct{})}
		nodes[name] = n
		order = append(order, n)
		return true
	}
	for _, n := range names {
		visit(n, want[n], nil)
	}
	for _, n := range order {
		db.done[n.name] = true
	}

	sem := make(chan struct{}, max(1, par))
	var mu sync.Mutex
	var loaded []string
	var wg sync.WaitGroup
	for _, n := range order {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(n.done)
			for _, d := range n.deps {
				dn, inSet := nodes[d]
				if !inSet {
					continue // loaded before, built in, or already running
				}
				<-dn.done
				if !dn.ok {
					mu.Lock()
					errs = append(errs, fmt.Errorf("module %s: dependency %s did not load", n.name, d))
					mu.Unlock()
					return
				}
			}
			sem <- struct{}{}
			err := l.Load(db.files[n.name])
			<-sem
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				log.Warn("kernel module failed to load", "module", n.name, "for", n.why, "err", err)
				errs = append(errs, fmt.Errorf("module %s: %w", n.name, err))
				return
			}
			n.ok = true
			log.Info("loaded kernel module", "module", n.name, "for", n.why)
			loaded = append(loaded, n.name)
		}()
	}
	wg.Wait()
	return loaded, errs
}

// moduleDB is modules.alias + modules.dep + modules.builtin of one kernel.
type moduleDB struct {
	dir     string
	aliases []aliasEntry
	deps    map[string][]string // module name -> dependency names
	files   map[string]string   // module name -> absolute file path
	done    map[string]bool     // attempted (loaded, failed, builtin or already loaded)
	// matched caches match: every round looks at the same modaliases
	// again, and each costs a pass over all the aliases (about 850 in the
	// image, a boot's critical path under emulation). Not safe for
	// concurrent use, like done.
	matched map[string][]string
}

type aliasEntry struct{ pattern, module string }

func normalizeModName(n string) string { return strings.ReplaceAll(n, "-", "_") }

// modNameFromPath maps kernel/drivers/net/virtio_net.ko.xz to virtio_net.
func modNameFromPath(p string) string {
	b := path.Base(p)
	if i := strings.Index(b, ".ko"); i >= 0 {
		b = b[:i]
	}
	return normalizeModName(b)
}

func loadModuleDB(dir string) (*moduleDB, error) {
	db := &moduleDB{dir: dir, deps: map[string][]string{}, files: map[string]string{}, done: map[string]bool{}}
	depPath := filepath.Join(dir, "modules.dep")
	f, err := os.Open(depPath)
	if err != nil {
		return nil, fmt.Errorf("reading module dependencies: %w", err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for line := 1; s.Scan(); line++ {
		t := strings.TrimSpace(s.Text())
		if t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		mod, deps, ok := strings.Cut(t, ":")
		if !ok {
			return nil, fmt.Errorf("%s:%d: expected \"path.ko: dep.ko ...\", found %q", depPath, line, t)
		}
		name := modNameFromPath(mod)
		db.files[name] = filepath.Join(dir, mod)
		for _, d := range strings.Fields(deps) {
			db.deps[name] = append(db.deps[name], modNameFromPath(d))
		}
	}
	if err := s.Err(); err != nil {
		return nil, fmt.Errorf("reading %s: %w", depPath, err)
	}

	aliasPath := filepath.Join(dir, "modules.alias")
	if f, err := os.Open(aliasPath); err == nil {
		defer f.Close()
		s := bufio.NewScanner(f)
		for line := 1; s.Scan(); line++ {
			fs := strings.Fields(s.Text())
			if len(fs) == 0 || strings.HasPrefix(fs[0], "#") {
				continue
			}
			if len(fs) != 3 || fs[0] != "alias" {
				return nil, fmt.Errorf("%s:%d: expected \"alias PATTERN MODULE\", found %q", aliasPath, line, s.Text())
			}
			db.aliases = append(db.aliases, aliasEntry{fs[1], normalizeModName(fs[2])})
		}
		if err := s.Err(); err != nil {
			return nil, fmt.Errorf("reading %s: %w", aliasPath, err)
		}
	} else if !os.IsNotExist(err) {
		return nil, fmt.Errorf("reading module aliases: %w", err)
	}

	// Built-in modules need no loading; they are listed as paths.
	if f, err := os.Open(filepath.Join(dir, "modules.builtin")); err == nil {
		defer f.Close()
		s := bufio.NewScanner(f)
		for s.Scan() {
			if t := strings.TrimSpace(s.Text()); t != "" {
				db.done[modNameFromPath(t)] = true
			}
		}
	}
	return db, nil
}

// match returns the modules whose alias pattern matches a modalias, with
// fnmatch semantics as modprobe uses them.
func (db *moduleDB) match(modalias string) []string {
	if m, ok := db.matched[modalias]; ok {
		return m
	}
	if db.matched == nil {
		db.matched = map[string][]string{}
	}
	m := db.matchAll(modalias)
	db.matched[modalias] = m
	return m
}

// matchAll is match without the cache.
func (db *moduleDB) matchAll(modalias string) []string {
	seen := map[string]bool{}
	var out []string
	for _, a := range db.aliases {
		if ok, err := path.Match(a.pattern, modalias); err == nil && ok && !seen[a.module] {
			seen[a.module] = true
			out = append(out, a.module)
		}
	}
	return out
}

// loadWithDeps loads name after its dependencies (depth first) and returns
// the modules actually loaded. stack detects dependency cycles.
func (db *moduleDB) loadWithDeps(l Loader, name string, stack []string) ([]string, error) {
	if db.done[name] {
		return nil, nil
	}
	for _, s := range stack {
		if s == name {
			return nil, fmt.Errorf("module dependency cycle: %s -> %s", strings.Join(stack, " -> "), name)
		}
	}
	file, ok := db.files[name]
	if !ok {
		db.done[name] = true
		return nil, fmt.Errorf("module %s: not in %s", name, filepath.Join(db.dir, "modules.dep"))
	}
	var loaded []string
	for _, d := range db.deps[name] {
		l2, err := db.loadWithDeps(l, d, append(stack, name))
		loaded = append(loaded, l2...)
		if err != nil {
			db.done[name] = true
			return loaded, fmt.Errorf("module %s: dependency: %w", name, err)
		}
	}
	db.done[name] = true
	if err := l.Load(file); err != nil {
		return loaded, fmt.Errorf("module %s: %w", name, err)
	}
	return append(loaded, name), nil
}

// readModaliases returns the sorted, de-duplicated modaliases of every device
// on the named buses (every bus when none is named). Each device's modalias
// is read directly, without a stat first: most devices have one.
func readModaliases(sysRoot string, buses ...string) ([]string, error) {
	busDir := filepath.Join(sysRoot, "bus")
	if len(buses) == 0 {
		entries, err := os.ReadDir(busDir)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil // no sysfs: no devices
		}
		if err != nil {
			return nil, fmt.Errorf("listing buses under %s: %w", busDir, err)
		}
		for _, e := range entries {
			buses = append(buses, e.Name())
		}
	}
	set := map[string]bool{}
	for _, bus := range buses {
		devDir := filepath.Join(busDir, bus, "devices")
		devs, err := os.ReadDir(devDir)
		if err != nil {
			continue // a bus without devices, or no such bus here
		}
		for _, d := range devs {
			b, err := os.ReadFile(filepath.Join(devDir, d.Name(), "modalias"))
			if err != nil {
				continue // no modalias, or the device went
			}
			if a := strings.TrimSpace(string(b)); a != "" {
				set[a] = true
			}
		}
	}
	out := make([]string, 0, len(set))
	for a := range set {
		out = append(out, a)
	}
	sort.Strings(out)
	return out, nil
}

// parseProcModules returns the module names listed in /proc/modules.
func parseProcModules(r io.Reader) []string {
	var out []string
	s := bufio.NewScanner(r)
	for s.Scan() {
		if f := strings.Fields(s.Text()); len(f) > 0 {
			out = append(out, normalizeModName(f[0]))
		}
	}
	return out
}

// LoadModule loads one module by name after its dependencies, from
// modulesDir's modules.dep, skipping what procRoot/modules lists as loaded
// ("" skips that check). It returns the modules it loaded, in order. The
// GPU driver's modules are loaded this way, on purpose and late, rather
// than by modalias at boot (the image lists no alias for them).
func LoadModule(modulesDir, procRoot, name string, l Loader) ([]string, error) {
	db, err := loadModuleDB(modulesDir)
	if err != nil {
		return nil, err
	}
	if procRoot != "" {
		if f, err := os.Open(filepath.Join(procRoot, "modules")); err == nil {
			for _, n := range parseProcModules(f) {
				db.done[n] = true
			}
			f.Close()
		}
	}
	return db.loadWithDeps(l, normalizeModName(name), nil)
}
