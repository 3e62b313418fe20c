package lab

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"path/filepath"
	"time"
)

// Ports of the lab's Kubernetes controllers (secure ports: healthz, metrics).
const (
	KubeControllerManagerPort = 26257
	KubeSchedulerPort         = 26258
)

// LabControllers are the kube-controller-manager controllers the lab runs:
// what a Deployment needs to become pods (deployment, replicaset), what a
// pod needs to get a ServiceAccount token (serviceaccount: the "default"
// account of each namespace; root-ca-cert-publisher: kube-root-ca.crt),
// EndpointSlices for Services, and the garbage collector (a Deployment's
// ReplicaSets and pods go with it; a NodeSet's pods after its finalizer),
// StatefulSets, the binding of PVCs to the real node's volumes (and their
// protection finalizers, which only these controllers remove), and
// the namespace controller (a deleted namespace empties and goes), the
// resource claim controller (a GPU claim whose pod is gone is released),
// disruption (PodDisruptionBudget status, which evictions read) and job
// (batch Jobs make pods; kwok completes them), and the aggregation of the
// built-in roles (admin, edit, view: the tenants of the trust tests hold
// "edit" in their namespaces, as on any cluster).
// Not yet: the node lifecycle (kwok Nodes).
var LabControllers = "namespace,serviceaccount,root-ca-cert-publisher,deployment,replicaset,statefulset,endpointslice,garbagecollector,persistentvolume-binder,persistentvolumeclaim-protection-controller,persistentvolume-protection-controller,resourceclaim-controller,disruption,job,clusterrole-aggregation-controller"

func (l *Lab) kubeControllerManager() daemon {
	p := l.pki()
	return daemon{
		Name: "kube-controller-manager",
		Argv: []string{filepath.Join(l.BinDir(), "kube-controller-manager"),
			"--kubeconfig", l.Kubeconfig(),
			"--authentication-kubeconfig", l.Kubeconfig(), "--authorization-kubeconfig", l.Kubeconfig(),
			"--bind-address", "127.0.0.1", "--secure-port", fmt.Sprint(KubeControllerManagerPort),
			"--controllers", LabControllers,
			"--root-ca-file", p.Path("ca.crt"),
			"--leader-elect=false",
			"--kube-api-qps", "100", "--kube-api-burst", "200",
			"--cert-dir", l.path("run", "kcm-certs"),
		},
		Port: KubeControllerManagerPort,
		Env:  []string{"PATH=/usr/bin:/bin", "HOME=" + l.path("run")},
	}
}

// kubeScheduler is Kubernetes' default scheduler. It places pods that name
// no scheduler (the chart's own pods, on the real node); it runs only with
// the real node, since kwok Nodes cannot run them.
func (l *Lab) kubeScheduler() daemon {
	return daemon{
		Name: "kube-scheduler",
		Argv: []string{filepath.Join(l.BinDir(), "kube-scheduler"),
			"--kubeconfig", l.Kubeconfig(),
			"--authentication-kubeconfig", l.Kubeconfig(), "--authorization-kubeconfig", l.Kubeconfig(),
			"--bind-address", "127.0.0.1", "--secure-port", fmt.Sprint(KubeSchedulerPort),
			"--leader-elect=false",
			"--cert-dir", l.path("run", "kube-scheduler-certs"),
		},
		Port: KubeSchedulerPort,
		Env:  []string{"PATH=/usr/bin:/bin", "HOME=" + l.path("run")},
	}
}

func (l *Lab) startKubeControllerManager(ctx context.Context) error {
	return l.startKubeComponent(ctx, l.kubeControllerManager(), KubeControllerManagerPort)
}

func (l *Lab) startKubeScheduler(ctx context.Context) error {
	return l.startKubeComponent(ctx, l.kubeScheduler(), KubeSchedulerPort)
}

// startKubeComponent starts kube-controller-manager or kube-scheduler and
// waits for its /healthz (self-signed serving certificate).
func (l *Lab) startKubeComponent(ctx context.Context, d daemon, port int) error {
	// One started with other flags (a lab from before a change to
	// LabControllers) is restarted with these.
	if l.procs.Running(d) != 0 && !l.procs.RunsArgv(d) {
		if err := l.procs.Stop(d.Name); err != nil {
			return err
		}
	}
	if _, err := l.procs.Start(d); err != nil {
		return err
	}
	insecure := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}, //nolint:gosec // the lab's own self-signed healthz
	}}
	return l.procs.Await(ctx, d, 60*time.Second, l.procs.OutFile(d.Name), func(ctx context.Context) error {
		return httpOK(ctx, insecure, fmt.Sprintf("https://127.0.0.1:%d/healthz", port))
	})
}
