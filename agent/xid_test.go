package agent

import (
	"context"
	"io"
	"log"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestXIDStateFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state") // ResetXIDState creates it
	if recs, err := ReadXIDs(dir); err != nil || recs != nil {
		t.Fatalf("ReadXIDs of a missing dir = %v, %v; want none", recs, err)
	}
	if err := ResetXIDState(dir); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 20, 10, 4, 5, 0, time.UTC)
	want := []XIDRecord{
		{Time: now, GPU: 3, UUID: "GPU-8f6c", XID: 79},
		{Time: now.Add(time.Second), GPU: -1, XID: 48},
	}
	for _, r := range want {
		if err := AppendXID(dir, r); err != nil {
			t.Fatal(err)
		}
	}
	raw, _ := os.ReadFile(filepath.Join(dir, "xid"))
	if string(raw) != "2026-11-20T10:04:05Z gpu=3 uuid=GPU-8f6c xid=79\n2026-11-20T10:04:06Z gpu=-1 uuid=- xid=48\n" {
		t.Errorf("file = %q", raw)
	}
	got, err := ReadXIDs(dir)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("ReadXIDs = %+v, %v; want %+v", got, err, want)
	}
	if err := ResetXIDState(dir); err != nil {
		t.Fatal(err)
	}
	if got, err := ReadXIDs(dir); err != nil || len(got) != 0 {
		t.Errorf("after reset: %+v, %v", got, err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "xid")); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("xid file mode: %v %v", fi.Mode(), err)
	}

	require.NoError(t, os.WriteFile(filepath.Join(dir, "xid"), []byte("2026-11-20T10:04:05Z gpu=3 uuid=x xid=79\ngarbage\n"), 0o644))
	got, err = ReadXIDs(dir)
	if err == nil || !strings.Contains(err.Error(), "line 2") || len(got) != 1 {
		t.Errorf("bad line: %+v, %v", got, err)
	}
}

func TestWatchXIDs(t *testing.T) {
	dir := t.TempDir()
	lib := &fakeLib{devs: h100s(4), events: make(chan XIDEvent, 2)}
	gpus, devs, err := discover(context.Background(), lib)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		watchXIDs(ctx, lib, devs, gpus, dir, log.New(io.Discard, "", 0))
		close(done)
	}()
	lib.events <- XIDEvent{UUID: "GPU-00000002", XID: 79}
	lib.events <- XIDEvent{UUID: "", XID: 13}
	var recs []XIDRecord
	for deadline := time.Now().Add(5 * time.Second); len(recs) < 2 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		recs, _ = ReadXIDs(dir)
	}
	if len(recs) != 2 || recs[0].GPU != 2 || recs[0].XID != 79 || recs[1].GPU != -1 || recs[1].XID != 13 {
		t.Errorf("records = %+v", recs)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("watcher did not stop when its context ended")
	}
	if !lib.freed {
		t.Error("event set not freed")
	}
}

func TestWatchXIDsUnsupported(t *testing.T) {
	lib := &fakeLib{devs: h100s(1)} // no events channel: not supported
	done := make(chan struct{})
	go func() {
		watchXIDs(context.Background(), lib, nil, nil, t.TempDir(), log.New(io.Discard, "", 0))
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("watcher without events did not return")
	}
}
