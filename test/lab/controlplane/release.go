package controlplane

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// EnvKube picks the Kubernetes release of the lab's API server
// (`make up KUBE=1.36`).
const EnvKube = "ONEPOOL_LAB_KUBE"

// KubeRelease is one Kubernetes release whose API server the lab runs.
type KubeRelease struct {
	// Minor is "1.35" or "1.36".
	Minor string
	// APIServer is its kube-apiserver binary's name in BinDir.
	APIServer string
}

// KubeReleases are the API servers the lab runs: the release onepool is
// built from (the main module's k8s.io/kubernetes; every other Kubernetes
// binary of the lab is that release too) first, then the next one, built
// from its own tool module (test/tools/kube-1.36). The version skew
// policy lets kube-controller-manager, kube-scheduler (onepool's
// scheduler embeds it), the kubelet and kubectl of one release run
// against the API server of the next.
func KubeReleases() []KubeRelease {
	return []KubeRelease{{Minor: "1.35", APIServer: "kube-apiserver"}, {Minor: "1.36", APIServer: "kube-apiserver-1.36"}}
}

// KubeNamed is the release called name; "" is the first.
func KubeNamed(name string) (KubeRelease, error) {
	all := KubeReleases()
	if name == "" {
		return all[0], nil
	}
	var names []string
	for _, r := range all {
		if r.Minor == name {
			return r, nil
		}
		names = append(names, r.Minor)
	}
	return KubeRelease{}, fmt.Errorf("%s=%q: the lab runs Kubernetes %s", EnvKube, name, strings.Join(names, " or "))
}

// checkVersion fails unless the API server at url says it is release
// want (a binary built from another release would prove nothing).
func checkVersion(ctx context.Context, c *http.Client, url string, want KubeRelease) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/version", nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("kube-apiserver /version: %w", err)
	}
	defer resp.Body.Close()
	var v struct {
		GitVersion string `json:"gitVersion"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&v); err != nil {
		return fmt.Errorf("kube-apiserver /version: HTTP %d: %w", resp.StatusCode, err)
	}
	if !strings.HasPrefix(v.GitVersion, "v"+want.Minor+".") {
		return fmt.Errorf("kube-apiserver runs %q, the lab asks Kubernetes %s (%s=%s): rebuild it with `make tools KUBE=%s`",
			v.GitVersion, want.Minor, EnvKube, want.Minor, want.Minor)
	}
	return nil
}
