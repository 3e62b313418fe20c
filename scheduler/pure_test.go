package scheduler

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"

	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/scheduler/apis/config"
	argsscheme "github.com/onepool/onepool/scheduler/apis/config/scheme"
	configv1 "github.com/onepool/onepool/scheduler/apis/config/v1"
	"github.com/onepool/onepool/slurmrest"
)

// testKey signs the placeholder comments of the unit tests.
var testKey = []byte("0123456789abcdef0123456789abcdef")

func TestCommentRoundTripAndForgeries(t *testing.T) {
	k, err := newCommentKeys(testKey)
	require.NoError(t, err)
	pod := owner{Namespace: "ml", Name: "llama-7b-0", UID: "0b8e6a1c-1111-2222-3333-444455556666"}
	group := owner{Kind: kindPodGroup, Namespace: "ml", Name: "trio", UID: "7c1d"}
	lws := owner{Kind: kindLWS, Namespace: "ml", Name: "vllm", Index: "12", UID: "9e2f"}
	js := owner{Kind: kindJobSet, Namespace: "ml", Name: "train", Index: "workers/3", UID: "5a1b"}
	for _, o := range []owner{pod, group, lws, js} {
		got, user, ok := k.parse(k.comment(o, "team-b"))
		assert.True(t, ok, "onepool reads back its own comment %q", k.comment(o, "team-b"))
		assert.Equal(t, o, got)
		assert.Equal(t, "team-b", user)
	}
	other, err := newCommentKeys([]byte("another key, not onepool's, 32 bytes"))
	require.NoError(t, err)
	signed := k.comment(pod, "team-b")
	for name, c := range map[string]string{
		"empty":                "",
		"not onepool's":        "onepool e2e",
		"the form without sig": "onepool:pod=ml/llama-7b-0;uid=0b8e6a1c-1111-2222-3333-444455556666",
		"the old group form":   "onepool:group=ml/trio",
		"signed with another key (a Slurm user's forgery)": other.comment(pod, "team-b"),
		"another pod's uid under a copied signature":       strings.Replace(signed, "uid=0b8e", "uid=ffff", 1),
		"another name under a copied signature":            strings.Replace(signed, "llama-7b-0", "victim", 1),
		"a group's comment turned into a pod's":            strings.Replace(k.comment(group, ""), "group=", "pod=", 1),
		"an LWS group's comment turned into a PodGroup's":  strings.Replace(k.comment(lws, ""), "lws=", "group=", 1),
		"another LWS group under a copied signature":       strings.Replace(k.comment(lws, ""), "vllm/12", "vllm/13", 1),
		"an LWS group without its index":                   "onepool:lws=ml/vllm;uid=9e2f;user=;sig=AAAAAAAAAAAAAAAAAAAAAA",
		"another restart attempt under a copied signature": strings.Replace(k.comment(js, ""), "workers/3", "workers/4", 1),
		"a JobSet gang without its attempt":                "onepool:jobset=ml/train/workers;uid=5a1b;user=;sig=AAAAAAAAAAAAAAAAAAAAAA",
		"another user under a copied signature":            strings.Replace(signed, "user=team-b", "user=team-a", 1),
		"a cut signature":                                  signed[:len(signed)-2],
		"a signature that is not base64":                   strings.SplitAfter(signed, ";sig=")[0] + "!!!!!!!!!!!!!!!!!!!!!!",
		"no namespace":                                     "onepool:pod=/x;uid=1;sig=AAAAAAAAAAAAAAAAAAAAAA",
		"another prefix":                                   strings.Replace(signed, "onepool:", "other:", 1),
	} {
		o, _, ok := k.parse(c)
		assert.False(t, ok, "%s: parse(%q) = %+v, want not onepool's", name, c, o)
	}
	// A rotation: comments signed with the previous key are still read,
	// new ones are signed with the current key.
	rotated, err := newCommentKeys([]byte("the next key, at least 32 bytes long"), testKey)
	require.NoError(t, err)
	got, _, ok := rotated.parse(signed)
	assert.True(t, ok, "a comment signed with the previous key")
	assert.Equal(t, pod, got)
	_, _, ok = k.parse(rotated.comment(pod, "team-b"))
	assert.False(t, ok, "the old key does not read what the new one signed")
	_, err = newCommentKeys([]byte("short"))
	assert.Error(t, err, "a short key is refused")
}

func podWith(ann map[string]string, gpus int64, cpu, mem string) *corev1.Pod {
	req := corev1.ResourceList{}
	if cpu != "" {
		req[corev1.ResourceCPU] = resource.MustParse(cpu)
	}
	if mem != "" {
		req[corev1.ResourceMemory] = resource.MustParse(mem)
	}
	lim := corev1.ResourceList{}
	if gpus > 0 {
		lim[ResourceGPU] = *resource.NewQuantity(gpus, resource.DecimalSI)
		req[ResourceGPU] = *resource.NewQuantity(gpus, resource.DecimalSI)
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u1", Annotations: ann},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Requests: req, Limits: lim}}}},
	}
}

func testArgs(t *testing.T) *Args {
	a, err := decodeArgs(`{"slurmrestURL":"http://slurmrestd:6820","tokenFile":"/t","placeholderKeySecret":"onepool-system/onepool-placeholder-key","releaseURL":"http://onepool:10270","defaultPartition":"main"}`)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// decodeArgs reads v1 OnepoolArgs (JSON or YAML) as the framework does
// (strictly, defaulted, converted to the internal version), then as the
// plugin's factory does.
func decodeArgs(raw string) (*Args, error) {
	s := runtime.NewScheme()
	if err := argsscheme.AddToScheme(s); err != nil {
		return nil, err
	}
	gvk := configv1.SchemeGroupVersion.WithKind("OnepoolArgs")
	obj, _, err := serializer.NewCodecFactory(s, serializer.EnableStrict).UniversalDecoder(config.SchemeGroupVersion).Decode([]byte(raw), &gvk, nil)
	if err != nil {
		return nil, err
	}
	return argsFrom(obj)
}

func TestRequestFor(t *testing.T) {
	a := testArgs(t)
	capped := *a
	capped.MaxTimeLimit = metav1.Duration{Duration: 4 * time.Hour}
	for _, tc := range []struct {
		name string
		args *Args
		pod  *corev1.Pod
		want request
		err  string
	}{
		{name: "defaults", args: a, pod: podWith(nil, 1, "100m", "64Mi"),
			want: request{Partition: "main", GPUs: 1, CPUs: 1, MemoryMB: 64}},
		{name: "annotations", args: a, pod: podWith(map[string]string{keys.AnnotationJobQOS: "high", keys.AnnotationJobPartition: "gpu", keys.AnnotationJobAccount: "ml-team", keys.AnnotationJobTimeLimit: "90m"}, 8, "2500m", "1Gi"),
			want: request{Partition: "gpu", QOS: "high", Account: "ml-team", TimeLimit: 90 * time.Minute, GPUs: 8, CPUs: 3, MemoryMB: 1024}},
		{name: "no requests", args: a, pod: podWith(nil, 0, "", ""), want: request{Partition: "main", CPUs: 1}},
		{name: "bad qos", args: a, pod: podWith(map[string]string{keys.AnnotationJobQOS: "high qos"}, 1, "", ""), err: keys.AnnotationJobQOS},
		{name: "bad time", args: a, pod: podWith(map[string]string{keys.AnnotationJobTimeLimit: "soon"}, 1, "", ""), err: keys.AnnotationJobTimeLimit},
		{name: "time too short", args: a, pod: podWith(map[string]string{keys.AnnotationJobTimeLimit: "30s"}, 1, "", ""), err: "at least 1m"},
		{name: "cap applies as default", args: &capped, pod: podWith(nil, 1, "", ""), want: request{Partition: "main", GPUs: 1, CPUs: 1, TimeLimit: 4 * time.Hour}},
		{name: "over the cap", args: &capped, pod: podWith(map[string]string{keys.AnnotationJobTimeLimit: "5h"}, 1, "", ""), err: "exceeds the maximum"},
		{name: "unlimited", args: a, pod: podWith(map[string]string{keys.AnnotationJobTimeLimit: "UNLIMITED"}, 1, "", ""),
			want: request{Partition: "main", GPUs: 1, CPUs: 1, TimeLimit: slurmrest.UnlimitedTime}},
		{name: "infinite, Slurm's other word, any case", args: a, pod: podWith(map[string]string{keys.AnnotationJobTimeLimit: " infinite "}, 1, "", ""),
			want: request{Partition: "main", GPUs: 1, CPUs: 1, TimeLimit: slurmrest.UnlimitedTime}},
		{name: "unlimited over the cap", args: &capped, pod: podWith(map[string]string{keys.AnnotationJobTimeLimit: "UNLIMITED"}, 1, "", ""), err: "UNLIMITED: exceeds the maximum 4h0m0s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := requestFor(tc.pod, tc.args)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want one naming %q", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("requestFor = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func TestJobFor(t *testing.T) {
	a := testArgs(t)
	o := owner{Kind: kindPodGroup, Namespace: "ml", Name: "trio"}
	j := jobFor(o, "onepool:group=ml/trio", request{Partition: "main", QOS: "high", GPUs: 8, CPUs: 4, MemoryMB: 2048}, 3, a, "#!/bin/bash\n")
	if j.Nodes != "3" || j.Tasks != 3 || j.TresPerNode != "gres/gpu:8" || j.CPUsPerTask != 4 || j.MemoryPerNodeMB != 2048 ||
		j.QOS != "high" || !j.NoRequeue || j.Comment != "onepool:group=ml/trio" || j.Name != "onepool/ml/trio" {
		t.Fatalf("jobFor = %+v", j)
	}
	if j := jobFor(o, "", request{CPUs: 1}, 1, a, "x"); j.TresPerNode != "" {
		t.Errorf("a pod without GPUs asks %q", j.TresPerNode)
	}
}

func TestDecodeArgs(t *testing.T) {
	a, err := decodeArgs(`{"apiVersion":"kubescheduler.config.k8s.io/v1","kind":"OnepoolArgs","slurmrestURL":"http://s:6820","tokenFile":"/t","placeholderKeySecret":"onepool-system/onepool-placeholder-key","releaseURL":"http://10.0.0.1:10270"}`)
	if err != nil {
		t.Fatal(err)
	}
	if a.RequestTimeout.Duration != 10*time.Second || a.PollInterval.Duration != time.Second || a.StaleAfter.Duration != 30*time.Second ||
		a.StartPollInterval.Duration != 100*time.Millisecond || a.SubmitWorkers != 16 || a.JobListInterval.Duration != 10*time.Second || a.WorkDir != "/tmp" || a.ReleaseListenAddress != ":10270" {
		t.Errorf("defaults not applied: %+v", a)
	}
	for name, raw := range map[string]string{
		"unknown field":    `{"slurmrestURL":"http://s:6820","tokenFile":"/t","placeholderKeySecret":"onepool-system/onepool-placeholder-key","releaseURL":"http://h:1","partiton":"x"}`,
		"no url":           `{"tokenFile":"/t","placeholderKeySecret":"onepool-system/onepool-placeholder-key","releaseURL":"http://h:1"}`,
		"no token":         `{"slurmrestURL":"http://s:6820","releaseURL":"http://h:1"}`,
		"no key secret":    `{"slurmrestURL":"http://s:6820","tokenFile":"/t","releaseURL":"http://h:1"}`,
		"key secret name":  `{"slurmrestURL":"http://s:6820","tokenFile":"/t","placeholderKeySecret":"just-a-name","releaseURL":"http://h:1"}`,
		"https release":    `{"slurmrestURL":"http://s:6820","tokenFile":"/t","placeholderKeySecret":"onepool-system/onepool-placeholder-key","releaseURL":"https://h:1"}`,
		"release no port":  `{"slurmrestURL":"http://s:6820","tokenFile":"/t","placeholderKeySecret":"onepool-system/onepool-placeholder-key","releaseURL":"http://h"}`,
		"bad qos":          `{"slurmrestURL":"http://s:6820","tokenFile":"/t","placeholderKeySecret":"onepool-system/onepool-placeholder-key","releaseURL":"http://h:1","defaultQOS":"a b"}`,
		"stale < 2 polls":  `{"slurmrestURL":"http://s:6820","tokenFile":"/t","placeholderKeySecret":"onepool-system/onepool-placeholder-key","releaseURL":"http://h:1","pollInterval":"10s","staleAfter":"15s"}`,
		"other version":    `{"apiVersion":"onepool.dev/v1alpha1","kind":"OnepoolArgs","slurmrestURL":"http://s:6820","tokenFile":"/t","placeholderKeySecret":"onepool-system/onepool-placeholder-key","releaseURL":"http://h:1"}`,
		"relative wd":      `{"slurmrestURL":"http://s:6820","tokenFile":"/t","placeholderKeySecret":"onepool-system/onepool-placeholder-key","releaseURL":"http://h:1","workDir":"tmp"}`,
		"too many workers": `{"slurmrestURL":"http://s:6820","tokenFile":"/t","placeholderKeySecret":"onepool-system/onepool-placeholder-key","releaseURL":"http://h:1","submitWorkers":65}`,
		"token and key":    `{"slurmrestURL":"http://s:6820","tokenFile":"/t","jwtKeyFile":"/k","placeholderKeySecret":"onepool-system/onepool-placeholder-key","releaseURL":"http://h:1"}`,
		"token lifetime":   `{"slurmrestURL":"http://s:6820","jwtKeyFile":"/k","tokenLifetime":"2160h","placeholderKeySecret":"onepool-system/onepool-placeholder-key","releaseURL":"http://h:1"}`,
	} {
		if _, err := decodeArgs(raw); err == nil {
			t.Errorf("%s: accepted %s", name, raw)
		}
	}
	y := "slurmrestURL: http://s:6820\ntokenFile: /t\nplaceholderKeySecret: onepool-system/k\nreleaseURL: http://h:1\n"
	if _, err := decodeArgs(y); err != nil {
		t.Errorf("YAML args: %v", err)
	}
	minted, err := decodeArgs("slurmrestURL: https://s:6820\njwtKeyFile: /k\nslurmrestCAFile: /ca.pem\nplaceholderKeySecret: onepool-system/k\nreleaseURL: http://h:1\n")
	if err != nil || minted.TokenUser != "slurm" || minted.TokenLifetime.Duration != time.Hour || minted.SlurmrestCAFile != "/ca.pem" {
		t.Errorf("minted-token args: %+v, %v; want user slurm, lifetime 1h, the CA file", minted, err)
	}
	if _, err := argsFrom(&runtime.Unknown{Raw: []byte(`{}`)}); err == nil || !strings.Contains(err.Error(), "kubescheduler.config.k8s.io/v1") {
		t.Errorf("args the framework did not decode: %v", err)
	}
}

func TestExplainRejection(t *testing.T) {
	apiErr := func(errno int) error {
		return &slurmrest.APIError{Op: "submit job", StatusCode: 500, Kind: slurmrest.ErrSlurm,
			Errors: []slurmrest.SlurmError{{Errno: errno, Description: "Batch job submission failed"}}}
	}
	req := request{Partition: "nope", QOS: "gold", Account: "ml", TimeLimit: 48 * time.Hour, GPUs: 9, CPUs: 2}
	annotated := podWith(map[string]string{"slurm.onepool.dev/partition": "nope", "slurm.onepool.dev/qos": "gold"}, 9, "2", "")
	plain := podWith(nil, 9, "2", "")
	for _, tc := range []struct {
		name  string
		err   error
		pod   *corev1.Pod
		offer offer
		want  []string
	}{
		{"partition from the annotation", apiErr(2000), annotated, offer{}, []string{`partition "nope" does not exist in Slurm (from annotation slurm.onepool.dev/partition)`, "slurm error 2000"}},
		{"partition from the default", apiErr(2000), plain, offer{}, []string{`partition "nope" does not exist`, "the scheduler's defaultPartition"}},
		{"qos", apiErr(2066), annotated, offer{}, []string{`QOS "gold"`, "annotation slurm.onepool.dev/qos"}},
		{"account", apiErr(2045), plain, offer{}, []string{`account "ml"`, "defaultAccount"}},
		{"time limit", apiErr(2051), plain, offer{}, []string{"time limit 48h0m0s"}},
		{"never runnable, what fits", apiErr(2014), plain, offer{GPUs: 8, CPUs: 64}, []string{`Slurm can never run it: no node in partition "nope" has 9 nvidia.com/gpu, 2 CPUs for one pod; the largest node offers 8 nvidia.com/gpu`}},
		{"never runnable, nothing known", apiErr(2014), plain, offer{}, []string{"Slurm can never run it", "for one pod: slurmrest"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := explainRejection(tc.err, tc.pod, req, tc.offer, nil)
			if !errors.Is(got, slurmrest.ErrSlurm) {
				t.Errorf("the Slurm error is no longer wrapped: %v", got)
			}
			for _, w := range tc.want {
				if !strings.Contains(got.Error(), w) {
					t.Errorf("%q lacks %q", got, w)
				}
			}
		})
	}
	plainErr := errors.New("connection refused")
	if got := explainRejection(plainErr, plain, req, offer{}, nil); got != plainErr {
		t.Errorf("an error without Slurm numbers changed: %v", got)
	}
	if got := explainRejection(apiErr(2999), plain, req, offer{}, nil); got.Error() != apiErr(2999).Error() {
		t.Errorf("an unknown Slurm number gained words: %v", got)
	}
}
