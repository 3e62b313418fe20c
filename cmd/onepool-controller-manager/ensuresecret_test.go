package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func slurmKeys() ensureSecretConfig {
	return ensureSecretConfig{namespace: "slurm", name: "slurm-keys", labels: map[string]string{"app": "slurm"},
		keys: []secretKey{{name: "munge.key", n: 1024}, {name: "jwt_hs256.key", n: 32}, {name: "password", n: 32, alphanumeric: true}}}
}

// Made once: a second run (a second `helm template | kubectl apply`, an
// upgrade) changes nothing, so munge and JWT keep working.
func TestEnsureSecretMakesKeysOnce(t *testing.T) {
	kc := fake.NewClientset()
	ctx := context.Background()
	added, err := ensureSecret(ctx, kc, slurmKeys(), rand.Reader)
	require.NoError(t, err)
	assert.Equal(t, []string{"jwt_hs256.key", "munge.key", "password"}, added)
	first, err := kc.CoreV1().Secrets("slurm").Get(ctx, "slurm-keys", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Len(t, first.Data["munge.key"], 1024)
	assert.Len(t, first.Data["jwt_hs256.key"], 32)
	assert.Regexp(t, `^[A-Za-z0-9]{32}$`, string(first.Data["password"]))
	assert.Equal(t, "slurm", first.Labels["app"])

	added, err = ensureSecret(ctx, kc, slurmKeys(), rand.Reader)
	require.NoError(t, err)
	assert.Empty(t, added)
	second, err := kc.CoreV1().Secrets("slurm").Get(ctx, "slurm-keys", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, first.Data, second.Data, "the keys changed on a second run")
}

// A Secret the admin brought (or an older chart made) keeps its keys; only
// missing ones are added.
func TestEnsureSecretAddsOnlyMissingKeys(t *testing.T) {
	own := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "slurm-keys", Namespace: "slurm"},
		Data: map[string][]byte{"munge.key": []byte("the admin's own munge key")}}
	kc := fake.NewClientset(own)
	added, err := ensureSecret(context.Background(), kc, slurmKeys(), rand.Reader)
	require.NoError(t, err)
	assert.Equal(t, []string{"jwt_hs256.key", "password"}, added)
	got, err := kc.CoreV1().Secrets("slurm").Get(context.Background(), "slurm-keys", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "the admin's own munge key", string(got.Data["munge.key"]))
	assert.Len(t, got.Data["jwt_hs256.key"], 32)
}

// Two runs at once (two Jobs, a retry): the loser of the create reads the
// winner's Secret and keeps its keys.
func TestEnsureSecretLosesARaceGracefully(t *testing.T) {
	kc := fake.NewClientset()
	winner := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "slurm-keys", Namespace: "slurm"},
		Data: map[string][]byte{"munge.key": bytes.Repeat([]byte{1}, 1024), "jwt_hs256.key": bytes.Repeat([]byte{2}, 32), "password": []byte("winner")}}
	raced := false
	kc.PrependReactor("create", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
		if raced {
			return false, nil, nil
		}
		raced = true
		require.NoError(t, kc.Tracker().Add(winner))
		return true, nil, apierrors.NewAlreadyExists(schema.GroupResource{Resource: "secrets"}, "slurm-keys")
	})
	added, err := ensureSecret(context.Background(), kc, slurmKeys(), rand.Reader)
	require.NoError(t, err)
	assert.Empty(t, added)
	got, err := kc.CoreV1().Secrets("slurm").Get(context.Background(), "slurm-keys", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "winner", string(got.Data["password"]))
}

// A broken random source or a refused write is an error naming the
// Secret, never a Secret with a weak key, and never a key's value.
func TestEnsureSecretErrors(t *testing.T) {
	_, err := ensureSecret(context.Background(), fake.NewClientset(), slurmKeys(), bytes.NewReader(nil))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "random bytes")

	kc := fake.NewClientset()
	kc.PrependReactor("create", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, "slurm-keys", errors.New("RBAC"))
	})
	_, err = ensureSecret(context.Background(), kc, slurmKeys(), rand.Reader)
	require.Error(t, err)
	assert.True(t, apierrors.IsForbidden(err), "%v", err)
}

func TestEnsureSecretFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"--name", "x", "--bytes", "k=32"}, "--namespace and --name are required"},
		{[]string{"--namespace", "n", "--name", "x"}, "no key to ensure"},
		{[]string{"--namespace", "n", "--name", "x", "--bytes", "k=8"}, "16 <= N <= 4096"},
		{[]string{"--namespace", "n", "--name", "x", "--bytes", "k=32", "--alphanumeric", "k=32"}, `key "k" given twice`},
		{[]string{"--namespace", "n", "--name", "x", "--label", "novalue", "--bytes", "k=32"}, "want K=V"},
	} {
		var errs bytes.Buffer
		assert.Equal(t, 2, runEnsureSecret(tc.args, &bytes.Buffer{}, &errs), tc.says)
		assert.Contains(t, errs.String(), tc.says)
	}
	c, err := parseEnsureSecretFlags([]string{"--namespace", "slurm", "--name", "k", "--bytes", "munge.key=1024",
		"--alphanumeric", "password=32", "--label", "app=slurm"}, &bytes.Buffer{})
	require.NoError(t, err)
	assert.Equal(t, []secretKey{{name: "munge.key", n: 1024}, {name: "password", n: 32, alphanumeric: true}}, c.keys)
	assert.Equal(t, map[string]string{"app": "slurm"}, c.labels)
}
