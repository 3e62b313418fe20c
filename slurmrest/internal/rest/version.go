package rest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"

	"github.com/onepool/onepool/slurmrest/model"
)

// Negotiate returns the API version the backend speaks. Unless one was
// forced, the first call asks slurmrestd, newest version first, which it
// serves (GET /slurm/<version>/ping/: 404 means not served) and keeps the
// answer. When slurmrestd serves none onepool speaks, the error
// (ErrUnsupportedVersion) names what it offers (from /openapi/v3) and what
// onepool speaks; nothing is asked of Slurm beyond that.
func (b *Backend) Negotiate(ctx context.Context) (string, error) {
	if v := b.Version(); v != "" {
		return v, nil
	}
	for _, v := range Versions {
		served, err := b.serves(ctx, v)
		if err != nil {
			return "", err
		}
		if served {
			b.mu.Lock()
			if b.version == "" {
				b.version = v
			}
			v = b.version
			b.mu.Unlock()
			return v, nil
		}
	}
	offered, err := b.offered(ctx)
	if err != nil {
		offered = []string{"unknown (" + err.Error() + ")"}
	}
	return "", &model.APIError{Op: "negotiate the REST API version", Endpoint: "GET /slurm/{version}/ping/", Kind: model.ErrUnsupportedVersion,
		Err: fmt.Errorf("slurmrestd offers %s; onepool speaks %s", strings.Join(offered, ", "), strings.Join(Versions, ", "))}
}

// serves says whether slurmrestd has the version's endpoints.
func (b *Backend) serves(ctx context.Context, version string) (bool, error) {
	ep := "GET /slurm/" + version + pathPing
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.server+"/slurm/"+version+pathPing, nil)
	if err != nil {
		return false, &model.APIError{Op: "negotiate the REST API version", Endpoint: ep, Kind: model.ErrUnreachable, Err: err}
	}
	resp, err := b.hc.Do(req)
	if err != nil {
		return false, &model.APIError{Op: "negotiate the REST API version", Endpoint: ep, Kind: model.ErrUnreachable, Err: err}
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return false, nil
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == 511:
		// Which versions exist is asked with the token: without a valid
		// one nothing can be told.
		return false, &model.APIError{Op: "negotiate the REST API version", Endpoint: ep, StatusCode: resp.StatusCode, Kind: model.ErrUnauthenticated}
	case resp.StatusCode >= 500 && resp.StatusCode != http.StatusInternalServerError:
		return false, &model.APIError{Op: "negotiate the REST API version", Endpoint: ep, StatusCode: resp.StatusCode, Kind: model.ErrUnreachable}
	}
	// An answer of the version's own (2xx, or slurmctld down behind it)
	// names its data parser. Anything else (a proxy's page, an answer
	// with only an errors array) says nothing of which versions are
	// served: no version is kept from it, and the next call asks again.
	if dp := dataParser(body); dp != "data_parser/"+version {
		return false, &model.APIError{Op: "negotiate the REST API version", Endpoint: ep, StatusCode: resp.StatusCode, Kind: model.ErrBadResponse,
			Err: fmt.Errorf("the answer is not slurmrestd's for %s (data parser %q)", version, dp)}
	}
	return true, nil
}

// dataParser is the data parser an answer of slurmrestd names in its meta
// ("data_parser/v0.0.42"); "" for a body that is not such an answer.
func dataParser(body []byte) string {
	var answer struct {
		Meta struct {
			Plugin struct {
				DataParser string `json:"data_parser"`
			} `json:"plugin"`
		} `json:"meta"`
	}
	if json.Unmarshal(body, &answer) != nil {
		return ""
	}
	return answer.Meta.Plugin.DataParser
}

// forget drops a negotiated version slurmrestd no longer serves (it was
// upgraded under onepool): the next call negotiates again. A forced
// version stays.
func (b *Backend) forget(version string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.forced && b.version == version {
		b.version = ""
	}
}

var versionPath = regexp.MustCompile(`^/slurm/(v[0-9]+\.[0-9]+\.[0-9]+)/`)

// offered lists the slurmctld API versions slurmrestd's OpenAPI document
// has paths for.
func (b *Backend) offered(ctx context.Context) ([]string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.server+"/openapi/v3", nil)
	if err != nil {
		return nil, err
	}
	resp, err := b.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /openapi/v3: HTTP %d", resp.StatusCode)
	}
	var doc struct {
		Paths map[string]json.RawMessage `json:"paths"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxBody)).Decode(&doc); err != nil {
		return nil, fmt.Errorf("GET /openapi/v3: %w", err)
	}
	var out []string
	for p := range doc.Paths {
		if m := versionPath.FindStringSubmatch(p); m != nil && !slices.Contains(out, m[1]) {
			out = append(out, m[1])
		}
	}
	slices.Sort(out)
	if len(out) == 0 {
		return []string{"none"}, nil
	}
	return out, nil
}
