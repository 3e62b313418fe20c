package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"

	"github.com/go-logr/logr"

	"github.com/onepool/onepool/nodeset/api/v1alpha1"
)

// apiResources are the resources of onepool's API this manager needs
// served: NodeSets, and TenantPolicies (new in this release: a chart
// upgrade does not install them, see the README).
var apiResources = []string{"nodesets", "tenantpolicies"}

// errNodeSetAPI: the cluster does not serve the NodeSet API this manager
// speaks (the CRD is missing or of another version).
var errNodeSetAPI = errors.New("the NodeSet API is not served")

// nodeSetServed decides from a discovery answer for onepool.dev/v1alpha1
// whether NodeSets are served. A NotFound is "not served"; any other error
// is returned as it is (unknown: the caller must not decide on it).
func nodeSetServed(list *metav1.APIResourceList, err error) (bool, error) {
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	for _, want := range apiResources {
		if !slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == want }) {
			return false, nil
		}
	}
	return true, nil
}

// nodeSetAPIMessage says what is wrong and what to do.
func nodeSetAPIMessage() string {
	return fmt.Sprintf("%v: %s/%s %s are not all served by the API server (a CRD is missing, or of another version); "+
		"the NodeSet controller and the TenantPolicy status are off, and the syncer acts on no slurmd pod (none can be proven a NodeSet's). Install this release's CRDs (charts/onepool/crds) and the pod restarts itself",
		errNodeSetAPI, v1alpha1.GroupVersion.Group, v1alpha1.GroupVersion.Version, strings.Join(apiResources, ", "))
}

// probeNodeSetAPI asks discovery, with a deadline, whether NodeSets are
// served; it retries an unknown answer for up to a minute.
func probeNodeSetAPI(ctx context.Context, d discovery.DiscoveryInterface) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		served, err := nodeSetServed(d.ServerResourcesForGroupVersion(v1alpha1.GroupVersion.String()))
		if err == nil {
			return served, nil
		}
		select {
		case <-ctx.Done():
			return false, fmt.Errorf("asking the API server whether NodeSets are served: %w", err)
		case <-time.After(2 * time.Second):
		}
	}
}

// crdWatch backs the probes of a manager that started without the NodeSet
// API: readiness fails with the message; liveness fails once the API is
// served, so that the kubelet restarts the pod and the NodeSet controller
// starts. Discovery is asked at most every 30 s.
type crdWatch struct {
	d   discovery.DiscoveryInterface
	log logr.Logger

	mu     sync.Mutex
	at     time.Time
	served bool
}

func (w *crdWatch) servedNow() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if time.Since(w.at) < 30*time.Second {
		return w.served
	}
	served, err := nodeSetServed(w.d.ServerResourcesForGroupVersion(v1alpha1.GroupVersion.String()))
	w.at = time.Now()
	if err == nil {
		if served && !w.served {
			// The probe's reason is withheld from its HTTP answer: say it here.
			w.log.Info("the NodeSet API is served now: liveness fails so that the pod restarts with the NodeSet controller")
		}
		w.served = served
	}
	return w.served
}

func (w *crdWatch) readyz(*http.Request) error { return errors.New(nodeSetAPIMessage()) }

func (w *crdWatch) healthz(*http.Request) error {
	if w.servedNow() {
		return errors.New("the NodeSet API is served now: restart to start the NodeSet controller")
	}
	return nil
}
