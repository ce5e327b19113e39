// Package store persists the coordinator's state in SQLite (modernc.org/sqlite,
// pure Go): nodes, runs, phases, events, verdicts and boot tokens. Everything a
// coordinator restart must not lose lives here.
//
// Writes go through one committer goroutine (group commit, commit.go), so
// concurrent writers queue in Go instead of racing for SQLite's write lock (no
// SQLITE_BUSY under load) and share fsyncs; reads use a separate pool, which
// WAL lets run alongside the writer.
//
// A runner's progress (metrics, logs, heartbeats: QueueRunnerEvent,
// QueueProgress) is answered before its write and written one batch per
// run per second, or ahead of the run's next durable event
// (progressbatch.go). A coordinator crash loses at most the last second of
// each run's progress, never a state change: phase events, verdicts and
// everything else stay durable before the caller returns.
package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/cure-oss/cure/provisioner-lite/runsignal"

	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

// ErrNotFound is wrapped by every lookup that finds no row.
var ErrNotFound = errors.New("not found")

// ErrExpired is wrapped by LookupBootToken when the token exists but has expired.
var ErrExpired = errors.New("expired")

// Store is the coordinator's database. It is safe for concurrent use.
type Store struct {
	path   string
	w      *sql.DB // written only by the committer
	r      *pool   // readers
	wp     *pool   // prepared statements of the writer connection
	sealer *sealer // nil: the store refuses to keep literal secrets

	// signals tells a run's watchers of each commit that changed it.
	signals *runsignal.Bus

	gc       *committer
	instance string        // lease owner this store writes as; "" = no leases
	leaseTTL time.Duration // how long a lease outlives its last renewal

	dialect dialect

	runCacheMu sync.Mutex
	runCache   map[string]cachedRow // last row this store wrote, per active run

	maxNotes int64 // coordinator notes kept per run (notes.go)

	maxMeasurements int64 // measurement rows kept per run (measurements.go)
}

// busyTimeoutMs bounds how long a connection waits for SQLite's lock (a reader
// during a WAL checkpoint, another process) before failing.
const busyTimeoutMs = 10000

// Option configures Open.
type Option func(*options)

type options struct {
	stateKey      []byte
	noGroupCommit bool
	instance      string
	leaseTTL      time.Duration
	maxNotes      int64

	maxMeasurements int64
}

// WithoutGroupCommit commits every write in its own transaction, as before
// group commit existed: the baseline of the store benchmarks.
func WithoutGroupCommit() Option { return func(o *options) { o.noGroupCommit = true } }

// WithInstance names the coordinator instance this store writes as. Runs it
// creates are leased to it (see leases.go); updates of runs another live
// instance holds fail with ErrLeaseLost. Without it there are no leases.
func WithInstance(id string) Option { return func(o *options) { o.instance = id } }

// WithLeaseTTL sets how long a run's lease outlives its last renewal
// (default DefaultLeaseTTL).
func WithLeaseTTL(d time.Duration) Option { return func(o *options) { o.leaseTTL = d } }

// WithStateKey gives the store the 32-byte key that seals secrets at rest (BMC
// passwords, PSIDs). The key must live outside the database: a copy of the
// database alone then reveals no credential. Without it, the store refuses to
// keep a literal secret.
func WithStateKey(key []byte) Option { return func(o *options) { o.stateKey = key } }

// dbFileMode is the mode of the database and its WAL/SHM files: they hold the
// inventory and the evidence, readable by the coordinator's user only.
const dbFileMode = 0o600

// Open opens (creating if needed) the database at path and migrates its schema
// to the newest version. The directory must exist. The database files are
// created 0600 (and corrected to 0600 when wider), whatever the umask.
func Open(path string, opts ...Option) (*Store, error) {
	if path == "" {
		return nil, errors.New("store: open: empty database path")
	}
	var o options
	for _, f := range opts {
		f(&o)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	var seal *sealer
	if o.stateKey != nil {
		if seal, err = newSealer(o.stateKey); err != nil {
			return nil, fmt.Errorf("store: open %s: %w", abs, err)
		}
	}
	// SQLite creates the WAL and SHM files with the database file's mode, so
	// creating the database first with 0600 makes all three private.
	if err := ensureMode(abs, true); err != nil {
		return nil, fmt.Errorf("store: open %s: %w", abs, err)
	}
	// synchronous=FULL: an event acked to a runner (which then forgets it) must
	// survive a power cut of the coordinator, not only a process crash.
	base := "file:" + (&url.URL{Path: abs}).EscapedPath() +
		fmt.Sprintf("?_pragma=busy_timeout(%d)&_pragma=foreign_keys(1)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)", busyTimeoutMs)

	w, err := sql.Open("sqlite", base+"&_txlock=immediate")
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", abs, err)
	}
	// Writes are serialised by the committer (one goroutine), not by the
	// pool: the second connection only prepares statements while the first
	// is inside a group transaction.
	w.SetMaxOpenConns(2)
	w.SetMaxIdleConns(2)
	w.SetConnMaxLifetime(0)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := checkNotNewerDB(ctx, w, false); err != nil {
		w.Close()
		return nil, fmt.Errorf("store: open %s: %w", abs, err)
	}
	if err := migrate(ctx, w); err != nil {
		w.Close()
		return nil, fmt.Errorf("store: open %s: %w", abs, err)
	}
	if err := recordVersion(ctx, w, sqliteDialect); err != nil {
		w.Close()
		return nil, fmt.Errorf("store: open %s: %w", abs, err)
	}

	if err := upgradeSecrets(ctx, w, seal); err != nil {
		w.Close()
		return nil, fmt.Errorf("store: open %s: %w", abs, err)
	}
	for _, suffix := range []string{"-wal", "-shm"} {
		if err := ensureMode(abs+suffix, false); err != nil {
			w.Close()
			return nil, fmt.Errorf("store: open %s: %w", abs, err)
		}
	}

	r, err := sql.Open("sqlite", base+"&_pragma=query_only(1)")
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("store: open %s for reading: %w", abs, err)
	}
	// Every reader stays open: database/sql keeps only 2 idle connections
	// by default, so under load the other two were closed after each use
	// and opened again, and the statements prepared on them (kept compiled
	// per connection) were compiled again with every new connection.
	r.SetMaxOpenConns(4)
	r.SetMaxIdleConns(4)
	r.SetConnMaxLifetime(0)
	r.SetConnMaxIdleTime(0)
	if err := r.PingContext(ctx); err != nil {
		w.Close()
		r.Close()
		return nil, fmt.Errorf("store: open %s for reading: %w", abs, err)
	}
	st := &Store{path: abs, w: w, r: newPool(r), wp: newPool(w), sealer: seal, signals: runsignal.New(),
		instance: o.instance, leaseTTL: o.leaseTTL, runCache: map[string]cachedRow{}, dialect: sqliteDialect, maxNotes: o.notes(),
		maxMeasurements: o.measurements()}
	if st.leaseTTL <= 0 {
		st.leaseTTL = DefaultLeaseTTL
	}
	maxBatch := 256
	if o.noGroupCommit {
		maxBatch = 1
	}
	st.gc = newCommitter(w, st.wp, maxBatch)
	return st, nil
}

// ensureMode makes path's mode dbFileMode, creating it (empty) when create is
// set and it does not exist.
func ensureMode(path string, create bool) error {
	st, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		if !create {
			return nil
		}
		f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, dbFileMode)
		if err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
		if f != nil {
			f.Close()
		}
		st, err = os.Stat(path)
		if err != nil {
			return err
		}
	} else if err != nil {
		return err
	}
	if st.Mode().Perm() != dbFileMode {
		if err := os.Chmod(path, dbFileMode); err != nil {
			return fmt.Errorf("make %s private (%v -> %v): %w", path, st.Mode().Perm(), os.FileMode(dbFileMode), err)
		}
	}
	return nil
}

// Close closes both pools. Subscribers are not closed: their cancel funcs still work.
func (s *Store) Close() error {
	s.gc.close()
	errs := []error{s.r.close(), s.wp.close(), s.w.Close()}
	if s.r.db != s.w {
		errs = append(errs, s.r.db.Close())
	}
	return errors.Join(errs...)
}

// Path is the absolute path of the database file.
func (s *Store) Path() string { return s.path }

// Signals is where the store tells a run's watchers that it committed a
// change to the run (an event appended, the run updated): subscribe with
// Signals().Subscribe(runID) and re-read the store after each signal. The
// store only notifies; it is not the bus.
func (s *Store) Signals() *runsignal.Bus { return s.signals }

// notify tells runID's watchers of a commit (coalesced, never blocking the
// writer).
func (s *Store) notify(runID string) { s.signals.Notify(runID) }

// toMs stores times as UTC unix milliseconds; the zero time is stored as 0.
func toMs(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

func fromMs(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms).UTC()
}

// tx runs fn in a write transaction. Concurrent callers share one
// transaction (group commit, see commit.go); fn's own failure rolls back only
// its own writes.
func (s *Store) tx(ctx context.Context, fn func(*Tx) error) error {
	return s.gc.do(ctx, fn)
}
