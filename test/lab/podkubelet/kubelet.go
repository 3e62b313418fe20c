// Package podkubelet is the lab's stand-in kubelet for the slurmd pods of
// the dynamic kwok Nodes: kwok marks those pods Running, and this kubelet
// starts their slurmd container's command as a process inside the Slurm
// chroot, restarts it with backoff when it exits and stops it when the pod
// goes away, so a NodeSet's pods bring real slurmd (or the node agent) up and
// down without a container runtime. See its README.
package podkubelet

import (
	"context"
	"errors"
	"log"
	"os"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/test/lab/kwoknodes"
)

// resync is how often the kubelet compares every wanted pod with every
// process even without an event.
const resync = 10 * time.Second

// Config is what the kubelet needs from the lab.
type Config struct {
	// Root is the chroot the pods' commands run in.
	Root string
	// Client watches the slurmd pods and the Nodes.
	Client kubernetes.Interface
	// ReadyFile gets the kubelet's pid once its informers have synced.
	ReadyFile string
	// LogFile is where the output of node's pods is appended.
	LogFile func(node string) string
	// Node is what the lab gives a pod on node; an error means the lab
	// cannot run a slurmd there.
	Node func(node string) (Node, error)
	// Log gets one line per pod event.
	Log *log.Logger
}

// Node is the lab's part of a pod's process on one node.
type Node struct {
	// Env comes after the pod's own so it wins (the node's slurmd port, the
	// fake GPUs' inventory, ...).
	Env []string
	// Dirs are made inside the chroot before each start.
	Dirs []string
}

// kubelet is the state of a running kubelet: one podProc per pod UID, and
// the last podProc of each node, which a new pod on the node waits for.
type kubelet struct {
	cfg    Config
	procs  map[types.UID]*podProc
	byNode map[string]*podProc
	wg     sync.WaitGroup
}

// Run runs the kubelet until ctx ends, then stops every process it
// started. It first ends what a predecessor killed hard left running.
func Run(ctx context.Context, cfg Config) error {
	k := &kubelet{cfg: cfg, procs: map[types.UID]*podProc{}, byNode: map[string]*podProc{}}
	_ = os.Remove(cfg.ReadyFile)
	defer os.Remove(cfg.ReadyFile)
	// A predecessor killed hard leaves its processes; they hold the ports.
	if err := KillLeftovers(cfg.Root); err != nil {
		return err
	}
	// Two factories: the label selector is for pods only.
	podInf := informers.NewSharedInformerFactoryWithOptions(cfg.Client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.LabelSelector = keys.LabelComponent + "=" + keys.ComponentSlurmd
	}))
	nodeInf := informers.NewSharedInformerFactory(cfg.Client, 0)
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
	if err := os.WriteFile(cfg.ReadyFile, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		return err
	}
	cfg.Log.Printf("watching slurmd pods on Nodes with %s=%s", kwoknodes.Kubelet, kwoknodes.KubeletChroot)
	// Events only poke; each pass compares all wanted pods with all
	// processes, so a missed or coalesced event is made good by the next.
	tick := time.NewTicker(resync)
	defer tick.Stop()
	for {
		k.sync(pods.Lister(), nodes.Lister())
		select {
		case <-ctx.Done():
			cfg.Log.Printf("stopping %d pod processes", len(k.procs))
			for uid := range k.procs {
				k.stop(uid)
			}
			k.wg.Wait() // each stop is bounded (podProc.run)
			cfg.Log.Printf("stopped")
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
		k.cfg.Log.Printf("list pods: %v", err)
		return
	}
	want := map[types.UID]*corev1.Pod{}
	for _, p := range all {
		if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning || p.Spec.NodeName == "" {
			continue
		}
		if n, err := nodes.Get(p.Spec.NodeName); err != nil || n.Annotations[kwoknodes.Kubelet] != kwoknodes.KubeletChroot {
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
	k.cfg.Log.Printf("pod %s on %s: stopping", pp.pod, pp.node)
	close(pp.stopCh)
	delete(k.procs, uid)
}
