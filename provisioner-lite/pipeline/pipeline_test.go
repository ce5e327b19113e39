package pipeline_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/attestpolicy"
	"github.com/cure-oss/cure/provisioner-lite/audit"
	"github.com/cure-oss/cure/provisioner-lite/catalog"
	"github.com/cure-oss/cure/provisioner-lite/metrics"
	"github.com/cure-oss/cure/provisioner-lite/pipeline"
	"github.com/cure-oss/cure/provisioner-lite/redfish"
	"github.com/cure-oss/cure/provisioner-lite/runstate"
	"github.com/cure-oss/cure/provisioner-lite/server"
	"github.com/cure-oss/cure/provisioner-lite/sessions"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"github.com/cure-oss/cure/qemu-test/vbmc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
)

// fixture is a coordinator wired to a virtual BMC with an in-memory machine
// and a scripted runner that plays the node's side over real gRPC.
type fixture struct {
	t      *testing.T
	st     *store.Store
	eng    *pipeline.Engine
	m      *vbmc.FakeMachine
	bmc    *vbmc.BMC
	client curev1.RunnerServiceClient
	cancel context.CancelFunc

	mu sync.Mutex
	// phaseStatus decides the runner's outcome per phase and attempt.
	phaseStatus func(phase modes.PhaseName, attempt int) curev1.PhaseStatus
	attempts    map[modes.PhaseName]int
	hostToken   string
	instanceID  string
	// dropAfterStart cuts the stream once after this phase's start.
	dropAfterStart modes.PhaseName
	dropped        bool
	// hold is how long the scripted runner spends in a phase.
	hold        map[modes.PhaseName]time.Duration
	assignments []*curev1.Assignment
	// failConnects makes this many BMC logins fail before they reach the BMC.
	failConnects int
	// during, when set, runs between a phase's start and end on the
	// runner of boot (1 for the first), sending events through emit; it
	// may block (a hung runner) until its boot is over, and then says the
	// runner died with it (no phase end).
	during func(phase modes.PhaseName, boot int, emit func(*curev1.Event)) (died bool)
	// metrics hears everything the engine, runner service, store and
	// Redfish transport report.
	metrics *metrics.Metrics
	dir     string
	// verdicts are what the runner reports in a phase, before its end.
	verdicts map[modes.PhaseName][]*curev1.Verdict
	// rebootKeepsStream makes the runner reset the machine on a Reboot
	// without closing its stream, as a real node does (a reset sends no
	// FIN), and hostBootDelay is how long the installed OS takes to boot
	// before it calls back.
	rebootKeepsStream bool
	hostBootDelay     time.Duration
	// attest, when set, makes the attestation each Hello of boot carries
	// (the runner's side of measured boot); forge, when set, runs after
	// each Hello and may send events unasked (a hostile runner).
	attest func(ctx context.Context, token, bootID string, boot int) *curev1.Attestation
	forge  func(boot int, emit func(phase string, ev *curev1.Event))
	// hellos are every Hello the scripted runner sent.
	hellos []*curev1.Hello
	// pxeDelay is the machine's power-on-to-iPXE time (its POST).
	pxeDelay time.Duration
	// ecfg is the engine's configuration, for restart; onBoot, when set,
	// runs after each CURE boot got its boot decision and before its
	// runner says Hello.
	ecfg   pipeline.Config
	onBoot func()
	// wrapBMC, when set, wraps each BMC connection the engine makes.
	wrapBMC func(pipeline.BMC) pipeline.BMC
}

// engine is the engine driving now (restart replaces it).
func (f *fixture) engine() *pipeline.Engine {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.eng
}

// restart stops the engine as a coordinator shutdown does (its runs stay
// active, their leases handed back) and starts another on the same store,
// which resumes them.
func (f *fixture) restart() {
	f.t.Helper()
	f.mu.Lock()
	old, cancel := f.eng, f.cancel
	f.mu.Unlock()
	cancel()
	old.Wait()
	old.ReleaseAll(context.Background())
	ectx, cancel := context.WithCancel(context.Background())
	eng := pipeline.New(ectx, f.ecfg)
	f.mu.Lock()
	f.eng, f.cancel = eng, cancel
	f.mu.Unlock()
	if n, err := eng.Resume(context.Background()); err != nil || n != 1 {
		f.t.Errorf("after the restart: %d runs resumed, %v", n, err)
	}
}

// helloDisks is what the scripted runner reports: the disk the manifest's
// wipe selects, one it does not, and the boot medium (never a target).
var helloDisks = []*curev1.BlockDevice{
	{Name: "nvme0n1", Transport: "nvme", Model: "QEMU NVMe Ctrl", Serial: "DISK-WIPE", SizeBytes: 1 << 30},
	{Name: "sda", Transport: "sata", Model: "Other", Serial: "DISK-KEEP", SizeBytes: 1 << 30},
	{Name: "nvme1n1", Transport: "nvme", Model: "QEMU NVMe Ctrl", Serial: "DISK-BOOT", SizeBytes: 1 << 30, BootMedium: true},
}

const mac = "52:54:00:c0:de:01"

// nodeAddr is the address the node asks for its boot identity from.
const nodeAddr = "10.0.2.15"

func newFixture(t *testing.T, edit func(sku *manifests.SKU, casDir string)) *fixture {
	t.Helper()
	return newFixtureBMC(t, edit, nil)
}

// newFixtureBMC is newFixture with the virtual BMC's Config edited first
// (vendor shapes).
func newFixtureBMC(t *testing.T, edit func(sku *manifests.SKU, casDir string), bmcEdit func(*vbmc.Config)) *fixture {
	t.Helper()
	return newFixtureCfg(t, edit, bmcEdit, nil)
}

// newFixtureCfg is newFixtureBMC with the engine's Config edited last
// (hooks such as Notify).
func newFixtureCfg(t *testing.T, edit func(sku *manifests.SKU, casDir string), bmcEdit func(*vbmc.Config), cfgEdit func(*pipeline.Config)) *fixture {
	t.Helper()
	dir := t.TempDir()
	st, err := store.Open(filepath.Join(dir, "cure.db"), store.WithStateKey(bytes.Repeat([]byte{7}, 32)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })

	m := vbmc.NewFakeMachine()
	// Dell-style BIOS version: the mockup's "P79 v1.45" has a space, which
	// manifests refuse as a version.
	firmware := vbmc.DefaultFirmware()
	for i := range firmware {
		if firmware[i].ID == "BIOS" {
			firmware[i].Version = "2.19.1"
		}
	}
	cfg := vbmc.Config{Name: "node1", Serial: "S1", MAC: mac, Firmware: firmware,
		TaskDuration: 150 * time.Millisecond, ResetDuration: 300 * time.Millisecond}
	if bmcEdit != nil {
		bmcEdit(&cfg)
	}
	b, err := vbmc.New(cfg, m)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(b.Handler())
	t.Cleanup(hs.Close)

	// The OS image the manifest points at, in the content-addressed store.
	img := []byte(strings.Repeat("cure", 1024))
	sum := sha256.Sum256(img)
	hexsum := hex.EncodeToString(sum[:])
	if err := os.MkdirAll(filepath.Join(dir, "artifacts", "sha256"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "artifacts", "sha256", hexsum), img, 0o644); err != nil {
		t.Fatal(err)
	}
	sku, err := manifests.LoadSKU("../../manifests/examples/qemu-nvme.yaml")
	if err != nil {
		t.Fatal(err)
	}
	sku.Spec.OS.Image = manifests.Artifact{SHA256: hexsum, Size: int64(len(img)), Format: "raw"}
	if edit != nil {
		edit(sku, filepath.Join(dir, "artifacts", "sha256"))
	}
	raw, err := manifests.Marshal(sku)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "manifests"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "manifests", "qemu-nvme.yaml"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := st.UpsertNode(ctx, store.Node{ID: "node1", BMCURL: hs.URL, BMCUser: "admin", BMCPassword: "password", SKU: "qemu-nvme", MACs: []string{mac}, SystemSerial: "S1",
		PSIDs: map[string]string{"DISK-WIPE": strings.Repeat("W", 32), "DISK-KEEP": strings.Repeat("K", 32), "DISK-BOOT": strings.Repeat("B", 32)}}); err != nil {
		t.Fatal(err)
	}

	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	// The artifact server as the BMC reaches it (SimpleUpdate pulls from it).
	cas := httptest.NewServer(http.FileServer(http.Dir(dir)))
	t.Cleanup(cas.Close)
	hub := sessions.NewHub()
	ectx, cancel := context.WithCancel(ctx)
	met := metrics.New(metrics.Options{})
	st.ObserveCommits(met.StoreCommit)
	f := &fixture{t: t, st: st, m: m, bmc: b, cancel: cancel, attempts: map[modes.PhaseName]int{}, metrics: met, dir: dir,
		phaseStatus: func(modes.PhaseName, int) curev1.PhaseStatus { return curev1.PhaseStatus_PHASE_OK }}
	ecfg := pipeline.Config{
		Store: st, Hub: hub, Log: log, Metrics: met,
		ConnectBMC: func(ctx context.Context, n store.Node) (pipeline.BMC, error) {
			f.mu.Lock()
			fail := f.failConnects > 0
			if fail {
				f.failConnects--
			}
			f.mu.Unlock()
			if fail {
				return nil, fmt.Errorf("bmc %s: scripted login failure", n.BMCURL)
			}
			b, err := redfish.Connect(ctx, redfish.Endpoint{URL: n.BMCURL, Username: n.BMCUser, Password: n.BMCPassword, Insecure: true /* httptest BMC over plain HTTP */},
				redfish.Options{Timeout: 5 * time.Second, Logger: log, OnRetry: met.RedfishHTTPRetry})
			f.mu.Lock()
			wrap := f.wrapBMC
			f.mu.Unlock()
			if err != nil || wrap == nil {
				return b, err
			}
			return wrap(b), nil
		},
		Manifests: &catalog.Catalog{Dir: filepath.Join(dir, "manifests")}, ArtifactDir: filepath.Join(dir, "artifacts"),
		BaseURL: "http://10.0.2.2:8080", RunnerAddr: "10.0.2.2:8443", BMCBaseURL: cas.URL,
		Timeouts: pipeline.Timeouts{WaitForCURE: 20 * time.Second, Reconnect: 3 * time.Second, ShutdownWait: 5 * time.Second, HostOS: 20 * time.Second, RunnerPhase: 20 * time.Second,
			BMCReset: 10 * time.Second, TaskPoll: 50 * time.Millisecond, RetryBase: 50 * time.Millisecond, RetryMax: 200 * time.Millisecond},
		Budgets: pipeline.Budgets{PhaseAttempts: 2, Disconnects: 2},
		// The scripted node boots at once; TestBootTokenRaceContested and
		// TestAssignmentHeldUntilClaimSettles hold it as a site would.
		ClaimSettle: 10 * time.Millisecond,
	}
	if cfgEdit != nil {
		cfgEdit(&ecfg)
	}
	eng := pipeline.New(ectx, ecfg)

	lis := bufconn.Listen(1 << 20)
	gs := grpc.NewServer()
	// Security events are deduplicated per source for a millisecond only:
	// the tests look for each one (the peer is always bufconn).
	curev1.RegisterRunnerServiceServer(gs, &server.RunnerService{Store: st, Hub: hub, Log: log, Metrics: met, Audit: audit.New(st, log, time.Millisecond),
		Attestation: &attestpolicy.Policy{Catalog: ecfg.Manifests, ImageDir: filepath.Join(dir, "image"), Log: log}})
	go gs.Serve(lis)
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	f.eng, f.client, f.ecfg = eng, curev1.NewRunnerServiceClient(conn), ecfg
	nodeCtx, stopNode := context.WithCancel(ctx)
	go f.playNode(nodeCtx)
	t.Cleanup(func() {
		stopNode()
		f.mu.Lock()
		stop, last := f.cancel, f.eng
		f.mu.Unlock()
		stop()
		last.Wait()
		gs.Stop()
		conn.Close()
	})
	return f
}

var tokenRE = regexp.MustCompile(`cure\.token=(\S+)`)

// playNode watches the machine's boots: a PXE boot fetches the iPXE
// decision and starts a runner; a disk boot phones home like the host OS.
func (f *fixture) playNode(ctx context.Context) {
	seen := 0
	for ctx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
		boots := f.m.Boots()
		if len(boots) == seen || !f.m.Running() {
			continue
		}
		seen = len(boots)
		switch boots[seen-1] {
		case vbmc.BootPxe:
			f.mu.Lock()
			post := f.pxeDelay
			f.mu.Unlock()
			time.Sleep(post)
			d, err := f.engine().BootDecision(ctx, mac, nodeAddr)
			if err != nil || !d.Boot {
				continue // iPXE exits; nothing else on the fake disk boots
			}
			f.mu.Lock()
			hook := f.onBoot
			f.mu.Unlock()
			if hook != nil {
				hook()
			}
			tok := tokenRE.FindStringSubmatch(d.Cmdline)[1]
			go f.runRunner(ctx, tok, seen)
		case vbmc.BootUefiHttp:
			// The scripted node boots CURE over PXE only.
		case vbmc.BootHdd:
			f.mu.Lock()
			tok, inst, delay := f.hostToken, f.instanceID, f.hostBootDelay
			f.mu.Unlock()
			time.Sleep(delay)
			if tok != "" {
				// Like cloud-init's phone_home tries: the coordinator accepts
				// the callback only once it has recorded the reboot.
				form := func() (url.Values, error) { return url.Values{"instance_id": {inst}, "hostname": {"node1"}}, nil }
				for i := 0; i < 100 && ctx.Err() == nil; i++ {
					if f.engine().HostReady(ctx, "node1", tok, "10.0.2.15", form) == nil {
						break
					}
					time.Sleep(100 * time.Millisecond)
				}
			}
		}
	}
}

// runRunner is the runner of one boot: Hello, then phases as assigned.
func (f *fixture) runRunner(ctx context.Context, token string, boot int) {
	seq := uint64(0)
	state := &curev1.RunnerState{Kind: curev1.RunnerState_IDLE}
	var unacked []*curev1.Event
	for ctx.Err() == nil {
		sctx, cancel := context.WithCancel(ctx)
		stream, err := f.client.Session(sctx)
		if err != nil {
			cancel()
			return
		}
		state.LastEventSeq = seq
		f.mu.Lock()
		attestHook, forge := f.attest, f.forge
		f.mu.Unlock()
		bios, _, _ := f.bmc.FirmwareVersion("BIOS")
		var att *curev1.Attestation
		if attestHook != nil {
			att = attestHook(ctx, token, fmt.Sprintf("boot-%d", boot), boot)
		}
		hello := &curev1.Hello{
			Token: token, BootId: fmt.Sprintf("boot-%d", boot), State: state, SessionSecret: fmt.Sprintf("secret-of-boot-%d-%032d", boot, boot),
			Identity:    &curev1.Identity{BootMac: mac, SystemSerial: "S1", NodeId: "node1"},
			Inventory:   &curev1.Inventory{Disks: helloDisks, System: &curev1.SystemInfo{BiosVersion: bios}},
			Attestation: att,
		}
		f.mu.Lock()
		f.hellos = append(f.hellos, hello)
		f.mu.Unlock()
		_ = stream.Send(&curev1.RunnerMessage{Msg: &curev1.RunnerMessage_Hello{Hello: hello}})
		for _, ev := range unacked { // replay after reconnect
			_ = stream.Send(&curev1.RunnerMessage{Msg: &curev1.RunnerMessage_Event{Event: ev}})
		}
		emit := func(run string, phase modes.PhaseName, ev *curev1.Event) {
			seq++
			ev.Seq, ev.RunId, ev.Phase, ev.TimeUnixMs = seq, run, string(phase), time.Now().UnixMilli()
			unacked = append(unacked, ev)
			_ = stream.Send(&curev1.RunnerMessage{Msg: &curev1.RunnerMessage_Event{Event: ev}})
		}
		if forge != nil {
			forge(boot, func(phase string, ev *curev1.Event) { emit("", modes.PhaseName(phase), ev) })
		}
		reconnect := false
		for !reconnect {
			msg, err := stream.Recv()
			if err != nil {
				cancel()
				return
			}
			switch b := msg.GetMsg().(type) {
			case *curev1.CoordinatorMessage_Ack:
				unacked = slices.DeleteFunc(unacked, func(e *curev1.Event) bool { return e.GetSeq() <= b.Ack.GetSeq() })
			case *curev1.CoordinatorMessage_Assignment:
				a := b.Assignment
				f.mu.Lock()
				f.assignments = append(f.assignments, a)
				f.mu.Unlock()
				if fb := a.GetFirstBoot(); fb != nil {
					f.mu.Lock()
					f.hostToken, f.instanceID = fb.GetCallbackToken(), fb.GetInstanceId()
					f.mu.Unlock()
				}
				for _, name := range a.GetPhases() {
					p := modes.PhaseName(name)
					state = &curev1.RunnerState{Kind: curev1.RunnerState_IN_PHASE, RunId: a.GetRunId(), Phase: name}
					emit(a.GetRunId(), p, &curev1.Event{Body: &curev1.Event_PhaseStart{PhaseStart: &curev1.PhaseStart{}}})
					f.mu.Lock()
					drop := f.dropAfterStart == p && !f.dropped
					if drop {
						f.dropped = true
					}
					f.attempts[p]++
					status := f.phaseStatus(p, f.attempts[p])
					during := f.during
					f.mu.Unlock()
					if during != nil {
						run := a.GetRunId()
						if during(p, boot, func(ev *curev1.Event) { emit(run, p, ev) }) {
							cancel()
							return
						}
					}
					if drop {
						// The TCP stream dies mid-phase; the runner keeps working
						// and reconnects, replaying what was not acked.
						cancel()
						reconnect = true
					}
					if p == modes.OSInstall {
						emit(a.GetRunId(), p, &curev1.Event{Body: &curev1.Event_Metric{Metric: &curev1.Metric{Name: "write_throughput", Unit: "MB/s", Value: 512, Labels: map[string]string{"disk": "nvme0n1"}}}})
						emit(a.GetRunId(), p, &curev1.Event{Body: &curev1.Event_Metric{Metric: &curev1.Metric{Name: "os_install.stage_seconds", Unit: "s", Value: 0.002, Labels: map[string]string{"disk": "nvme0n1", "stage": "stream"}}}})
					}
					if p == modes.NVMe {
						emit(a.GetRunId(), p, &curev1.Event{Body: &curev1.Event_Verdict{Verdict: &curev1.Verdict{Component: "nvme/0", Check: "firmware", Status: curev1.VerdictStatus_MATCH, Observed: "7.2.22", Expected: "7.2.22"}}})
					}
					f.mu.Lock()
					vs := f.verdicts[p]
					hold := f.hold[p]
					f.mu.Unlock()
					for _, v := range vs {
						emit(a.GetRunId(), p, &curev1.Event{Body: &curev1.Event_Verdict{Verdict: v}})
					}
					time.Sleep(hold)
					emit(a.GetRunId(), p, &curev1.Event{Body: &curev1.Event_PhaseEnd{PhaseEnd: &curev1.PhaseEnd{Status: status, Message: "scripted", DurationMs: 5}}})
					if status == curev1.PhaseStatus_PHASE_FAILED {
						break
					}
				}
				state = &curev1.RunnerState{Kind: curev1.RunnerState_DONE, RunId: a.GetRunId()}
			case *curev1.CoordinatorMessage_Reboot:
				f.mu.Lock()
				keep := f.rebootKeepsStream
				f.mu.Unlock()
				if keep {
					// The machine resets under the stream: nothing closes it.
					go func() { <-ctx.Done(); cancel() }()
				} else {
					cancel()
				}
				f.m.GuestReset()
				return
			}
		}
		cancel()
		time.Sleep(50 * time.Millisecond)
	}
}

func (f *fixture) waitRun(runID string) store.Run {
	f.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		r, err := f.st.GetRun(context.Background(), runID)
		if err != nil {
			f.t.Fatal(err)
		}
		// Ended, and done ending: finish's side effects (tokens, events,
		// metrics, webhooks) follow the status save.
		if r.Status != curev1.RunStatus_RUN_RUNNING && r.Status != curev1.RunStatus_RUN_PENDING && !f.engine().Driving(runID) {
			return r
		}
		time.Sleep(50 * time.Millisecond)
	}
	f.t.Fatalf("run %s did not end", runID)
	return store.Run{}
}

func (f *fixture) phases(runID string) map[modes.PhaseName]store.Phase {
	ps, err := f.st.Phases(context.Background(), runID)
	if err != nil {
		f.t.Fatal(err)
	}
	m := map[modes.PhaseName]store.Phase{}
	for _, p := range ps {
		m[p.Name] = p
	}
	return m
}

func TestProvisionRunsEveryPhaseInOrder(t *testing.T) {
	f := newFixture(t, nil)
	runID, err := f.eng.Start(context.Background(), "node1", modes.Provision, "", false)
	if err != nil {
		t.Fatal(err)
	}
	r := f.waitRun(runID)
	if r.Status != curev1.RunStatus_RUN_SUCCEEDED {
		t.Fatalf("run ended %s: %s", r.Status, r.Message)
	}
	ps, _ := f.st.Phases(context.Background(), runID)
	var names []modes.PhaseName
	for _, p := range ps {
		names = append(names, p.Name)
	}
	plan, _ := modes.For(modes.Provision)
	var want []modes.PhaseName
	for _, p := range plan.Phases {
		want = append(want, p.Name)
	}
	if !slices.Equal(names, want) {
		t.Errorf("phases = %v\nwant %v", names, want)
	}
	// The fake manifest pins no BMC/BIOS/HGX firmware and no BIOS settings:
	// those phases must be skipped, never passed.
	got := f.phases(runID)
	for _, p := range []modes.PhaseName{modes.BMC, modes.BIOS, modes.HGX, modes.BIOSSettings} {
		if got[p].Status != curev1.PhaseStatus_PHASE_SKIPPED {
			t.Errorf("%s = %s, want skipped", p, got[p].Status)
		}
	}
	var overrides []string
	for _, o := range f.bmc.Overrides() {
		overrides = append(overrides, o.Target+"/"+o.Enabled)
	}
	if !slices.Equal(overrides, []string{"Pxe/Once", "Hdd/Continuous"}) {
		t.Errorf("override history = %v", overrides)
	}
	if !slices.Equal(f.m.Boots(), []vbmc.BootDevice{vbmc.BootPxe, vbmc.BootHdd}) {
		t.Errorf("boots = %v, want [Pxe Hdd]", f.m.Boots())
	}
	if r.Reboots != 2 {
		t.Errorf("reboots = %d, want 2", r.Reboots)
	}
	vs, _ := f.st.Verdicts(context.Background(), runID)
	if len(vs) != 1 || vs[0].Component != "nvme/0" || vs[0].Status != curev1.VerdictStatus_MATCH {
		t.Errorf("verdicts = %+v", vs)
	}
	// Need to know: the PSID of the selected disk only, the callback token
	// only with os_install; and nothing of the run's tokens survives it.
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.assignments) == 0 {
		t.Fatal("no assignment seen")
	}
	for _, a := range f.assignments {
		if slices.Contains(a.GetPhases(), string(modes.SEDRevert)) {
			if len(a.GetPsids()) != 1 || a.GetPsids()["DISK-WIPE"] == "" {
				t.Errorf("sed_revert assignment PSIDs = %v, want DISK-WIPE's only", a.GetPsids())
			}
		} else if len(a.GetPsids()) != 0 {
			t.Errorf("assignment %v without sed_revert carries PSIDs", a.GetPhases())
		}
		if slices.Contains(a.GetPhases(), string(modes.OSInstall)) != (a.GetFirstBoot().GetCallbackToken() != "") {
			t.Errorf("assignment %v: callback token %q", a.GetPhases(), a.GetFirstBoot().GetCallbackToken())
		}
	}
	// Only the registered boot's binding stays (it opens nothing: the run
	// is not active; that boot is told its run ended).
	if ws, err := f.st.BootWindow(context.Background(), runID, r.Pipeline.CUREWindow); err != nil || ws.Issued > 1 || (ws.Issued == 1) != (ws.Bound != nil) {
		t.Errorf("boot tokens of the finished run: %+v %v, want the registered boot's binding at most", ws, err)
	}
	if len(r.Pipeline.HostTokens) != 0 {
		t.Error("the host token hash outlived the run")
	}
}

func TestPhaseFailureBudgetThenResume(t *testing.T) {
	f := newFixture(t, nil)
	fail := true
	f.phaseStatus = func(p modes.PhaseName, attempt int) curev1.PhaseStatus {
		if p == modes.OSInstall && fail {
			return curev1.PhaseStatus_PHASE_FAILED
		}
		return curev1.PhaseStatus_PHASE_OK
	}
	runID, err := f.eng.Start(context.Background(), "node1", modes.Provision, "", false)
	if err != nil {
		t.Fatal(err)
	}
	r := f.waitRun(runID)
	if r.Status != curev1.RunStatus_RUN_FAILED || r.Phase != modes.OSInstall || !strings.Contains(r.Message, "os_install failed 2 times") {
		t.Fatalf("run = %s at %s: %q; want failed at os_install after 2 attempts", r.Status, r.Phase, r.Message)
	}
	for _, o := range f.bmc.Overrides() {
		if o.Target == "Hdd" {
			t.Fatal("boot override switched to disk after a failed install")
		}
	}
	f.mu.Lock()
	fail = false
	f.mu.Unlock()
	again, err := f.eng.Start(context.Background(), "node1", modes.Provision, "", true)
	if err != nil || again != runID {
		t.Fatalf("resume = %s, %v; want the same run", again, err)
	}
	r = f.waitRun(runID)
	if r.Status != curev1.RunStatus_RUN_SUCCEEDED {
		t.Fatalf("resumed run ended %s: %s", r.Status, r.Message)
	}
	got := f.phases(runID)
	if got[modes.WaitForCURE].Attempts != 1 || got[modes.NVMe].Attempts != 1 {
		t.Errorf("resume repeated earlier phases: wait_for_cure %d, nvme %d attempts", got[modes.WaitForCURE].Attempts, got[modes.NVMe].Attempts)
	}
	if got[modes.OSInstall].Attempts != 3 {
		t.Errorf("os_install attempts = %d, want 3", got[modes.OSInstall].Attempts)
	}
}

func TestStreamCutMidPhaseReattachesWithoutRetry(t *testing.T) {
	f := newFixture(t, nil)
	f.dropAfterStart = modes.OSInstall
	runID, err := f.eng.Start(context.Background(), "node1", modes.Provision, "", false)
	if err != nil {
		t.Fatal(err)
	}
	r := f.waitRun(runID)
	if r.Status != curev1.RunStatus_RUN_SUCCEEDED {
		t.Fatalf("run ended %s: %s", r.Status, r.Message)
	}
	if r.PhaseFailures != 0 {
		t.Errorf("a cut stream burned %d phase retries", r.PhaseFailures)
	}
	if got := f.phases(runID)[modes.OSInstall]; got.Attempts != 1 || got.Status != curev1.PhaseStatus_PHASE_OK {
		t.Errorf("os_install = %+v, want one ok attempt", got)
	}
	evs, _ := f.st.Events(context.Background(), runID, 0, 1000)
	ends := 0
	reattached := false
	for _, e := range evs {
		if e.Source == "runner" && e.Kind == runstate.EventPhaseEnd && e.Phase == modes.OSInstall {
			ends++
		}
		if strings.Contains(e.Message, "re-attached mid-phase") {
			reattached = true
		}
	}
	if ends != 1 {
		t.Errorf("os_install phase_end stored %d times, want exactly once", ends)
	}
	if !reattached {
		t.Error("no re-attach event in the timeline")
	}
}

func TestAuditNeverWrites(t *testing.T) {
	f := newFixture(t, nil)
	runID, err := f.eng.Start(context.Background(), "node1", modes.Audit, "", false)
	if err != nil {
		t.Fatal(err)
	}
	r := f.waitRun(runID)
	if r.Status != curev1.RunStatus_RUN_SUCCEEDED {
		t.Fatalf("audit ended %s: %s", r.Status, r.Message)
	}
	got := f.phases(runID)
	for _, p := range []modes.PhaseName{modes.OSInstall, modes.SEDRevert, modes.SetBootDisk, modes.WaitForHostOS} {
		if _, ok := got[p]; ok {
			t.Errorf("audit ran %s", p)
		}
	}
	for _, o := range f.bmc.Overrides() {
		if o.Target == "Hdd" {
			t.Error("audit changed the boot order to disk")
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.assignments) == 0 {
		t.Fatal("audit sent no assignment (nic, dpu, nvme compare in-band)")
	}
	for _, a := range f.assignments {
		if len(a.GetPsids()) != 0 || a.GetFirstBoot() != nil {
			t.Errorf("audit assignment %v carries PSIDs %v or first-boot %v", a.GetPhases(), a.GetPsids(), a.GetFirstBoot())
		}
	}
}

// A hardware mismatch ends a provision before anything is written: no
// firmware phase, no in-band write is ever assigned.
func TestHardwareGateStopsBeforeFirmware(t *testing.T) {
	f := newFixture(t, nil)
	f.phaseStatus = func(phase modes.PhaseName, _ int) curev1.PhaseStatus {
		if phase == modes.Hardware {
			return curev1.PhaseStatus_PHASE_FAILED
		}
		return curev1.PhaseStatus_PHASE_OK
	}
	runID, err := f.eng.Start(context.Background(), "node1", modes.Provision, "", false)
	if err != nil {
		t.Fatal(err)
	}
	r := f.waitRun(runID)
	if r.Status != curev1.RunStatus_RUN_FAILED || r.Phase != modes.Hardware || !strings.Contains(r.Message, "phase hardware failed 2 times") {
		t.Fatalf("run %s at %s: %s", r.Status, r.Phase, r.Message)
	}
	got := f.phases(runID)
	for _, p := range []modes.PhaseName{modes.BMC, modes.BIOS, modes.BIOSSettings, modes.HGX, modes.NIC, modes.NVMe, modes.SEDRevert, modes.OSInstall} {
		if _, ran := got[p]; ran {
			t.Errorf("phase %s ran after the hardware gate failed", p)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, a := range f.assignments {
		if !slices.Equal(a.GetPhases(), []string{string(modes.Hardware)}) {
			t.Errorf("assignment phases %v", a.GetPhases())
		}
		if len(a.GetSkuYaml()) != 0 {
			t.Error("provision assignment carries the SKU twice")
		}
	}
}

// A diagnostic run's assignment carries the node's SKU next to the suite,
// for the hardware check.
func TestDiagnosticCarriesNodeSKU(t *testing.T) {
	var dir string
	f := newFixture(t, func(_ *manifests.SKU, casDir string) { dir = filepath.Dir(filepath.Dir(casDir)) })
	suite, err := os.ReadFile("../../manifests/examples/suites/rma-quick.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "manifests", "suites"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "manifests", "suites", "rma-quick.yaml"), suite, 0o644); err != nil {
		t.Fatal(err)
	}
	runID, err := f.eng.Start(context.Background(), "node1", modes.Diagnostic, "rma-quick", false)
	if err != nil {
		t.Fatal(err)
	}
	if r := f.waitRun(runID); r.Status != curev1.RunStatus_RUN_SUCCEEDED {
		t.Fatalf("run %s: %s", r.Status, r.Message)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.assignments) != 1 {
		t.Fatalf("%d assignments", len(f.assignments))
	}
	a := f.assignments[0]
	if !slices.Equal(a.GetPhases(), modes.PhaseStrings([]modes.PhaseName{modes.Hardware, modes.Validate})) || a.GetManifestName() != "rma-quick.yaml" || a.GetSkuName() != "qemu-nvme.yaml" {
		t.Fatalf("assignment %v %s %s", a.GetPhases(), a.GetManifestName(), a.GetSkuName())
	}
	if sku, err := manifests.ParseSKU(a.GetSkuName(), a.GetSkuYaml()); err != nil || sku.Metadata.Name != "qemu-nvme" {
		t.Errorf("sku in the assignment: %v %v", sku, err)
	}
}

// A suite whose site program is not in the artifact store fails preflight
// once, naming the check and what to import; imported, the run goes on and
// the assignment carries the suite and the artifact base the node fetches
// the program from.
func TestPreflightSiteProgram(t *testing.T) {
	var dir string
	f := newFixture(t, func(_ *manifests.SKU, casDir string) { dir = filepath.Dir(filepath.Dir(casDir)) })
	prog := []byte("#!/bin/sh\necho '{\"component\":\"x/0\",\"status\":\"PASS\"}'\n")
	sum := sha256.Sum256(prog)
	hexsum := hex.EncodeToString(sum[:])
	suite := fmt.Sprintf("apiVersion: cure.dev/v1\nkind: ValidationSuite\nmetadata: {name: site}\nspec:\n  checks:\n"+
		"    - {name: bmc-health, type: site, program: {sha256: %s, size: %d, description: d}}\n", hexsum, len(prog))
	if err := os.MkdirAll(filepath.Join(dir, "manifests", "suites"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "manifests", "suites", "site.yaml"), []byte(suite), 0o644); err != nil {
		t.Fatal(err)
	}
	runID, err := f.eng.Start(context.Background(), "node1", modes.Diagnostic, "site", false)
	if err != nil {
		t.Fatal(err)
	}
	r := f.waitRun(runID)
	if pre := f.phases(runID)[modes.Preflight]; r.Status != curev1.RunStatus_RUN_FAILED || pre.Attempts != 1 ||
		!strings.Contains(r.Message, "site check bmc-health: program sha256:"+hexsum+" not in the artifact store") || !strings.Contains(r.Message, "provisioner-lite artifacts add") {
		t.Fatalf("run %s after %d preflight attempts: %s", r.Status, pre.Attempts, r.Message)
	}
	if err := os.WriteFile(filepath.Join(dir, "artifacts", "sha256", hexsum), prog, 0o644); err != nil {
		t.Fatal(err)
	}
	runID, err = f.eng.Start(context.Background(), "node1", modes.Diagnostic, "site", false)
	if err != nil {
		t.Fatal(err)
	}
	if r := f.waitRun(runID); r.Status != curev1.RunStatus_RUN_SUCCEEDED {
		t.Fatalf("run %s: %s", r.Status, r.Message)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.assignments) != 1 || f.assignments[0].GetArtifactBaseUrl() != "http://10.0.2.2:8080/artifacts/" || f.assignments[0].GetManifestName() != "site.yaml" {
		t.Fatalf("assignments %v", f.assignments)
	}
}
