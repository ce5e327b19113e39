package coordinator

import (
	"log/slog"
	"os"
	"time"

	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/provisioner-lite/pipeline"
	"github.com/cure-oss/cure/provisioner-lite/store"
)

// Config is everything a coordinator takes: provisioner-lite's flags, one
// field each (the flag is named beside it). Start from DefaultConfig: a
// zero field means what its flag's zero means (0 for --stats-every is off,
// for --retention forever), not the default.
type Config struct {
	StateDir    string // --state-dir: store, PKI and artifacts (default "state"; one coordinator at a time)
	ManifestDir string // --manifests: SKU manifests and suites/ (default "manifests/examples")
	NodesFile   string // --nodes: node inventory imported at start ("": none)
	ImageDir    string // --image-dir: cure-build output (default "out/image")
	// ImageDirArm64 is --image-dir-arm64: the arm64 image (cure-build
	// --arch arm64), for the nodes of SKUs with spec.arch arm64 ("": none,
	// and such SKUs are refused at start; arch.go).
	ImageDirArm64 string

	// Listen addresses: host:port, or fd:N for a listening socket
	// inherited as file descriptor N. Port 0 binds any free port; Addrs
	// says which once Ready is closed.
	HTTPListen    string // --http-listen: boot and artifact HTTP (default ":8080")
	HTTPSListen   string // --https-listen: the HTTPS boot listener ("": none)
	GRPCListen    string // --grpc-listen: runners and curectl (default ":8443")
	MetricsListen string // --metrics-listen: /metrics, /healthz, /readyz (default "127.0.0.1:9464"; "": off)
	WebListen     string // --web-listen: the dashboard ("": off)
	PprofListen   string // --pprof-listen: /debug/pprof, loopback only ("": off)

	Advertise     string   // --advertise: host nodes reach this coordinator at ("": the address of PXEInterface, else of the default route's interface)
	AdvertiseGRPC string   // --advertise-grpc: host:port nodes dial for gRPC ("": Advertise and the gRPC port)
	PXEInterface  string   // --pxe-interface: the interface facing the nodes
	ProcRoot      string   // /proc, where the default route is read (default "/proc")
	BMCBaseURL    string   // --bmc-base-url: the artifact server as BMCs reach it ("": the nodes' URL)
	TLSNames      []string // --tls-name: more names of the gRPC server certificate (each may be a comma-separated list)
	Netboot       NetbootConfig

	ImportArtifacts []string // --import-artifact: files added to the artifact store at start
	ToolBundle      string   // --tool-bundle: the tool bundle served to suites and debug shells ("": none)

	Timeouts        pipeline.Timeouts // --reconnect, --runner-phase-timeout, --bmc-*timeout, --bmc-poll, --retry-*, --wait-*
	Budgets         pipeline.Budgets  // --phase-attempts (default 3)
	BindBootIP      bool              // --bind-boot-ip (default true)
	ClaimSettle     time.Duration     // --claim-settle (default pipeline.DefaultClaimSettle; must be positive)
	TokensPerWindow int               // --boot-tokens-per-window (default 6)
	MaxRuns         int               // --max-runs (default pipeline.DefaultMaxRuns)
	// FleetSize is --fleet-size: the nodes the memory plan is sized for
	// (0: the store's node count, followed as it changes; memory.go).
	FleetSize int
	// MemoryLimit is --memory-limit: the Go runtime's memory limit in
	// bytes (0: planned from the fleet; negative: none).
	MemoryLimit int64
	// TuneMemory applies the memory plan (FleetSize, MemoryLimit) to the
	// process: provisioner-lite sets it; a coordinator inside another
	// program (a test) leaves that program's GC alone.
	TuneMemory bool

	EventLimits store.EventLimits // --max-run-events, --max-run-event-bytes, --max-run-verdicts (default store.DefaultEventLimits)
	Retention   store.Retention   // --retention, --audit-retention, --fleet-retention (default store.DefaultRetention)
	Conns       ConnLimits        // --*-max-conns*, --web-max-streams*

	BMCCA            string        // --bmc-ca: PEM bundle verifying BMC certificates ("": the system roots)
	EKRoots          string        // --ek-roots: TPM manufacturers' roots ("": EKs trusted on first use)
	PowerOnRate      float64       // --power-on-rate: power-ons per second per power group (default 2; 0: not paced)
	PowerOnBurst     int           // --power-on-burst (default 8)
	PowerGroupLabels string        // --power-group-label: comma-separated node labels naming the power group (default "pdu,rack")
	BMCMaxInflight   int           // --bmc-max-inflight: Redfish calls in flight per BMC (default 2)
	BMCMaxLogins     int           // --bmc-max-logins: Redfish logins in flight over all BMCs (default 64)
	BMCIdle          time.Duration // --bmc-idle: an unused BMC session is logged out after this (default 5m)

	DB         string        // --db: "" for SQLite in the state dir, or a PostgreSQL DSN
	Instance   string        // --instance-id (default DefaultInstanceID())
	PeerGRPC   string        // --peer-grpc: other instances of this fleet, host:port comma-separated
	LeaseTTL   time.Duration // --lease-ttl (default store.DefaultLeaseTTL)
	StatsEvery time.Duration // --stats-every: store statistics logged this often (default 1m; 0: never)
	Shared     SharedConfig  // --artifact-mirror, --manifests-from-store (instances.go)

	Webhooks          []string // --webhook: URLs notified when a run ends or needs attention
	WebhookSecretFile string   // --webhook-secret-file ("": webhook.secret in the state dir)

	Enlist EnlistConfig // --enlist, --enlist-max (enlist.go)

	// Log is the coordinator's logger (nil: slog.Default()).
	Log *slog.Logger
}

// DefaultConfig is the configuration provisioner-lite's flags default to
// (except --db, whose default is $CURE_DB).
func DefaultConfig() Config {
	return Config{
		StateDir:      "state",
		ManifestDir:   "manifests/examples",
		ImageDir:      "out/image",
		HTTPListen:    ":8080",
		GRPCListen:    ":8443",
		MetricsListen: "127.0.0.1:9464",
		ProcRoot:      "/proc",
		Netboot:       NetbootConfig{IPXEDir: "/usr/lib/ipxe", IPXEEFI: "snponly.efi", Mode: "pxe", BootMode: "auto"},
		Timeouts: pipeline.Timeouts{
			Reconnect: 3 * time.Minute, RunnerPhase: 30 * time.Minute, BMCCall: 30 * time.Second, BMCTask: time.Hour,
			BMCReset: 10 * time.Minute, BMCPoll: time.Duration(manifests.DefaultBMCInterval), RetryBase: 2 * time.Second,
			RetryMax: time.Minute, WaitForCURE: 10 * time.Minute, HostOS: 15 * time.Minute,
		},
		Budgets:          pipeline.Budgets{PhaseAttempts: 3},
		BindBootIP:       true,
		ClaimSettle:      pipeline.DefaultClaimSettle,
		TokensPerWindow:  6,
		MaxRuns:          pipeline.DefaultMaxRuns,
		EventLimits:      store.DefaultEventLimits,
		Retention:        store.DefaultRetention,
		Conns:            ConnLimits{WebStreams: 64, WebStreamsPerOperator: 8},
		PowerOnRate:      2,
		PowerOnBurst:     8,
		PowerGroupLabels: "pdu,rack",
		BMCMaxInflight:   2,
		BMCMaxLogins:     64,
		BMCIdle:          5 * time.Minute,
		Instance:         DefaultInstanceID(),
		LeaseTTL:         store.DefaultLeaseTTL,
		StatsEvery:       time.Minute,
	}
}

// DefaultInstanceID is the host name: stable across restarts, so a restarted
// instance takes its own runs back at once instead of waiting for their leases.
func DefaultInstanceID() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "cure-1"
	}
	return h
}
