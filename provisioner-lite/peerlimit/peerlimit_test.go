package peerlimit

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time      { return c.t }
func (c *clock) add(d time.Duration) { c.t = c.t.Add(d) }
func newClock() *clock               { return &clock{t: time.Unix(1_700_000_000, 0)} }

func TestBucketRefusesThenRefills(t *testing.T) {
	c := newClock()
	b := newBucket(10, 3, c.now)
	for i := 0; i < 3; i++ {
		if !b.Allow() {
			t.Fatalf("token %d of the burst refused", i)
		}
	}
	if b.Allow() {
		t.Fatal("a fourth token within the same instant was allowed past a burst of 3")
	}
	c.add(100 * time.Millisecond) // 10/s: one token back
	if !b.Allow() || b.Allow() {
		t.Fatal("after 100 ms at 10/s exactly one token should be back")
	}
}

func TestKeyedSeparatesSources(t *testing.T) {
	c := newClock()
	k := newKeyed(1, 2, 100, c.now)
	for i := 0; i < 2; i++ {
		if !k.Allow("a") {
			t.Fatal("a's burst refused")
		}
	}
	if k.Allow("a") {
		t.Fatal("a went past its burst")
	}
	if !k.Allow("b") {
		t.Fatal("b was charged for a's requests")
	}
}

// A flood of distinct sources fills the map; sources that are still
// spending keep their state, idle ones are forgotten, and the map never
// grows past its bound.
func TestKeyedBoundedUnderSpoofedSources(t *testing.T) {
	c := newClock()
	k := newKeyed(1, 1, 8, c.now)
	if !k.Allow("known") {
		t.Fatal("first request refused")
	}
	for i := 0; i < 1000; i++ {
		k.Allow(fmt.Sprintf("spoof-%d", i))
	}
	if n := k.Len(); n > 8 {
		t.Fatalf("%d keys held, bound is 8", n)
	}
	if k.Allow("known") {
		t.Fatal("known's empty bucket was forgotten and refilled by the flood")
	}
	c.add(2 * time.Second) // every bucket is full again: room for new keys
	if !k.Allow("new") {
		t.Fatal("a new source was refused after the flood's buckets refilled")
	}
}

func TestRefusalsSummarise(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	c := newClock()
	r := NewRefusals(log, "tftp", slog.LevelInfo, 10*time.Second)
	r.now = c.now
	for i := 0; i < 5000; i++ {
		r.Note("unknown-name", fmt.Sprintf("10.0.%d.%d", i%7, i%3))
	}
	if n := strings.Count(buf.String(), "\n"); n != 1 {
		t.Fatalf("5000 refusals within one interval wrote %d lines, want 1 (the first):\n%s", n, buf.String())
	}
	c.add(11 * time.Second)
	r.Note("unknown-name", "10.0.0.0")
	out := buf.String()
	if n := strings.Count(out, "\n"); n != 2 {
		t.Fatalf("after the interval: %d lines, want 2:\n%s", n, out)
	}
	last := out[strings.LastIndex(strings.TrimSuffix(out, "\n"), "\n")+1:]
	for _, want := range []string{"refused=5000", "sources=21", "listener=tftp", "reason=unknown-name"} {
		if !strings.Contains(last, want) {
			t.Errorf("summary %q lacks %q", last, want)
		}
	}
	r.Note("unknown-name", "10.0.0.1")
	r.Flush()
	if !strings.Contains(buf.String()[len(out):], "refused=1") {
		t.Errorf("Flush did not report the pending refusal:\n%s", buf.String()[len(out):])
	}
}
