package phonehome

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestPostRetriesThenSucceeds(t *testing.T) {
	var calls atomic.Int32
	var gotAuth, gotForm, gotPath string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) < 3 {
			http.Error(w, "not yet", http.StatusServiceUnavailable)
			return
		}
		gotAuth = r.Header.Get("Authorization")
		gotPath = r.URL.Path + "?" + r.URL.RawQuery
		r.ParseForm()
		gotForm = r.PostForm.Encode()
	}))
	defer srv.Close()
	var logs strings.Builder
	log := slog.New(slog.NewTextHandler(&logs, nil))
	err := Post(context.Background(), srv.URL+"/hostready/n1?token=tok123",
		Report{InstanceID: "n1", Hostname: "gpu1", BootID: "b-1", Uptime: 1500 * time.Millisecond},
		Options{Tries: 5, MinBackoff: time.Millisecond}, log)
	if err != nil {
		t.Fatal(err)
	}
	if calls.Load() != 3 {
		t.Errorf("calls = %d, want 3", calls.Load())
	}
	if gotAuth != "Bearer tok123" {
		t.Errorf("Authorization = %q", gotAuth)
	}
	if gotPath != "/hostready/n1?token=tok123" {
		t.Errorf("path = %q", gotPath)
	}
	if want := "boot_id=b-1&fqdn=gpu1&hostname=gpu1&instance_id=n1&uptime_ms=1500"; gotForm != want {
		t.Errorf("form = %q, want %q", gotForm, want)
	}
	if strings.Contains(logs.String(), "tok123") {
		t.Errorf("token leaked into logs: %s", logs.String())
	}
}

func TestPostGivesUp(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "bad token", http.StatusUnauthorized)
	}))
	defer srv.Close()
	err := Post(context.Background(), srv.URL+"/x", Report{InstanceID: "n1"},
		Options{Tries: 2, MinBackoff: time.Millisecond}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err == nil || !strings.Contains(err.Error(), "gave up after 2 tries") || !strings.Contains(err.Error(), "401") {
		t.Fatalf("err = %v", err)
	}
}

func TestPostHonoursContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := Post(ctx, "http://127.0.0.1:1/x", Report{}, Options{Tries: 3, MinBackoff: time.Hour},
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err == nil || !strings.Contains(err.Error(), "context canceled") {
		t.Fatalf("err = %v", err)
	}
}
