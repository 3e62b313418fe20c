package lab

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/test/lab/kwoknodes"
	"github.com/onepool/onepool/test/lab/proc"
	"github.com/onepool/onepool/test/lab/rootfs"
)

// The lab kubelet runs the slurmd pods of the Nodes that carry
// KubeletAnnotation=KubeletChroot: kwok marks those pods Running, and the lab
// kubelet starts their slurmd container's command inside the Slurm chroot, so
// a NodeSet's pods bring real slurmd (or the node agent) up and down.
const (
	KubeletAnnotation = kwoknodes.Kubelet
	KubeletChroot     = kwoknodes.KubeletChroot
	kubeletName       = "lab-kubelet"
	kubeletResync     = 10 * time.Second
)

func (l *Lab) kubeletDaemon() daemon {
	return daemon{
		Name: kubeletName,
		Argv: []string{filepath.Join(l.BinDir(), "lab"), "kubelet"},
		Env:  []string{"PATH=/usr/bin:/bin", "HOME=" + l.path("run"), "ONEPOOL_LAB_DIR=" + l.cfg.Dir, rootfs.EnvSlurm + "=" + l.Release().Name},
	}
}

func (l *Lab) kubeletReadyFile() string { return l.path("run", kubeletName+".ready") }

// KubeletLog is where the lab kubelet appends the output of node's slurmd pods.
func (l *Lab) KubeletLog(node string) string {
	return filepath.Join(l.LogDir(), "kubelet-"+node+".log")
}

// StartKubelet starts the lab kubelet (again when the lab binary was rebuilt
// since) and waits until it watches pods.
func (l *Lab) StartKubelet(ctx context.Context) error {
	d := l.kubeletDaemon()
	if err := l.startOwn(d, false, l.StopKubelet); err != nil {
		return err
	}
	return l.procs.Await(ctx, d, 60*time.Second, l.procs.OutFile(kubeletName), func(context.Context) error {
		pid := l.procs.Running(d)
		if pid == 0 {
			return errors.New("not running")
		}
		if b, _ := os.ReadFile(l.kubeletReadyFile()); strings.TrimSpace(string(b)) != strconv.Itoa(pid) {
			return errors.New("informers not synced yet")
		}
		return nil
	})
}

// StopKubelet stops the lab kubelet, which stops its pods' processes first
// (20 s each, in parallel): it gets longer than other daemons.
func (l *Lab) StopKubelet() error {
	if pid, prog := l.procs.ReadPid(kubeletName); pid != 0 && proc.Alive(pid, prog) {
		if err := proc.Terminate(pid, prog, 40*time.Second); err != nil {
			return fmt.Errorf("stop %s: %w", kubeletName, err)
		}
	}
	if err := os.Remove(l.procs.PidFile(kubeletName)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// kubelet is the state of a running lab kubelet: one podProc per pod UID,
// and the last podProc of each node, which a new pod on the node waits for.
type kubelet struct {
	l      *Lab
	log    *log.Logger
	procs  map[types.UID]*podProc
	byNode map[string]*podProc
	wg     sync.WaitGroup
}

// RunKubelet is `lab kubelet`: it runs until ctx ends, then stops every
// process it started.
func (l *Lab) RunKubelet(ctx context.Context) error {
	k := &kubelet{l: l, log: log.New(os.Stderr, "lab-kubelet: ", log.LstdFlags|log.Lmicroseconds),
		procs: map[types.UID]*podProc{}, byNode: map[string]*podProc{}}
	_ = os.Remove(l.kubeletReadyFile())
	defer os.Remove(l.kubeletReadyFile())
	// A predecessor killed hard leaves its processes; they hold the ports.
	if err := killPodProcs(l.RootFS()); err != nil {
		return err
	}
	kc, err := l.KubeClient()
	if err != nil {
		return err
	}
	// Two factories: the label selector is for pods only.
	podInf := informers.NewSharedInformerFactoryWithOptions(kc, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.LabelSelector = keys.LabelComponent + "=" + keys.ComponentSlurmd
	}))
	nodeInf := informers.NewSharedInformerFactory(kc, 0)
	pods, nodes := podInf.Core().V1().Pods(), nodeInf.Core().V1().Nodes()
	poke := make(chan struct{}, 1)
	h := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { notify(poke) },
		UpdateFunc: func(any, any) { notify(poke) },
		DeleteFunc: func(any) { notify(poke) },
	}
	for _, inf := range []cache.SharedIndexInformer{pods.Informer(), nodes.Informer()} {
		if _, err := inf.AddEventHandler(h); err != nil {
			return err
		}
	}
	infCtx, stopInformers := context.WithCancel(context.Background())
	defer func() { stopInformers(); podInf.Shutdown(); nodeInf.Shutdown() }()
	podInf.Start(infCtx.Done())
	nodeInf.Start(infCtx.Done())
	syncCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	synced := cache.WaitForCacheSync(syncCtx.Done(), pods.Informer().HasSynced, nodes.Informer().HasSynced)
	cancel()
	if !synced {
		return errors.New("pod and node informers did not sync within 60 s")
	}
	if err := os.WriteFile(l.kubeletReadyFile(), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		return err
	}
	k.log.Printf("watching slurmd pods on Nodes with %s=%s", KubeletAnnotation, KubeletChroot)
	// Events only poke; each pass compares all wanted pods with all
	// processes, so a missed or coalesced event is made good by the next.
	tick := time.NewTicker(kubeletResync)
	defer tick.Stop()
	for {
		k.sync(pods.Lister(), nodes.Lister())
		select {
		case <-ctx.Done():
			k.log.Printf("stopping %d pod processes", len(k.procs))
			for uid := range k.procs {
				k.stop(uid)
			}
			k.wg.Wait() // each stop is bounded (podProc.run)
			k.log.Printf("stopped")
			return nil
		case <-poke:
		case <-tick.C:
		}
	}
}

func notify(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// sync starts a process for every pod that should run and stops the
// processes of pods that are gone, deleting, no longer Running or moved off
// a chroot Node.
func (k *kubelet) sync(pods corelisters.PodLister, nodes corelisters.NodeLister) {
	all, err := pods.List(labels.Everything())
	if err != nil {
		k.log.Printf("list pods: %v", err)
		return
	}
	want := map[types.UID]*corev1.Pod{}
	for _, p := range all {
		if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning || p.Spec.NodeName == "" {
			continue
		}
		if n, err := nodes.Get(p.Spec.NodeName); err != nil || n.Annotations[KubeletAnnotation] != KubeletChroot {
			continue
		}
		want[p.UID] = p
	}
	for uid := range k.procs {
		if want[uid] == nil {
			k.stop(uid)
		}
	}
	for uid, p := range want {
		if k.procs[uid] != nil {
			continue
		}
		pp := &podProc{k: k, pod: p.Namespace + "/" + p.Name, node: p.Spec.NodeName, stopCh: make(chan struct{}), done: make(chan struct{})}
		var prev <-chan struct{}
		if old := k.byNode[pp.node]; old != nil {
			prev = old.done // the old pod's slurmd must free the node's port first
		}
		k.procs[uid], k.byNode[pp.node] = pp, pp
		k.wg.Add(1)
		go func() {
			defer k.wg.Done()
			pp.run(p, prev)
		}()
	}
}

func (k *kubelet) stop(uid types.UID) {
	pp := k.procs[uid]
	k.log.Printf("pod %s on %s: stopping", pp.pod, pp.node)
	close(pp.stopCh)
	delete(k.procs, uid)
}
