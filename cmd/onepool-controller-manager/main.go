// Command onepool-controller-manager runs onepool's controllers (the syncer,
// the NodeSet and topology controllers) with leader election, health probes
// and Prometheus metrics, and serves the GPU webhook (gpuwebhook).
// `onepool-controller-manager ensure-secret` makes a Secret of random keys
// once (the slurm chart's keys Job); `ensure-accounting` keeps Slurm's QOS,
// accounts and associations as the slurm chart's values say (its
// accounting Job).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crconfig "sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/onepool/onepool/gpuwebhook"
	"github.com/onepool/onepool/internal/admissionmetrics"
	"github.com/onepool/onepool/internal/buildinfo"
	"github.com/onepool/onepool/internal/tokenevents"
	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/nodeset"
	"github.com/onepool/onepool/nodeset/api/v1alpha1"
	"github.com/onepool/onepool/slurmnode"
	"github.com/onepool/onepool/slurmrest"
	"github.com/onepool/onepool/syncer"
	"github.com/onepool/onepool/tenancy"
	tenancyv1alpha1 "github.com/onepool/onepool/tenancy/api/v1alpha1"
	"github.com/onepool/onepool/topology"
)

type config struct {
	kubeconfig      string
	slurmURL        string
	slurmTokenFile  string
	slurmJWTKey     string
	slurmTokenUser  string
	slurmTokenLife  time.Duration
	slurmCA         string
	slurmTimeout    time.Duration
	slurmAPIVersion string
	pollInterval    time.Duration
	staleAfter      time.Duration
	nodeFollow      slurmrest.NodeFollow
	nodeListEvery   time.Duration
	metrics         metricsFlags
	probeAddr       string
	pprofAddr       string
	leaderElect     bool
	leaderNamespace string
	leaseDuration   time.Duration
	renewDeadline   time.Duration
	retryPeriod     time.Duration
	kubeQPS         float64
	kubeBurst       int
	syncer          syncer.Options
	nodeset         nodeset.Options
	topology        topology.Options
	webhook         webhook.Options
	webhookCert     webhookCertFlags
	// defaultTenantPolicy: see the flag.
	defaultTenantPolicy string
	log                 zap.Options
}

func parseFlags(args []string) (config, error) {
	var c config
	fs := flag.NewFlagSet("onepool-controller-manager", flag.ContinueOnError)
	fs.StringVar(&c.kubeconfig, "kubeconfig", "", "kubeconfig file; empty: in-cluster config")
	fs.Float64Var(&c.kubeQPS, "kube-api-qps", 100, "queries per second to the kube-apiserver")
	fs.IntVar(&c.kubeBurst, "kube-api-burst", 200, "burst of queries to the kube-apiserver")
	fs.StringVar(&c.slurmURL, "slurmrest-url", "", "slurmrestd URL, e.g. http://slurmrestd:6820 (required)")
	fs.StringVar(&c.slurmTokenFile, "slurmrest-token-file", "", "file holding the slurmrestd JWT; re-read when it changes (this or --slurmrest-jwt-key-file)")
	fs.StringVar(&c.slurmJWTKey, "slurmrest-jwt-key-file", "", "file holding the cluster's jwt_hs256.key: mint short-lived tokens for --slurmrest-token-user, renewed before they expire")
	fs.StringVar(&c.slurmTokenUser, "slurmrest-token-user", "slurm", "Slurm user of minted tokens (SlurmUser or root: onepool acts as other users)")
	fs.DurationVar(&c.slurmTokenLife, "slurmrest-token-lifetime", slurmrest.DefaultTokenLifetime, "lifetime of each minted token")
	fs.StringVar(&c.slurmCA, "slurmrest-ca", "", "PEM CA bundle of slurmrestd's (or its TLS proxy's) certificate, for an https URL; empty: the system's roots")
	fs.DurationVar(&c.slurmTimeout, "slurmrest-timeout", 10*time.Second, "deadline of each slurmrestd request")
	fs.StringVar(&c.slurmAPIVersion, "slurmrest-api-version", "", "REST API version to speak ("+strings.Join(slurmrest.APIVersions, ", ")+"); empty: the newest slurmrestd serves")
	fs.DurationVar(&c.pollInterval, "slurm-poll-interval", time.Second, "how often the Slurm cache polls for changes")
	fs.DurationVar(&c.staleAfter, "slurm-stale-after", 30*time.Second, "after this long without a good refresh Slurm's state counts as unknown")
	fs.Func("slurm-node-follow", "how the Slurm cache keeps the nodes onepool serves current: auto (by name while they are at most 1/32 of Slurm's nodes and those are 32 or more, else the whole table's delta each poll), always (by name), never (the table)", func(v string) (err error) {
		c.nodeFollow, err = slurmrest.ParseNodeFollow(v)
		return err
	})
	fs.DurationVar(&c.nodeListEvery, "slurm-node-list-interval", 5*time.Minute, "while the served nodes are read by name, how often the whole node table is asked (topology, nodes onepool does not serve)")
	c.metrics.bind(fs)
	fs.StringVar(&c.probeAddr, "health-probe-bind-address", ":8081", "address of /healthz and /readyz")
	fs.StringVar(&c.pprofAddr, "pprof-bind-address", "", "address of Go's /debug/pprof/ (heap and CPU profiles, no authentication: bind it to 127.0.0.1); empty: off")
	fs.BoolVar(&c.leaderElect, "leader-elect", true, "elect a leader so that one replica acts at a time")
	fs.StringVar(&c.leaderNamespace, "leader-elect-namespace", "", "namespace of the leader lease; empty: the pod's own")
	fs.DurationVar(&c.leaseDuration, "leader-elect-lease-duration", 15*time.Second, "leader lease duration")
	fs.DurationVar(&c.renewDeadline, "leader-elect-renew-deadline", 10*time.Second, "leader renew deadline")
	fs.DurationVar(&c.retryPeriod, "leader-elect-retry-period", 2*time.Second, "leader election retry period")
	fs.DurationVar(&c.syncer.NotReadyGrace, "not-ready-grace", 2*time.Minute, "how long a slurmd pod may be not Ready before its Slurm node is drained")
	fs.DurationVar(&c.syncer.RegisterGrace, "register-grace", 2*time.Minute, "how long a new slurmd pod's node may be unknown to Slurm before a warning event")
	fs.DurationVar(&c.syncer.Resync, "resync", 5*time.Minute, "look at every slurmd pod again this often")
	var hostNodes string
	fs.StringVar(&hostNodes, "host-slurmd-nodes", "", "label selector of the Nodes whose slurmd runs on the host, not in a slurmd pod (an existing Slurm cluster), e.g. "+keys.LabelSlurmdOnHost+"=true: their cordon drains their Slurm node and Slurm's drains show on them; empty: none")
	// --zap-log-level (info, error, or N for debug level N), --zap-devel, ...
	c.log.BindFlags(fs)
	fs.IntVar(&c.nodeset.Workers, "nodeset-workers", 16, "pod creations and deletions one NodeSet reconcile runs at once")
	fs.DurationVar(&c.nodeset.Recheck, "nodeset-recheck", 10*time.Second, "how soon a NodeSet that waits (jobs running, slurmd registering) is looked at again")
	fs.DurationVar(&c.nodeset.ShareCheck, "nodeset-share-check", time.Minute, "how often each NodeSet Node's CPUs and memory left for Slurm are counted again against what its slurmd registered with (negative: never)")
	var topoLevels, topoConfigMap string
	fs.StringVar(&topoLevels, "topology-levels", "", "Node label keys, top of the network tree first (e.g. example.com/spine,example.com/leaf): keep Slurm's topology.conf from them; empty: off")
	fs.StringVar(&topoConfigMap, "topology-configmap", "", "namespace/name of the ConfigMap that holds topology.conf (the slurm chart's <release>-topology)")
	fs.DurationVar(&c.topology.Resync, "topology-resync", 5*time.Minute, "write topology.conf again this often even without a change")
	fs.IntVar(&c.webhook.Port, "webhook-port", 0, "serve the admission webhooks (nvidia.com/gpu → onepool's GPU claim; TenantPolicy checks of onepool pods) on this port; 0: off")
	fs.StringVar(&c.defaultTenantPolicy, "default-tenant-policy", "", "the TenantPolicy of namespaces no policy covers (as the scheduler's defaultTenantPolicy); empty: their onepool pods are refused")
	fs.StringVar(&c.webhook.Host, "webhook-host", "", "address the webhook listens on (empty: all)")
	fs.StringVar(&c.webhook.CertDir, "webhook-cert-dir", "/tmp/k8s-webhook-server/serving-certs", "directory with the webhook's tls.crt and tls.key (re-read when they change)")
	fs.StringVar(&c.webhookCert.secret, "webhook-cert-secret", "", "namespace/name of a Secret where the manager keeps its own webhook certificate (made, shared by the replicas, rotated before expiry, written to --webhook-cert-dir); empty: the files come from elsewhere (cert-manager)")
	fs.StringVar(&c.webhookCert.service, "webhook-service", "", "namespace/name of the webhook's Service: the certificate's names (with --webhook-cert-secret)")
	fs.StringVar(&c.webhookCert.configurations, "webhook-configurations", "", "mutating/NAME,validating/NAME: webhook configurations whose caBundle the manager keeps (with --webhook-cert-secret)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if c.webhook.Port < 0 || c.webhook.Port > 65535 {
		return c, fmt.Errorf("--webhook-port %d out of range", c.webhook.Port)
	}
	if c.webhookCert.enabled() {
		if _, err := c.webhookCert.config(c.webhook.CertDir); err != nil {
			return c, err
		}
	}
	if err := c.metrics.check(); err != nil {
		return c, err
	}
	if hostNodes != "" {
		sel, err := labels.Parse(hostNodes)
		if err != nil {
			return c, fmt.Errorf("--host-slurmd-nodes %q: %w", hostNodes, err)
		}
		if sel.Empty() {
			return c, fmt.Errorf("--host-slurmd-nodes %q selects every Node; name a label", hostNodes)
		}
		c.syncer.HostNodes = sel
	}
	if topoLevels != "" {
		c.topology.Levels = strings.Split(topoLevels, ",")
		cm, err := topology.ParseConfigMap(topoConfigMap)
		if err != nil {
			return c, err
		}
		c.topology.ConfigMap = cm
		if err := c.topology.Validate(); err != nil {
			return c, err
		}
	}
	if c.slurmURL == "" || (c.slurmTokenFile == "") == (c.slurmJWTKey == "") {
		return c, errors.New("--slurmrest-url and one of --slurmrest-token-file, --slurmrest-jwt-key-file are required")
	}
	if c.leaseDuration <= c.renewDeadline || c.renewDeadline <= c.retryPeriod {
		return c, errors.New("want lease duration > renew deadline > retry period")
	}
	c.syncer.Default()
	c.nodeset.Default()
	return c, errors.Join(c.syncer.Validate(), c.nodeset.Validate())
}

// slurmREST is the slurmrestd client's configuration from the flags.
func (c config) slurmREST() slurmrest.Config {
	return slurmrest.Config{URL: c.slurmURL, TokenFile: c.slurmTokenFile, JWTKeyFile: c.slurmJWTKey, TokenUser: c.slurmTokenUser,
		TokenLifetime: c.slurmTokenLife, CAFile: c.slurmCA, APIVersion: c.slurmAPIVersion, Timeout: c.slurmTimeout}
}

func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig == "" {
		return rest.InClusterConfig()
	}
	return clientcmd.BuildConfigFromFlags("", kubeconfig)
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "ensure-secret" {
		os.Exit(runEnsureSecret(os.Args[2:], os.Stdout, os.Stderr))
	}
	if len(os.Args) > 1 && os.Args[1] == "ensure-accounting" {
		os.Exit(runEnsureAccounting(os.Args[2:], os.Stdout, os.Stderr))
	}
	if len(os.Args) > 1 && os.Args[1] == "check-slurm" {
		os.Exit(runCheckSlurm(os.Args[2:], os.Stdout, os.Stderr))
	}
	c, err := parseFlags(os.Args[1:])
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&c.log)))
	log := ctrl.Log.WithName("setup")
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		log.Error(err, "bad flags")
		os.Exit(2)
	}
	log.Info("onepool-controller-manager", "build", buildinfo.Read().String())
	if err := run(ctrl.SetupSignalHandler(), c); err != nil {
		log.Error(err, "controller manager stopped")
		os.Exit(1)
	}
}

func run(ctx context.Context, c config) error {
	rc, err := restConfig(c.kubeconfig)
	if err != nil {
		return fmt.Errorf("kubernetes config: %w", err)
	}
	rc.QPS, rc.Burst = float32(c.kubeQPS), c.kubeBurst
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return err
	}
	if err := tenancyv1alpha1.AddToScheme(scheme); err != nil {
		return err
	}
	// The webhook's certificate (kept by the manager, or from elsewhere)
	// is in place before the webhook and metrics servers read it.
	var keepCert everyReplica
	keptCertDir := ""
	if c.webhook.Port > 0 && c.webhookCert.enabled() {
		cfg, err := c.webhookCert.config(c.webhook.CertDir)
		if err != nil {
			return err
		}
		cfg.ExtraServices = c.metrics.extraService()
		cfg.Leaves = c.metrics.leaves()
		if keepCert, err = startWebhookCert(ctx, rc, cfg); err != nil {
			return err
		}
		keptCertDir = c.webhook.CertDir
	}
	// controller-runtime 0.23's priority queue can deadlock when it shuts
	// down (kubernetes-sigs/controller-runtime#3538, fixed after 0.23.3):
	// a worker's Get and the queue's hand-off race, the hand-off blocks
	// holding the queue's lock and the manager never stops (seen in the
	// syncer's envtest suite). The classic work queue has no such race.
	usePriorityQueue := false
	opts := ctrl.Options{
		Controller:                    crconfig.Controller{UsePriorityQueue: &usePriorityQueue},
		Scheme:                        scheme,
		Metrics:                       c.metrics.options(keptCertDir),
		HealthProbeBindAddress:        c.probeAddr,
		PprofBindAddress:              c.pprofAddr,
		LeaderElection:                c.leaderElect,
		LeaderElectionID:              "onepool-controller-manager",
		LeaderElectionNamespace:       c.leaderNamespace,
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 &c.leaseDuration,
		RenewDeadline:                 &c.renewDeadline,
		RetryPeriod:                   &c.retryPeriod,
		Cache: cache.Options{
			// No onepool controller reads managedFields: without them a
			// cached Node is about a fifth smaller (issue 38: 16 of 77 MiB
			// of heap at 10,000 Nodes).
			DefaultTransform: cache.TransformStripManagedFields(),
			ByObject: map[client.Object]cache.ByObject{
				// Only slurmd pods: the informer never holds the cluster's other pods.
				&corev1.Pod{}: {Label: labels.SelectorFromSet(syncer.SlurmdPodSelector())},
			}},
	}
	if c.webhook.Port > 0 {
		opts.WebhookServer = webhook.NewServer(c.webhook)
	}
	mgr, err := ctrl.NewManager(rc, opts)
	if err != nil {
		return err
	}
	if keepCert != nil {
		if err := mgr.Add(keepCert); err != nil {
			return err
		}
	}
	if err := crmetrics.Registry.Register(buildinfo.Collector("controller-manager")); err != nil {
		return err
	}
	if c.webhook.Port > 0 {
		admissions, err := admissionmetrics.New(crmetrics.Registry)
		if err != nil {
			return err
		}
		// Every replica serves it (no leader needed): the API server calls any.
		mgr.GetWebhookServer().Register(gpuwebhook.Path, &webhook.Admission{Handler: admissions.Wrap("gpu", gpuwebhook.NewHandler(scheme))})
		mgr.GetWebhookServer().Register(tenancy.Path, &webhook.Admission{Handler: admissions.Wrap("tenancy",
			tenancy.NewAdmission(scheme, mgr.GetCache(), mgr.GetAPIReader(), c.defaultTenantPolicy))})
		if err := mgr.AddReadyzCheck("webhook", mgr.GetWebhookServer().StartedChecker()); err != nil {
			return err
		}
	}
	scfg := c.slurmREST()
	scfg.Registerer = crmetrics.Registry
	scfg.OnTokenProblem = tokenevents.FromEnv(mgr.GetEventRecorder("onepool-controller-manager"), ctrl.Log.WithName("slurmrest"))
	sc, err := slurmrest.New(scfg)
	if err != nil {
		return err
	}
	if err := mgr.Add(checkSlurmAtStart(sc, ctrl.Log.WithName("slurm-check"), c.slurmTimeout)); err != nil {
		return err
	}
	// The controllers read Slurm's nodes, never its jobs: the cache lists
	// nodes alone (a job listing is slurmrestd's costliest answer).
	// A served node is followed by name from its first read on, and for
	// three of the syncer's resyncs (which read each one) after its last.
	sCache := slurmrest.NewCache(sc, slurmrest.CacheConfig{PollInterval: c.pollInterval, StaleAfter: c.staleAfter,
		Watch: slurmrest.WatchNodes, NodeFollow: c.nodeFollow, NodeListEvery: c.nodeListEvery, NodeFollowFor: 3 * c.syncer.Resync,
		Logger: ctrl.Log.WithName("slurm-cache")})
	var cacheRunning atomic.Bool
	// The cache polls only on the leader: replicas waiting for the lease cost slurmrestd nothing.
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		cacheRunning.Store(true)
		defer cacheRunning.Store(false)
		sCache.Run(ctx)
		return nil
	})); err != nil {
		return err
	}
	if _, err := syncer.Setup(mgr, slurmnode.Cached{Cache: sCache, Client: sc}, sCache, crmetrics.Registry, c.syncer); err != nil {
		return err
	}
	if len(c.topology.Levels) > 0 {
		if _, err := topology.Setup(mgr, sCache, sCache, c.topology); err != nil {
			return err
		}
	}
	dc, err := discovery.NewDiscoveryClientForConfig(rc)
	if err != nil {
		return err
	}
	served, err := probeNodeSetAPI(ctx, dc)
	if err != nil {
		return err
	}
	if served {
		slurm := slurmnode.Cached{Cache: sCache, Client: sc}
		if _, err := nodeset.Setup(mgr, slurm, sCache, c.nodeset); err != nil {
			return err
		}
		if err := crmetrics.Registry.Register(nodeset.NewCollector(mgr.GetCache())); err != nil {
			return err
		}
		if err := tenancy.SetupStatus(mgr); err != nil {
			return err
		}
	} else {
		// Not a crash: the syncer still serves, and the pod says why it is not Ready.
		ctrl.Log.WithName("setup").Error(errNodeSetAPI, nodeSetAPIMessage())
		w := &crdWatch{d: dc, log: ctrl.Log.WithName("nodeset-api"), at: time.Now()}
		if err := mgr.AddReadyzCheck("nodeset-api", w.readyz); err != nil {
			return err
		}
		if err := mgr.AddHealthzCheck("nodeset-api", w.healthz); err != nil {
			return err
		}
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("slurm-cache", func(*http.Request) error {
		if cacheRunning.Load() && sCache.Stale() {
			return errors.New("Slurm state unknown: the slurmrest cache is stale")
		}
		return nil
	}); err != nil {
		return err
	}
	return mgr.Start(ctx)
}
