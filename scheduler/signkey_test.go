package scheduler

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2"

	"github.com/onepool/onepool/keys"
)

const keyRef = "onepool-system/placeholder-key"

func keySecret(data map[string][]byte) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "onepool-system", Name: "placeholder-key"}, Data: data}
}

// The first scheduler makes the signing key; every later one (and a
// restart) reads the same key, so comments signed before still verify.
func TestLoadCommentKeysMakesTheKeyOnceAndKeepsIt(t *testing.T) {
	ctx := context.Background()
	kube := fake.NewSimpleClientset()
	first, err := loadCommentKeys(ctx, kube, keyRef)
	require.NoError(t, err)
	s, err := kube.CoreV1().Secrets("onepool-system").Get(ctx, "placeholder-key", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Len(t, s.Data[keys.PlaceholderKeyData], minKeyLen, "32 random bytes")
	assert.Equal(t, "scheduler", s.Labels[keys.LabelComponent])

	again, err := loadCommentKeys(ctx, kube, keyRef)
	require.NoError(t, err)
	pod := owner{Namespace: "ns", Name: "p", UID: "u1"}
	_, _, ok := again.parse(first.comment(pod, "team-a"))
	assert.True(t, ok, "a restarted scheduler reads what the first signed")
	creates := 0
	for _, a := range kube.Actions() {
		if a.GetVerb() == "create" {
			creates++
		}
	}
	assert.Equal(t, 1, creates, "an existing key is never replaced")
}

// A rotation: the Secret's previous key still verifies, the current key
// signs.
func TestLoadCommentKeysReadsARotation(t *testing.T) {
	old, cur := []byte(strings.Repeat("o", 32)), []byte(strings.Repeat("n", 32))
	kube := fake.NewSimpleClientset(keySecret(map[string][]byte{keys.PlaceholderKeyData: cur, keys.PlaceholderKeyPrevious: old}))
	k, err := loadCommentKeys(context.Background(), kube, keyRef)
	require.NoError(t, err)
	prev, err := newCommentKeys(old)
	require.NoError(t, err)
	pod := owner{Namespace: "ns", Name: "p", UID: "u1"}
	_, _, ok := k.parse(prev.comment(pod, ""))
	assert.True(t, ok, "signed before the rotation")
	_, _, ok = prev.parse(k.comment(pod, ""))
	assert.False(t, ok, "new comments are signed with the new key")
}

// Another replica made the Secret between this one's read and its create:
// this one reads that key rather than failing or making its own.
func TestLoadCommentKeysLosesTheRaceGracefully(t *testing.T) {
	theirs := []byte(strings.Repeat("t", 32))
	kube := fake.NewSimpleClientset()
	kube.PrependReactor("create", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
		require.NoError(t, kube.Tracker().Add(keySecret(map[string][]byte{keys.PlaceholderKeyData: theirs})))
		return true, nil, apierrors.NewAlreadyExists(schema.GroupResource{Resource: "secrets"}, "placeholder-key")
	})
	k, err := loadCommentKeys(context.Background(), kube, keyRef)
	require.NoError(t, err)
	assert.Equal(t, theirs, k.sign)
}

func TestLoadCommentKeysRefusals(t *testing.T) {
	for _, tc := range []struct {
		name string
		ref  string
		objs []runtime.Object
		want string
	}{
		{name: "not namespace/name", ref: "placeholder-key", want: `placeholder key Secret "placeholder-key"`},
		{name: "a short key", ref: keyRef, objs: []runtime.Object{keySecret(map[string][]byte{keys.PlaceholderKeyData: []byte("short")})},
			want: "has 5 bytes, want at least 32"},
		{name: "no key in the Secret", ref: keyRef, objs: []runtime.Object{keySecret(nil)}, want: "has 0 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := loadCommentKeys(context.Background(), fake.NewSimpleClientset(tc.objs...), tc.ref)
			assert.ErrorContains(t, err, tc.want)
		})
	}
	secret := []byte("a-secret-that-must-not-be-shown")
	_, err := loadCommentKeys(context.Background(), fake.NewSimpleClientset(keySecret(map[string][]byte{keys.PlaceholderKeyData: secret})), keyRef)
	require.Error(t, err)
	assert.NotContains(t, err.Error(), string(secret), "errors name the Secret, never its contents")
}

// Without the key no job can be told onepool's: Run waits for it, asking
// again, and gives up only when its context ends.
func TestWaitForKeyRetriesUntilTheSecretCanBeRead(t *testing.T) {
	f := newCoreFixture(t)
	f.core.proof = nil
	f.core.log = klog.Background()
	kube := fake.NewSimpleClientset()
	fails := 1
	kube.PrependReactor("get", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
		if fails > 0 {
			fails--
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, "placeholder-key", nil)
		}
		return false, nil, nil
	})
	f.core.kube = kube
	f.core.life.kube = kube
	f.core.rel.kube = kube
	f.core.args.PlaceholderKeySecret = keyRef
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.True(t, f.core.waitForKey(ctx))
	require.NotNil(t, f.core.proof)

	f.core.proof = nil
	f.core.args.PlaceholderKeySecret = "not a reference"
	ctx, cancel = context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	assert.False(t, f.core.waitForKey(ctx), "its context ended first")
	assert.Nil(t, f.core.proof)
}
