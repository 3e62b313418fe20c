package accounting

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onepool/onepool/slurmrest"
)

// session replays slurmdbd's answers recorded while ensure-accounting set
// up the chart's defaults on a fresh slurmdbd (slurmrest's testdata,
// db_*.json): each route answers its files in turn, the last one again.
type session struct {
	t       *testing.T
	version string
	routes  map[string][]string
	mu      sync.Mutex
	asked   []string // "METHOD /path?query"
	posts   []map[string]any
}

func (s *session) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := r.Method + " " + strings.Replace(r.URL.Path, "/slurmdb/"+s.version, "/slurmdb", 1)
	if r.URL.RawQuery != "" {
		key += "?" + r.URL.RawQuery
	}
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	s.asked = append(s.asked, key)
	if r.Method == http.MethodPost {
		var m map[string]any
		if err := json.Unmarshal(body, &m); err != nil {
			s.t.Errorf("%s: body %s: %v", key, body, err)
		}
		s.posts = append(s.posts, m)
	}
	files := s.routes[key]
	if len(files) == 0 {
		s.mu.Unlock()
		s.t.Errorf("unexpected request %s", key)
		http.Error(w, "no recording", http.StatusTeapot)
		return
	}
	file := files[0]
	if len(files) > 1 {
		s.routes[key] = files[1:]
	}
	s.mu.Unlock()
	parts := strings.Split(file, ".")
	status, _ := strconv.Atoi(parts[len(parts)-2])
	data, err := os.ReadFile(filepath.Join("..", "slurmrest", "internal", "rest", "testdata", s.version, file))
	if err != nil && status != http.StatusNotModified {
		s.t.Fatal(err)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(data)
}

func replayClient(t *testing.T, s *session) *slurmrest.Client {
	t.Helper()
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	token := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(token, []byte("a-token\n"), 0o600))
	c, err := slurmrest.New(slurmrest.Config{URL: srv.URL, TokenFile: token, APIVersion: s.version, Timeout: 5 * time.Second})
	require.NoError(t, err)
	return c
}

// The chart's defaults on a fresh slurmdbd, as recorded on 24.11 and
// 26.05: the requests ensure-accounting made there, in order, and the
// second run that changes nothing.
func TestEnsureOnRecordedSlurmdbd(t *testing.T) {
	for _, v := range slurmrest.APIVersions {
		t.Run(v, func(t *testing.T) {
			s := &session{t: t, version: v, routes: map[string][]string{
				"GET /slurmdb/clusters/":                     {"db_clusters_none.200.json", "db_clusters.200.json"},
				"GET /slurmdb/qos/":                          {"db_qos_fresh.200.json", "db_qos.200.json"},
				"GET /slurmdb/associations/?cluster=onepool": {"db_associations_fresh.200.json", "db_associations.200.json"},
				"GET /slurmdb/qos/low":                       {"db_qos_low_none.200.json"},
				"GET /slurmdb/qos/high":                      {"db_qos_none.200.json", "db_qos_high_new.200.json"},
				"GET /slurmdb/qos/normal":                    {"db_qos_normal.200.json"},
				"POST /slurmdb/qos/":                         {"db_qos_post.200.json"},
				"POST /slurmdb/accounts_association/":        {"db_accounts_association.200.json"},
				"POST /slurmdb/users_association/":           {"db_users_association.200.json"},
			}}
			c := replayClient(t, s)
			done, err := Ensure(context.Background(), c, chartDefaults(), Options{Poll: time.Millisecond})
			require.NoError(t, err)
			assert.Len(t, done, 8)
			assert.Equal(t, []string{
				"GET /slurmdb/clusters/", "GET /slurmdb/clusters/",
				"GET /slurmdb/qos/", "GET /slurmdb/associations/?cluster=onepool",
				"GET /slurmdb/qos/low", "POST /slurmdb/qos/",
				"GET /slurmdb/qos/high", "POST /slurmdb/qos/",
				"GET /slurmdb/qos/normal", "POST /slurmdb/qos/",
				"GET /slurmdb/qos/high", "POST /slurmdb/qos/",
				"POST /slurmdb/accounts_association/", "POST /slurmdb/accounts_association/",
				"POST /slurmdb/users_association/", "POST /slurmdb/users_association/",
				"GET /slurmdb/qos/", "GET /slurmdb/associations/?cluster=onepool",
			}, s.asked)
			// high's preempt list: high as made (mode CANCEL) sent back with it.
			high := s.posts[3]["qos"].([]any)[0].(map[string]any)
			assert.Equal(t, "high", high["name"])
			assert.Equal(t, map[string]any{"list": []any{"low", "normal"}, "mode": []any{"CANCEL"},
				"exempt_time": map[string]any{"set": false, "infinite": true, "number": 0.0}}, high["preempt"])
			assert.Equal(t, map[string]any{"set": true, "infinite": false, "number": 1000.0}, high["priority"])

			s.asked, s.posts = nil, nil
			done, err = Ensure(context.Background(), c, chartDefaults(), Options{})
			require.NoError(t, err)
			assert.Empty(t, done)
			assert.Equal(t, []string{"GET /slurmdb/clusters/", "GET /slurmdb/qos/", "GET /slurmdb/associations/?cluster=onepool"}, s.asked,
				"in sync: three reads, no write")
		})
	}
}
