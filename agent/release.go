package agent

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/onepool/onepool/keys"
)

// ReleaseConfig is what the release epilog knows: the job that ended (from
// slurmd's epilog environment) and where onepool's scheduler answers.
type ReleaseConfig struct {
	JobID   string // SLURM_JOB_ID
	Comment string // SLURM_JOB_COMMENT
	// URL is the scheduler's release endpoint, http://host:port.
	URL string
	// Timeout bounds the whole wait; Every paces the questions.
	Timeout, Every time.Duration
	// Client asks (nil: one with a 2 s deadline per question).
	Client *http.Client
	Logf   func(format string, args ...any)
}

// ReleaseOutcome says why the wait ended.
type ReleaseOutcome string

const (
	ReleaseNotOnepool ReleaseOutcome = "not a onepool job"
	ReleaseGone       ReleaseOutcome = "the pod is gone"
	ReleaseUnknown    ReleaseOutcome = "onepool does not know the job"
	ReleaseTimedOut   ReleaseOutcome = "timed out"
)

// WaitForRelease holds a onepool placeholder's node in COMPLETING until
// onepool's scheduler says the job's pods are gone, so Slurm gives the GPUs
// to no other job while a pod still runs on them. An allocation onepool got
// at once has no batch script to do this (the batch placeholder's script
// does the same on SIGTERM); slurmd runs this as its Epilog. Other jobs
// return at once. It asks every Every: 200 ends the wait, 404 too (the
// scheduler, once it has read Slurm's jobs, knows every job whose pods
// live), anything else (409 a pod is still there, 503 a standby replica or
// a scheduler still reading Slurm, no answer) asks again, until Timeout.
func WaitForRelease(ctx context.Context, c ReleaseConfig) (ReleaseOutcome, error) {
	if !strings.HasPrefix(c.Comment, keys.PlaceholderCommentPrefix) {
		return ReleaseNotOnepool, nil
	}
	id, err := strconv.ParseUint(c.JobID, 10, 32)
	if err != nil || id == 0 {
		return "", fmt.Errorf("job id %q: not a Slurm job id", c.JobID)
	}
	u, err := url.Parse(c.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("release URL %q: want http://host:port", c.URL)
	}
	u = u.JoinPath(keys.ReleasePath, strconv.FormatUint(id, 10))
	client := c.Client
	if client == nil {
		// A new connection per question: behind a Service the scheduler's
		// replicas share the address, and a kept-alive connection would
		// stay with a standby that answers 503 forever. No proxy from the
		// environment either: the endpoint is inside the cluster.
		client = &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil}}
	}
	logf := c.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	last := ""
	for {
		code, err := ask(ctx, client, u.String())
		switch {
		case err == nil && code == http.StatusOK:
			return ReleaseGone, nil
		case err == nil && code == http.StatusNotFound:
			return ReleaseUnknown, nil
		}
		now := fmt.Sprint(code)
		if err != nil {
			now = err.Error()
		}
		if now != last {
			logf("job %d: %s: %s; asking again", id, u.Redacted(), now)
			last = now
		}
		select {
		case <-ctx.Done():
			return ReleaseTimedOut, nil
		case <-time.After(c.Every):
		}
	}
}

func ask(ctx context.Context, c *http.Client, u string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
	return resp.StatusCode, nil
}
