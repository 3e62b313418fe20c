package agent

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// The XID state file is how the long-running agent tells the short-lived
// health check what NVML reported: NVML delivers XID events only to a
// process that was listening when they happened. One line per event:
//
//	2026-11-20T10:04:05Z gpu=3 uuid=GPU-8f6c... xid=79
//
// run empties it when it starts slurmd, so it holds the XIDs since the last
// slurmd start. gpu=-1 when NVML could not say which GPU.
const xidFileName = "xid"

// XIDRecord is one line of the state file.
type XIDRecord struct {
	Time time.Time
	GPU  int
	UUID string
	XID  uint64
}

func (r XIDRecord) line() string {
	uuid := r.UUID
	if uuid == "" {
		uuid = "-"
	}
	return fmt.Sprintf("%s gpu=%d uuid=%s xid=%d\n", r.Time.UTC().Format(time.RFC3339), r.GPU, uuid, r.XID)
}

// ResetXIDState creates the state dir and empties the XID file.
func ResetXIDState(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("XID state: %w", err)
	}
	return WriteFileAtomic(filepath.Join(dir, xidFileName), nil, 0o644)
}

// AppendXID adds one record. O_APPEND writes of one short line are atomic,
// so a health check reading at the same time sees whole lines.
func AppendXID(dir string, r XIDRecord) error {
	f, err := os.OpenFile(filepath.Join(dir, xidFileName), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("XID state: %w", err)
	}
	if _, err := f.WriteString(r.line()); err != nil {
		f.Close()
		return fmt.Errorf("XID state: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("XID state: %w", err)
	}
	return nil
}

// ReadXIDs returns the recorded XIDs; none when the file does not exist
// (the agent never ran, or the state dir is fresh after a reboot).
func ReadXIDs(dir string) ([]XIDRecord, error) {
	f, err := os.Open(filepath.Join(dir, xidFileName))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("XID state: %w", err)
	}
	defer f.Close()
	var out []XIDRecord
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		r, err := parseXIDLine(line)
		if err != nil {
			return out, fmt.Errorf("XID state %s line %d: %w", f.Name(), n, err)
		}
		out = append(out, r)
	}
	if err := sc.Err(); err != nil {
		return out, fmt.Errorf("XID state: %w", err)
	}
	return out, nil
}

func parseXIDLine(line string) (XIDRecord, error) {
	fields := strings.Fields(line)
	if len(fields) != 4 {
		return XIDRecord{}, fmt.Errorf("want 4 fields, got %q", line)
	}
	var r XIDRecord
	var err error
	if r.Time, err = time.Parse(time.RFC3339, fields[0]); err != nil {
		return r, err
	}
	vals := map[string]string{}
	for _, f := range fields[1:] {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			return r, fmt.Errorf("want key=value, got %q", f)
		}
		vals[k] = v
	}
	if r.GPU, err = strconv.Atoi(vals["gpu"]); err != nil {
		return r, fmt.Errorf("gpu: %w", err)
	}
	if r.XID, err = strconv.ParseUint(vals["xid"], 10, 64); err != nil {
		return r, fmt.Errorf("xid: %w", err)
	}
	if r.UUID = vals["uuid"]; r.UUID == "-" {
		r.UUID = ""
	}
	return r, nil
}

// xidPoll is how long one EventSet.Wait blocks; it bounds how long the
// watcher takes to stop after its context ends.
const xidPoll = time.Second

// watchXIDs records every critical XID of the devices until ctx ends. It
// returns once the event set is freed, so NVML can be shut down after it.
func watchXIDs(ctx context.Context, lib Library, devs []Device, gpus []GPU, stateDir string, logger *log.Logger) {
	set, err := lib.NewXIDEventSet(devs, func(d Device, err error) {
		logger.Printf("XID watch: skipping a GPU: %v", err)
	})
	if err != nil {
		logger.Printf("XID watch off: %v", err)
		return
	}
	defer func() {
		if err := set.Free(); err != nil {
			logger.Printf("XID watch: %v", err)
		}
	}()
	byUUID := map[string]int{}
	for _, g := range gpus {
		byUUID[g.UUID] = g.Index
		if g.MIG != nil { // NVML names the partitioned GPU
			byUUID[g.MIG.ParentUUID] = g.Index
		}
	}
	logger.Printf("XID watch on for %d GPUs, recording to %s", len(devs), filepath.Join(stateDir, xidFileName))
	for ctx.Err() == nil {
		ev, err := set.Wait(xidPoll)
		if errors.Is(err, ErrTimeout) {
			continue
		}
		if err != nil {
			// A lost GPU makes Wait fail at once; don't spin on it.
			logger.Printf("XID watch: %v", err)
			select {
			case <-ctx.Done():
			case <-time.After(5 * time.Second):
			}
			continue
		}
		idx, ok := byUUID[ev.UUID]
		if !ok || ev.UUID == "" {
			idx = -1
		}
		rec := XIDRecord{Time: time.Now(), GPU: idx, UUID: ev.UUID, XID: ev.XID}
		logger.Printf("XID %d on GPU %d (%s)", ev.XID, idx, ev.UUID)
		if err := AppendXID(stateDir, rec); err != nil {
			logger.Printf("XID watch: %v", err)
		}
	}
}
