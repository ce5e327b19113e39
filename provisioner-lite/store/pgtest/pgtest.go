// Package pgtest starts a private PostgreSQL cluster for tests: initdb and
// pg_ctl from Debian's postgresql package, run as an unprivileged user
// (they refuse root), listening only on a Unix socket in a temp directory,
// stopped and removed when the test ends.
package pgtest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
)

// Cluster is a running private PostgreSQL server.
type Cluster struct {
	dir, sockDir, bin string
	cred              *syscall.Credential
	// Superuser is the cluster's superuser; trust authentication on the
	// socket (the socket directory is reachable by nobody else).
	Superuser string
}

// Start starts a cluster for t and stops it at t's end. It fails the test
// (rather than skipping) when PostgreSQL is missing, unless CURE_SKIP_PG=1:
// `make test` installs it (scripts/install-deps.sh).
func Start(t testing.TB) *Cluster {
	t.Helper()
	c, err := start()
	if err != nil {
		if os.Getenv("CURE_SKIP_PG") == "1" {
			t.Skipf("PostgreSQL: %v (CURE_SKIP_PG=1)", err)
		}
		t.Fatalf("PostgreSQL: %v (install it with scripts/install-deps.sh, or set CURE_SKIP_PG=1 to skip)", err)
	}
	t.Cleanup(c.Stop)
	return c
}

var (
	sharedOnce sync.Once
	shared     *Cluster
	sharedErr  error
)

// Shared returns one cluster for the whole test binary (initdb takes
// seconds); stop it from TestMain with StopShared.
func Shared(t testing.TB) *Cluster {
	t.Helper()
	sharedOnce.Do(func() { shared, sharedErr = start() })
	if sharedErr != nil {
		if os.Getenv("CURE_SKIP_PG") == "1" {
			t.Skipf("PostgreSQL: %v (CURE_SKIP_PG=1)", sharedErr)
		}
		t.Fatalf("PostgreSQL: %v (install it with scripts/install-deps.sh, or set CURE_SKIP_PG=1 to skip)", sharedErr)
	}
	return shared
}

// StopShared stops the shared cluster, if one was started.
func StopShared() {
	if shared != nil {
		shared.Stop()
	}
}

func pgBin() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Sort(sort.Reverse(sort.StringSlice(dirs)))
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	return "", fmt.Errorf("no initdb under /usr/lib/postgresql/*/bin")
}

func start() (*Cluster, error) {
	bin, err := pgBin()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "cure-pg-")
	if err != nil {
		return nil, err
	}
	c := &Cluster{dir: dir, sockDir: filepath.Join(dir, "sock"), bin: bin, Superuser: "cure"}
	if err := os.Mkdir(c.sockDir, 0o700); err != nil {
		return nil, err
	}
	if os.Geteuid() == 0 {
		// initdb and postgres refuse to run as root.
		u, err := user.Lookup("postgres")
		if err != nil {
			u, err = user.Lookup("nobody")
		}
		if err != nil {
			return nil, fmt.Errorf("no unprivileged user (postgres or nobody) to run the cluster as: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		c.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		for _, p := range []string{dir, c.sockDir} {
			if err := os.Chown(p, uid, gid); err != nil {
				return nil, err
			}
		}
	}
	data := filepath.Join(dir, "data")
	if out, err := c.run("initdb", "-D", data, "-U", c.Superuser, "-A", "trust", "--no-sync", "-E", "UTF8", "--no-instructions"); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("initdb: %v\n%s", err, out)
	}
	// Socket only; small and quick. fsync stays on: benchmarks measure a
	// durable commit, as in production.
	opts := fmt.Sprintf("-k %s -c listen_addresses='' -c shared_buffers=32MB -c max_connections=200", c.sockDir)
	if out, err := c.run("pg_ctl", "-D", data, "-o", opts, "-l", filepath.Join(dir, "log"), "-w", "-t", "60", "start"); err != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "log"))
		os.RemoveAll(dir)
		return nil, fmt.Errorf("pg_ctl start: %v\n%s\n%s", err, out, log)
	}
	return c, nil
}

func (c *Cluster) run(name string, args ...string) ([]byte, error) {
	cmd := exec.Command(filepath.Join(c.bin, name), args...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LANG=C.UTF-8"}
	cmd.Dir = c.dir
	if c.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	}
	return cmd.CombinedOutput()
}

// Stop stops the server and removes its files.
func (c *Cluster) Stop() {
	c.run("pg_ctl", "-D", filepath.Join(c.dir, "data"), "-m", "immediate", "-w", "stop")
	os.RemoveAll(c.dir)
}

// DSN is the connection string of database db.
func (c *Cluster) DSN(db string) string {
	return fmt.Sprintf("host=%s user=%s dbname=%s sslmode=disable", c.sockDir, c.Superuser, db)
}

// NewDatabase creates a fresh database and returns its DSN.
func (c *Cluster) NewDatabase(t testing.TB) string {
	t.Helper()
	b := make([]byte, 6)
	rand.Read(b)
	name := "t_" + hex.EncodeToString(b)
	db, err := sql.Open("pgx", c.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := db.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create database %s: %v", name, err)
	}
	return c.DSN(name)
}
