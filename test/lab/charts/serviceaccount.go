package charts

import (
	"context"
	"fmt"
	"os"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/onepool/onepool/test/lab/pki"
)

// ServiceAccountKubeconfig is a kubeconfig file acting as one of the
// chart's ServiceAccounts, which is how the lab runs a component as a
// process under the chart's own RBAC.
type ServiceAccountKubeconfig struct {
	// Path is the kubeconfig file, Name the ServiceAccount in Namespace.
	Path, Name string
	// APIServer is the apiserver's URL and CA its CA certificate (PEM).
	APIServer string
	CA        []byte
	// Lifetime is how long a minted token lasts; Ensure mints a new one
	// when less than a day of it is left.
	Lifetime time.Duration
}

// Ensure writes the kubeconfig with a fresh token from kc's TokenRequest
// unless the one there lasts another day and the apiserver still takes it
// (a ServiceAccount deleted by an uninstall and made again does not).
func (s ServiceAccountKubeconfig) Ensure(ctx context.Context, kc kubernetes.Interface) error {
	if st, err := os.Stat(s.Path); err == nil && time.Since(st.ModTime()) < s.Lifetime-24*time.Hour && s.works(ctx) {
		return nil
	}
	secs := int64(s.Lifetime / time.Second)
	tr, err := kc.CoreV1().ServiceAccounts(Namespace).CreateToken(ctx, s.Name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &secs},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("token of ServiceAccount %s/%s: %w", Namespace, s.Name, err)
	}
	body := pki.KubeconfigFor(s.APIServer, s.CA, s.Name, Namespace, [2]string{"token", tr.Status.Token})
	tmp := s.Path + ".tmp"
	if err := os.WriteFile(tmp, []byte(body), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, s.Path)
}

// Client is a clientset acting as the ServiceAccount.
func (s ServiceAccountKubeconfig) Client() (kubernetes.Interface, error) {
	return ClientFor(s.Path, s.Name)
}

// ClientFor is a clientset from the kubeconfig at path (of ServiceAccount sa, for errors).
func ClientFor(path, sa string) (kubernetes.Interface, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig of %s: %w", sa, err)
	}
	return kubernetes.NewForConfig(cfg)
}

func (s ServiceAccountKubeconfig) works(ctx context.Context) bool {
	c, err := s.Client()
	if err != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = c.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	return err == nil
}
