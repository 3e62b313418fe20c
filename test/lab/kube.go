package lab

import (
	"context"

	"github.com/onepool/onepool/test/lab/controlplane"
	"github.com/onepool/onepool/test/lab/pki"
	"github.com/onepool/onepool/test/lab/rootfs"
)

func (l *Lab) kubeSteps() []step {
	cp := l.controlPlane()
	return []step{
		{"check tools", func(context.Context) error { return cp.CheckTools() }},
		{"kubernetes pki", l.ensurePKI},
		{"chroot kubeconfig", l.installChrootKubeconfig},
		{"etcd", cp.StartEtcd},
		{"kube-apiserver", cp.StartAPIServer},
		{"kube-controller-manager", cp.StartControllerManager},
		{"kwok", cp.StartKwok},
		{"kwok nodes", l.ensureKubeNodes},
	}
}

// controlPlane is the lab's Kubernetes control plane (package controlplane).
func (l *Lab) controlPlane() controlplane.ControlPlane {
	return controlplane.ControlPlane{BinDir: l.BinDir(), RunDir: l.path("run"), Kubeconfig: l.Kubeconfig(),
		KwokStages: l.path("kwok-stages.yaml"), PKI: l.pki(), Procs: l.procs, Kube: l.cfg.Kube}
}

func (l *Lab) pki() pki.PKI { return pki.PKI{Dir: l.path("run", "pki")} }

// APIServerURL is the lab's kube-apiserver.
func (l *Lab) APIServerURL() string { return controlplane.APIServerURL() }

func (l *Lab) ensurePKI(context.Context) error {
	p := l.pki()
	if err := p.Ensure(); err != nil {
		return err
	}
	kc, err := p.Kubeconfig(l.APIServerURL())
	if err != nil {
		return err
	}
	_, err = rootfs.WriteIfChanged(l.Kubeconfig(), kc)
	return err
}
