package store

import (
	"sync"
	"testing"
	"time"

	"github.com/cure-oss/cure/provisioner-lite/store/pgtest"
)

// Three instances on one PostgreSQL database: exactly one holds a named
// lease at a time; it renews it; once it stops renewing, another takes it
// within the TTL; a release hands it over at once. The registry lists the
// instances with their artifact URLs.
func TestNamedLeaseAndRegistryOnPostgres(t *testing.T) {
	dsn := pgtest.Shared(t).NewDatabase(t)
	ctx := ctxT(t)
	open := func(inst string) *Store {
		s, err := OpenDSN(dsn, WithStateKey(testKey), WithInstance(inst))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	stores := []*Store{open("a"), open("b"), open("c")}
	const ttl = 400 * time.Millisecond
	var mu sync.Mutex
	holders := map[string]bool{}
	var wg sync.WaitGroup
	for _, s := range stores {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, held, err := s.AcquireLease(ctx, "proxy-dhcp", ttl)
			if err != nil {
				t.Error(err)
				return
			}
			if held != (l.Holder == s.Instance()) {
				t.Errorf("%s: held %v but holder %q", s.Instance(), held, l.Holder)
			}
			if held {
				mu.Lock()
				holders[s.Instance()] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(holders) != 1 {
		t.Fatalf("holders after a concurrent acquire: %v, want exactly one", holders)
	}
	var first *Store
	for _, s := range stores {
		if holders[s.Instance()] {
			first = s
		}
	}
	if _, held, _ := first.AcquireLease(ctx, "proxy-dhcp", ttl); !held {
		t.Fatal("the holder could not renew its lease")
	}
	// The holder dies (stops renewing): another takes it once it expired.
	time.Sleep(ttl + 100*time.Millisecond)
	var second *Store
	for _, s := range stores {
		if s == first {
			continue
		}
		if _, held, err := s.AcquireLease(ctx, "proxy-dhcp", ttl); err != nil {
			t.Fatal(err)
		} else if held && second == nil {
			second = s
		} else if held {
			t.Fatalf("%s and %s both hold the lease", second.Instance(), s.Instance())
		}
	}
	if second == nil {
		t.Fatal("nobody took the expired lease")
	}
	if l, err := first.Lease(ctx, "proxy-dhcp"); err != nil || l.Holder != second.Instance() {
		t.Fatalf("lease %+v %v, want held by %s", l, err, second.Instance())
	}
	if err := second.ReleaseLease(ctx, "proxy-dhcp"); err != nil {
		t.Fatal(err)
	}
	if _, held, _ := first.AcquireLease(ctx, "proxy-dhcp", ttl); !held {
		t.Fatal("a released lease was not taken at once")
	}

	for i, s := range stores {
		if err := s.Heartbeat(ctx, "http://10.0.0."+string(rune('1'+i))+":8080", int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	got, err := stores[0].Instances(ctx, time.Minute)
	if err != nil || len(got) != 3 || got[1].ID != "b" || got[1].ArtifactURL != "http://10.0.0.2:8080" || got[2].ManifestVersion != 2 {
		t.Fatalf("instances %+v %v", got, err)
	}
}

// On SQLite (one instance) the instance always holds every named lease.
func TestNamedLeaseSQLiteAlwaysHeld(t *testing.T) {
	s, _ := openTest(t, WithInstance("solo"))
	if l, held, err := s.AcquireLease(ctxT(t), "proxy-dhcp", time.Second); err != nil || !held || l.Holder != "solo" {
		t.Fatalf("lease %+v held %v err %v", l, held, err)
	}
}

// Bundles get increasing versions; the same files again are not stored
// twice; the newest is read back whole; a row whose content no longer
// matches its digest is refused.
func TestManifestBundles(t *testing.T) {
	s, _ := openTest(t, WithInstance("a"))
	ctx := ctxT(t)
	if _, ok, err := s.NewestManifestBundle(ctx, 0); ok || err != nil {
		t.Fatalf("empty store: ok %v err %v", ok, err)
	}
	v1, err := s.PutManifestBundle(ctx, map[string][]byte{"a.yaml": []byte("x: 1\n")}, "op")
	if err != nil {
		t.Fatal(err)
	}
	if again, err := s.PutManifestBundle(ctx, map[string][]byte{"a.yaml": []byte("x: 1\n")}, "op"); err != nil || again != v1 {
		t.Fatalf("same bundle again: version %d (%v), want %d", again, err, v1)
	}
	v2, err := s.PutManifestBundle(ctx, map[string][]byte{"a.yaml": []byte("x: 2\n"), "suites/s.yaml": []byte("y\n")}, "op")
	if err != nil || v2 <= v1 {
		t.Fatalf("second bundle: %d %v", v2, err)
	}
	b, ok, err := s.NewestManifestBundle(ctx, v1)
	if err != nil || !ok || b.Version != v2 || string(b.Files["suites/s.yaml"]) != "y\n" || b.PushedBy != "op" {
		t.Fatalf("newest after %d: %+v %v %v", v1, b, ok, err)
	}
	if _, ok, _ := s.NewestManifestBundle(ctx, v2); ok {
		t.Fatal("a bundle newer than the newest")
	}
	if _, err := s.w.ExecContext(ctx, s.dialect.rebind(`UPDATE manifest_bundles SET sha256 = 'x' WHERE version = ?`), v2); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.NewestManifestBundle(ctx, 0); err == nil {
		t.Fatal("an altered bundle was read back")
	}
}

func TestManifestBundlesOnPostgres(t *testing.T) {
	pgtest.Shared(t)
	backend = "postgres"
	defer func() { backend = "sqlite" }()
	TestManifestBundles(t)
}
