package e2e

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"
)

// proxyMode is how the soak's proxy in front of slurmrestd answers.
type proxyMode int32

const (
	proxyPass      proxyMode = iota // forward
	proxySlow                       // forward after 3 s
	proxyFail                       // 503, a body that is not slurmrestd's
	proxyErrors                     // HTTP 200 with an errors array and nothing else
	proxyCut                        // forward, then cut the body half way
	proxyReadsFail                  // 503 to every GET, writes forwarded
	proxyModeLast                   // number of modes
)

func (m proxyMode) String() string {
	return [...]string{"pass", "slow", "5xx", "200-with-errors", "cut-mid-body", "reads-fail"}[m]
}

// faultProxy stands between onepool's components and slurmrestd and, on
// demand, answers as a sick slurmrestd would. Test code: the components
// must survive it without losing anything.
type faultProxy struct {
	target string // slurmrestd's base URL
	mode   atomic.Int32
	faults atomic.Int64 // answers it spoiled
	srv    *http.Server
	ln     net.Listener
	client *http.Client
}

func startFaultProxy(target string) (*faultProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &faultProxy{target: target, ln: ln, client: &http.Client{Timeout: 60 * time.Second}}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	go p.srv.Serve(ln) //nolint:errcheck // ends with Close
	return p, nil
}

func (p *faultProxy) URL() string        { return "http://" + p.ln.Addr().String() }
func (p *faultProxy) set(m proxyMode)    { p.mode.Store(int32(m)) }
func (p *faultProxy) current() proxyMode { return proxyMode(p.mode.Load()) }
func (p *faultProxy) Close() error       { return p.srv.Close() }
func (p *faultProxy) spoiled() int64     { return p.faults.Load() }
func (p *faultProxy) count(m proxyMode) bool {
	if m != proxyPass {
		p.faults.Add(1)
	}
	return true
}

func (p *faultProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	mode := p.current()
	p.count(mode)
	switch {
	case mode == proxyReadsFail && r.Method == http.MethodGet:
		http.Error(w, "soak: reads fail", http.StatusServiceUnavailable)
		return
	case mode == proxyFail:
		http.Error(w, "upstream connect error or disconnect/reset before headers", http.StatusServiceUnavailable)
		return
	case mode == proxyErrors:
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"errors":[{"description":"soak: injected failure","error_number":9999,"error":"Unspecified error","source":"soak"}],"warnings":[],"meta":{}}`)
		return
	case mode == proxySlow:
		select {
		case <-time.After(3 * time.Second):
		case <-r.Context().Done():
			return
		}
	}
	in, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	// A known length: slurmrestd takes no chunked request bodies.
	req, err := http.NewRequestWithContext(r.Context(), r.Method, p.target+r.URL.RequestURI(), bytes.NewReader(in))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	req.Header = r.Header.Clone()
	resp, err := p.client.Do(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	for k, vs := range resp.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(resp.StatusCode)
	if mode == proxyCut && len(body) > 1 {
		_, _ = io.Copy(w, bytes.NewReader(body[:len(body)/2]))
		// The client saw a Content-Length it will not get: the
		// connection is cut under it.
		panic(http.ErrAbortHandler)
	}
	_, _ = w.Write(body)
}
