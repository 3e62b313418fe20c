package agent

import (
	"fmt"
	"sync"
	"time"
)

// fakeLib is a programmable Library for tests.
type fakeLib struct {
	initErr  error
	countErr error
	devs     []*fakeDev
	events   chan XIDEvent // nil: NewXIDEventSet fails with ErrNotSupported

	mu          sync.Mutex
	initialized bool
	shutdowns   int
	freed       bool
}

type fakeDev struct {
	index       int
	name, uuid  string
	minor       int
	memMiB      uint64
	handleErr   error
	ecc         uint64
	eccErr      error
	retired     bool
	retiredErr  error
	remapPend   bool
	remapFail   bool
	remapErr    error
	temp        uint32
	tempErr     error
	slowdown    uint32
	slowdownErr error
	hang        chan struct{} // TemperatureC blocks until closed
	migs        []MIGDevice   // nil: MIG off
	migErr      error
}

// h100s returns n healthy H100s, the way NVML reports them on a DGX: ECC on
// with no errors, no page retirement (Hopper remaps rows instead).
func h100s(n int) []*fakeDev {
	devs := make([]*fakeDev, n)
	for i := range devs {
		devs[i] = &fakeDev{
			index: i, name: "NVIDIA H100 80GB HBM3", uuid: fmt.Sprintf("GPU-%08d", i), minor: i, memMiB: 81559,
			retiredErr: fmt.Errorf("nvmlDeviceGetRetiredPagesPendingStatus: %w", ErrNotSupported),
			temp:       35, slowdown: 90,
		}
	}
	return devs
}

func (l *fakeLib) Init() error {
	if l.initErr != nil {
		return l.initErr
	}
	l.mu.Lock()
	l.initialized = true
	l.mu.Unlock()
	return nil
}

func (l *fakeLib) Shutdown() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.shutdowns++
	l.initialized = false
	return nil
}

func (l *fakeLib) DeviceCount() (int, error) { return len(l.devs), l.countErr }

func (l *fakeLib) Device(i int) (Device, error) {
	if i < 0 || i >= len(l.devs) {
		return nil, fmt.Errorf("no device %d", i)
	}
	if err := l.devs[i].handleErr; err != nil {
		return nil, err
	}
	return l.devs[i], nil
}

func (l *fakeLib) NewXIDEventSet(devs []Device, skipped func(Device, error)) (EventSet, error) {
	if l.events == nil {
		return nil, fmt.Errorf("fake: %w", ErrNotSupported)
	}
	return fakeEventSet{l}, nil
}

type fakeEventSet struct{ l *fakeLib }

func (s fakeEventSet) Wait(timeout time.Duration) (XIDEvent, error) {
	// Poll fast so tests do not wait out xidPoll when the watcher stops.
	select {
	case ev := <-s.l.events:
		return ev, nil
	case <-time.After(min(timeout, 10*time.Millisecond)):
		return XIDEvent{}, ErrTimeout
	}
}

func (s fakeEventSet) Free() error {
	s.l.mu.Lock()
	s.l.freed = true
	s.l.mu.Unlock()
	return nil
}

func (d *fakeDev) Index() (int, error)        { return d.index, nil }
func (d *fakeDev) Name() (string, error)      { return d.name, nil }
func (d *fakeDev) UUID() (string, error)      { return d.uuid, nil }
func (d *fakeDev) Minor() (int, error)        { return d.minor, nil }
func (d *fakeDev) MemoryMiB() (uint64, error) { return d.memMiB, nil }
func (d *fakeDev) UncorrectableECC() (uint64, error) {
	return d.ecc, d.eccErr
}
func (d *fakeDev) RetiredPagesPending() (bool, error) { return d.retired, d.retiredErr }
func (d *fakeDev) RowRemap() (bool, bool, error)      { return d.remapPend, d.remapFail, d.remapErr }
func (d *fakeDev) TemperatureC() (uint32, error) {
	if d.hang != nil {
		<-d.hang
	}
	return d.temp, d.tempErr
}
func (d *fakeDev) SlowdownTemperatureC() (uint32, error) { return d.slowdown, d.slowdownErr }

func (d *fakeDev) MIGDevices() ([]MIGDevice, error) { return d.migs, d.migErr }
