package main

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/big"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"
)

// ensureSecretUsage: `onepool-controller-manager ensure-secret`, what the
// slurm chart's keys Job runs. The keys are made in the cluster, once, not
// by the chart: a chart that made them would make new ones at every
// `helm template` (GitOps), and Slurm's munge and JWT authentication would
// break with each render.
const ensureSecretUsage = `usage: onepool-controller-manager ensure-secret --namespace NS --name NAME [--bytes KEY=N]... [--alphanumeric KEY=N]... [--label K=V]...

Makes the Secret with random keys when it is missing, and adds the keys it
lacks; a key that exists is never changed. Key values are never printed.
`

// secretKey is one key to ensure: n random bytes, or n letters and digits.
type secretKey struct {
	name         string
	n            int
	alphanumeric bool
}

type ensureSecretConfig struct {
	kubeconfig, namespace, name string
	keys                        []secretKey
	labels                      map[string]string
	timeout                     time.Duration
}

// keyFlag collects KEY=N arguments of one kind.
type keyFlag struct {
	keys         *[]secretKey
	alphanumeric bool
}

func (f keyFlag) String() string { return "" }

func (f keyFlag) Set(v string) error {
	name, n, ok := strings.Cut(v, "=")
	size, err := strconv.Atoi(n)
	if !ok || name == "" || err != nil || size < 16 || size > 4096 {
		return fmt.Errorf("%q: want KEY=N with 16 <= N <= 4096", v)
	}
	for _, k := range *f.keys {
		if k.name == name {
			return fmt.Errorf("key %q given twice", name)
		}
	}
	*f.keys = append(*f.keys, secretKey{name: name, n: size, alphanumeric: f.alphanumeric})
	return nil
}

type labelFlag map[string]string

func (f labelFlag) String() string { return "" }

func (f labelFlag) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" {
		return fmt.Errorf("%q: want K=V", v)
	}
	f[k] = val
	return nil
}

func parseEnsureSecretFlags(args []string, stderr io.Writer) (ensureSecretConfig, error) {
	c := ensureSecretConfig{labels: map[string]string{}}
	fs := flag.NewFlagSet("ensure-secret", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, ensureSecretUsage); fs.PrintDefaults() }
	fs.StringVar(&c.kubeconfig, "kubeconfig", "", "kubeconfig file; empty: in-cluster config")
	fs.StringVar(&c.namespace, "namespace", "", "the Secret's namespace (required)")
	fs.StringVar(&c.name, "name", "", "the Secret's name (required)")
	fs.Var(keyFlag{keys: &c.keys}, "bytes", "KEY=N: N random bytes (repeat for more keys)")
	fs.Var(keyFlag{keys: &c.keys, alphanumeric: true}, "alphanumeric", "KEY=N: N random letters and digits (a password)")
	fs.Var(labelFlag(c.labels), "label", "K=V: a label of a Secret it makes (repeat)")
	fs.DurationVar(&c.timeout, "timeout", 2*time.Minute, "how long to try in all")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	switch {
	case c.namespace == "" || c.name == "":
		return c, errors.New("--namespace and --name are required")
	case len(c.keys) == 0:
		return c, errors.New("no key to ensure: give --bytes or --alphanumeric")
	case fs.NArg() > 0:
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	return c, nil
}

// runEnsureSecret is the ensure-secret command: 0, or 1 with the reason
// on stderr, or 2 for bad flags.
func runEnsureSecret(args []string, stdout, stderr io.Writer) int {
	c, err := parseEnsureSecretFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "ensure-secret: %v\n", err)
		return 2
	}
	rc, err := clientcmd.BuildConfigFromFlags("", c.kubeconfig)
	if err != nil {
		fmt.Fprintf(stderr, "ensure-secret: Kubernetes config: %v\n", err)
		return 1
	}
	rc.Timeout = 30 * time.Second
	rc.UserAgent = "onepool-ensure-secret"
	kc, err := kubernetes.NewForConfig(rc)
	if err != nil {
		fmt.Fprintf(stderr, "ensure-secret: %v\n", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	added, err := ensureSecret(ctx, kc, c, rand.Reader)
	if err != nil {
		fmt.Fprintf(stderr, "ensure-secret: %s/%s: %v\n", c.namespace, c.name, err)
		return 1
	}
	if len(added) == 0 {
		fmt.Fprintf(stdout, "secret %s/%s has every key; nothing changed\n", c.namespace, c.name)
	} else {
		fmt.Fprintf(stdout, "secret %s/%s: made %s\n", c.namespace, c.name, strings.Join(added, ", "))
	}
	return 0
}

// ensureSecret makes the Secret, or adds the keys it lacks, and returns
// the names of the keys it made (sorted). Existing keys are never changed;
// a conflict (two runs at once) is read again and retried. Errors name no
// key's value.
func ensureSecret(ctx context.Context, kc kubernetes.Interface, c ensureSecretConfig, random io.Reader) ([]string, error) {
	var added []string
	err := retry.OnError(retry.DefaultBackoff, func(err error) bool {
		return apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err)
	}, func() error {
		added = nil
		s, err := kc.CoreV1().Secrets(c.namespace).Get(ctx, c.name, metav1.GetOptions{})
		create := apierrors.IsNotFound(err)
		if err != nil && !create {
			return fmt.Errorf("reading it: %w", err)
		}
		if create {
			s = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: c.name, Namespace: c.namespace, Labels: c.labels},
				Type: corev1.SecretTypeOpaque}
		}
		if s.Data == nil {
			s.Data = map[string][]byte{}
		}
		for _, k := range c.keys {
			if len(s.Data[k.name]) > 0 {
				continue
			}
			v, err := randomKey(random, k)
			if err != nil {
				return err
			}
			s.Data[k.name] = v
			added = append(added, k.name)
		}
		switch {
		case create:
			_, err = kc.CoreV1().Secrets(c.namespace).Create(ctx, s, metav1.CreateOptions{})
		case len(added) > 0:
			_, err = kc.CoreV1().Secrets(c.namespace).Update(ctx, s, metav1.UpdateOptions{})
		}
		if err != nil {
			return fmt.Errorf("writing it: %w", err)
		}
		return nil
	})
	sort.Strings(added)
	return added, err
}

const alphanumerics = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"

func randomKey(random io.Reader, k secretKey) ([]byte, error) {
	out := make([]byte, k.n)
	if !k.alphanumeric {
		if _, err := io.ReadFull(random, out); err != nil {
			return nil, fmt.Errorf("random bytes: %w", err)
		}
		return out, nil
	}
	max := big.NewInt(int64(len(alphanumerics)))
	for i := range out {
		n, err := rand.Int(random, max)
		if err != nil {
			return nil, fmt.Errorf("random letters: %w", err)
		}
		out[i] = alphanumerics[n.Int64()]
	}
	return out, nil
}
