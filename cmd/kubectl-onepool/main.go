// kubectl-onepool is the kubectl plugin `kubectl onepool`: the one-pool
// view of a cluster whose GPUs serve Slurm and Kubernetes at once.
//
//	kubectl onepool status [-o table|wide|json|yaml] [--node N] [--partition P] [--namespace NS]
//	kubectl onepool drains [-o table|json|yaml]
//	kubectl onepool explain pod NAME [-n NAMESPACE] [-o json|yaml]
//
// It reads Kubernetes with the caller's kubeconfig and Slurm through
// slurmrestd (--slurmrest-url and a token: --slurmrest-token-file or
// --slurmrest-jwt-key-file; the same ONEPOOL_SLURMREST_* variables as the
// lab's `lab env`). Nothing is changed.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/onepool/onepool/internal/poolview"
	"github.com/onepool/onepool/slurmrest"
)

const usage = `kubectl onepool: the pool's GPUs as Kubernetes and Slurm both see them

  kubectl onepool status   per node: Kubernetes' state beside Slurm's, the drain and its owner,
                           and who holds each GPU (a Slurm job, or a pod through its job)
  kubectl onepool drains   every drained Slurm node: its reason, who owns it, since when
  kubectl onepool explain pod NAME [-n NS]
                           why a pod waits, runs where it runs, or was evicted: its Slurm job and
                           place in the queue, its TenantPolicy, its last events

Flags (each command):
`

// Environment variables of the Slurm flags (as the lab's `lab env`).
const (
	envURL       = "ONEPOOL_SLURMREST_URL"
	envTokenFile = "ONEPOOL_SLURMREST_TOKEN_FILE"
	envJWTKey    = "ONEPOOL_SLURMREST_JWT_KEY_FILE"
)

type options struct {
	kubeconfig, kubeContext        string
	url, tokenFile, jwtKey, caFile string
	tokenUser                      string
	output                         string
	nodes, partitions, namespaces  string
	timeout                        time.Duration
}

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

// run is the plugin; 0 ok, 1 something could not be read (what could is
// still shown), 2 bad usage.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stderr, usage)
		newFlags(&options{}, stderr).PrintDefaults()
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	cmd := args[0]
	if cmd != "status" && cmd != "drains" && cmd != "explain" {
		fmt.Fprintf(stderr, "kubectl onepool: unknown command %q (status, drains, explain)\n", cmd)
		return 2
	}
	var o options
	fs := newFlags(&o, stderr)
	positional, err := parseInterspersed(fs, args[1:])
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if cmd == "explain" {
		return explain(ctx, o, positional, stdout, stderr)
	}
	if len(positional) > 0 {
		fmt.Fprintf(stderr, "kubectl onepool %s: unexpected %q\n", cmd, positional[0])
		return 2
	}
	if !slices.Contains([]string{"table", "wide", "json", "yaml"}, o.output) {
		fmt.Fprintf(stderr, "kubectl onepool: -o %s: one of table, wide, json, yaml\n", o.output)
		return 2
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	in, readErrs := read(ctx, o)
	for _, err := range readErrs {
		fmt.Fprintf(stderr, "kubectl onepool: %v\n", err)
	}
	if in == nil {
		return 1
	}
	view := filter(poolview.Build(*in), o)
	switch cmd {
	case "status":
		err = printStatus(stdout, view, o.output)
	case "drains":
		err = printDrains(stdout, poolview.Drains(view), o.output)
	}
	if err != nil {
		fmt.Fprintf(stderr, "kubectl onepool: %v\n", err)
		return 1
	}
	if len(readErrs) > 0 {
		return 1
	}
	return 0
}

// parseInterspersed parses flags before, between and after positional
// arguments (kubectl's way: `explain pod NAME -n NS`).
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return positional, nil
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

func newFlags(o *options, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("kubectl onepool", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig (default: $KUBECONFIG, ~/.kube/config)")
	fs.StringVar(&o.kubeContext, "context", "", "the kubeconfig context")
	fs.StringVar(&o.url, "slurmrest-url", os.Getenv(envURL), "slurmrestd's URL ($"+envURL+")")
	fs.StringVar(&o.tokenFile, "slurmrest-token-file", os.Getenv(envTokenFile), "a file holding a Slurm JWT ($"+envTokenFile+")")
	fs.StringVar(&o.jwtKey, "slurmrest-jwt-key-file", os.Getenv(envJWTKey), "the cluster's JWT key, to mint a token for --slurmrest-token-user ($"+envJWTKey+")")
	fs.StringVar(&o.tokenUser, "slurmrest-token-user", "slurm", "the Slurm user of a minted token")
	fs.StringVar(&o.caFile, "slurmrest-ca", "", "the CA bundle of an https slurmrestd")
	fs.StringVar(&o.output, "o", "table", "output: table, wide (every GPU, free ones too), json, yaml")
	fs.StringVar(&o.nodes, "node", "", "only these nodes (comma-separated; Kubernetes or Slurm names)")
	fs.StringVar(&o.partitions, "partition", "", "only the Slurm nodes of these partitions (comma-separated)")
	fs.StringVar(&o.namespaces, "namespace", "", "status: only nodes where a pod of these namespaces holds a GPU (comma-separated); explain: the pod's namespace")
	fs.StringVar(&o.namespaces, "n", "", "the same as --namespace")
	fs.DurationVar(&o.timeout, "timeout", 30*time.Second, "for everything it reads")
	return fs
}

// read lists what the view needs. Kubernetes unreadable is fatal (nil);
// Slurm unreadable leaves its side empty, said in the errors.
func read(ctx context.Context, o options) (*poolview.Input, []error) {
	kc, _, err := kubeClients(o)
	if err != nil {
		return nil, []error{err}
	}
	nodes, err := kc.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, []error{fmt.Errorf("listing Nodes: %w", err)}
	}
	in := &poolview.Input{Nodes: nodes.Items}
	var errs []error
	pods, err := kc.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		errs = append(errs, fmt.Errorf("listing pods (GPUs held by pods show as their jobs): %w", err))
	} else {
		in.Pods = pods.Items
	}
	if err := readSlurm(ctx, o, in); err != nil {
		errs = append(errs, fmt.Errorf("Slurm could not be read, only Kubernetes' side is shown: %w", err))
	}
	return in, errs
}

// clientConfig is the caller's kubeconfig (--kubeconfig, else $KUBECONFIG
// or ~/.kube/config) and context.
func clientConfig(o options) clientcmd.ClientConfig {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = o.kubeconfig
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: o.kubeContext})
}

// kubeClients is the caller's client, from the kubeconfig, and its
// configuration.
func kubeClients(o options) (kubernetes.Interface, *rest.Config, error) {
	rc, err := clientConfig(o).ClientConfig()
	if err != nil {
		return nil, nil, fmt.Errorf("kubeconfig: %w", err)
	}
	rc.Timeout = o.timeout
	rc.UserAgent = "kubectl-onepool"
	kc, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, nil, err
	}
	return kc, rc, nil
}

func slurmClient(o options) (*slurmrest.Client, error) {
	if o.url == "" {
		return nil, fmt.Errorf("no --slurmrest-url (or $%s)", envURL)
	}
	if o.tokenFile == "" && o.jwtKey == "" {
		return nil, fmt.Errorf("no --slurmrest-token-file or --slurmrest-jwt-key-file (or $%s, $%s)", envTokenFile, envJWTKey)
	}
	return slurmrest.New(slurmrest.Config{URL: o.url, TokenFile: o.tokenFile, JWTKeyFile: o.jwtKey, TokenUser: o.tokenUser,
		TokenLifetime: 10 * time.Minute, CAFile: o.caFile, Timeout: min(o.timeout, 15*time.Second)})
}

func readSlurm(ctx context.Context, o options, in *poolview.Input) error {
	c, err := slurmClient(o)
	if err != nil {
		return err
	}
	nodes, err := c.ListNodes(ctx, time.Time{})
	if err != nil {
		return err
	}
	jobs, err := c.ListJobs(ctx, time.Time{})
	if err != nil {
		return err
	}
	in.SlurmNodes, in.Jobs = nodes.Nodes, jobs.Jobs
	if o.partitions != "" {
		keep := split(o.partitions)
		in.SlurmNodes = slices.DeleteFunc(in.SlurmNodes, func(n slurmrest.Node) bool {
			return !slices.ContainsFunc(n.Partitions, func(p string) bool { return slices.Contains(keep, p) })
		})
	}
	return nil
}

// filter keeps the rows --node, --partition and --namespace ask for.
func filter(view []poolview.Node, o options) []poolview.Node {
	nodes, nss := split(o.nodes), split(o.namespaces)
	return slices.DeleteFunc(view, func(n poolview.Node) bool {
		if len(nodes) > 0 && !slices.Contains(nodes, n.Node) && !slices.Contains(nodes, n.SlurmNode) {
			return true
		}
		if o.partitions != "" && n.SlurmNode == "" {
			return true
		}
		if len(nss) > 0 && !slices.ContainsFunc(n.GPUs, func(g poolview.GPU) bool {
			ns, _, _ := strings.Cut(g.Pod, "/")
			return g.Pod != "" && slices.Contains(nss, ns)
		}) {
			return true
		}
		return false
	})
}

func split(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func printStatus(w io.Writer, view []poolview.Node, output string) error {
	switch output {
	case "json", "yaml":
		return printData(w, map[string]any{"nodes": view}, output)
	}
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tKUBERNETES\tSLURM NODE\tSLURM\tDRAIN OWNER\tREASON\tGPUS FREE")
	for _, n := range view {
		free := 0
		for _, g := range n.GPUs {
			if g.Job == 0 {
				free++
			}
		}
		gpus := "-"
		if len(n.GPUs) > 0 {
			gpus = fmt.Sprintf("%d/%d", free, len(n.GPUs))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", orDash(n.Node), orDash(n.Kubernetes), orDash(n.SlurmNode), orDash(n.Slurm),
			orDash(n.DrainOwner), orDash(n.Reason), gpus)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var rows [][]string
	for _, n := range view {
		for _, g := range n.GPUs {
			if g.Job != 0 || output == "wide" {
				rows = append(rows, []string{orDash(n.SlurmNode), fmt.Sprint(g.Index), orDash(g.Type), g.Holder()})
			}
		}
	}
	if len(rows) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "SLURM NODE\tGPU\tTYPE\tHELD BY")
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}

func printDrains(w io.Writer, drains []poolview.Drain, output string) error {
	switch output {
	case "json", "yaml":
		return printData(w, map[string]any{"drains": drains}, output)
	}
	if len(drains) == 0 {
		_, err := fmt.Fprintln(w, "No Slurm node is drained.")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "SLURM NODE\tNODE\tOWNER\tSET BY\tSINCE\tCORDONED\tREASON")
	for _, d := range drains {
		since := "-"
		if !d.Since.IsZero() {
			since = d.Since.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%t\t%s\n", d.SlurmNode, orDash(d.Node), d.Owner, orDash(d.By), since, d.Cordoned, d.Reason)
	}
	return tw.Flush()
}

func printData(w io.Writer, v any, output string) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if output == "yaml" {
		if b, err = yaml.JSONToYAML(b); err != nil {
			return err
		}
	}
	_, err = fmt.Fprintln(w, strings.TrimRight(string(b), "\n"))
	return err
}
