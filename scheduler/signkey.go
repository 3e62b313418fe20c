package scheduler

import (
	"context"
	"crypto/rand"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"

	"github.com/onepool/onepool/keys"
)

// secretRef splits "namespace/name".
func secretRef(s string) (namespace, name string, err error) {
	ns, name, ok := strings.Cut(s, "/")
	if !ok || len(validation.IsDNS1123Label(ns)) > 0 || len(validation.IsDNS1123Subdomain(name)) > 0 {
		return "", "", fmt.Errorf("want namespace/name of a Secret")
	}
	return ns, name, nil
}

// loadCommentKeys reads the placeholder signing key from its Secret. The
// first scheduler to start makes the Secret with a random key; one that
// exists is never changed (an admin rotates by moving the key to
// "previous" and writing a new one). The key never leaves this process:
// errors name the Secret, not its contents.
func loadCommentKeys(ctx context.Context, kube kubernetes.Interface, ref string) (*commentKeys, error) {
	ns, name, err := secretRef(ref)
	if err != nil {
		return nil, fmt.Errorf("placeholder key Secret %q: %w", ref, err)
	}
	secrets := kube.CoreV1().Secrets(ns)
	get := func() (*corev1.Secret, error) {
		gctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		return secrets.Get(gctx, name, metav1.GetOptions{})
	}
	s, err := get()
	if apierrors.IsNotFound(err) {
		key := make([]byte, minKeyLen)
		if _, err := rand.Read(key); err != nil {
			return nil, fmt.Errorf("making a placeholder signing key: %w", err)
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		s, err = secrets.Create(cctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{keys.LabelComponent: "scheduler"}},
			Type:       corev1.SecretTypeOpaque,
			Data:       map[string][]byte{keys.PlaceholderKeyData: key},
		}, metav1.CreateOptions{})
		cancel()
		if apierrors.IsAlreadyExists(err) {
			s, err = get() // another replica made it first
		}
	}
	if err != nil {
		return nil, fmt.Errorf("placeholder key Secret %s/%s: %w", ns, name, err)
	}
	k, err := newCommentKeys(s.Data[keys.PlaceholderKeyData], s.Data[keys.PlaceholderKeyPrevious])
	if err != nil {
		return nil, fmt.Errorf("placeholder key Secret %s/%s, data %q: %w", ns, name, keys.PlaceholderKeyData, err)
	}
	return k, nil
}
