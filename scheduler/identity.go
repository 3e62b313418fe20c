package scheduler

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/onepool/onepool/keys"
	"github.com/onepool/onepool/slurmrest"
)

// owner is what one placeholder job holds a place for: a single pod, or
// a gang placed as one multi-node job: all pods of a PodGroup, one group
// (leader and workers) of a LeaderWorkerSet, or one replicated job of a
// JobSet that asks for it (keys.AnnotationGang).
type owner struct {
	Kind      ownerKind
	Namespace string
	Name      string // the pod's, the PodGroup's, the LeaderWorkerSet's or the JobSet's name
	// Index is a LeaderWorkerSet group's index (digits), or a JobSet's
	// replicated job and restart attempt ("<replicated job>/<attempt>");
	// empty otherwise.
	Index string
	// UID is the pod's, or the PodGroup's or LeaderWorkerSet's once read
	// (a group owner made from a pod has none; its key does not need one).
	UID types.UID
}

// ownerKind says what an owner is.
type ownerKind int

const (
	kindPod ownerKind = iota
	kindPodGroup
	kindLWS
	kindJobSet
)

// group is true for an owner of several pods.
func (o owner) group() bool { return o.Kind != kindPod }

// ownerOf returns the owner a pod belongs to. A PodGroup's label comes
// first: a pod that names one asked for that gang.
func ownerOf(pod *corev1.Pod) owner {
	if g := pod.Labels[keys.LabelPodGroup]; g != "" {
		return owner{Kind: kindPodGroup, Namespace: pod.Namespace, Name: g}
	}
	if n, i := pod.Labels[keys.LabelLWSName], pod.Labels[keys.LabelLWSGroupIndex]; n != "" && digits(i) {
		return owner{Kind: kindLWS, Namespace: pod.Namespace, Name: n, Index: i}
	}
	if pod.Annotations[keys.AnnotationGang] == keys.GangReplicatedJob {
		n, r, a := pod.Labels[keys.LabelJobSetName], pod.Labels[keys.LabelJobSetReplicatedJob], pod.Labels[keys.LabelJobSetRestartAttempt]
		if n != "" && r != "" && !strings.ContainsAny(r, "/;") && digits(a) {
			return owner{Kind: kindJobSet, Namespace: pod.Namespace, Name: n, Index: r + "/" + a}
		}
	}
	return owner{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID}
}

func digits(s string) bool {
	return s != "" && len(s) <= 9 && strings.Trim(s, "0123456789") == ""
}

// selector is the labels every pod of a group owner carries.
func (o owner) selector() labels.Set {
	switch o.Kind {
	case kindPodGroup:
		return labels.Set{keys.LabelPodGroup: o.Name}
	case kindLWS:
		return labels.Set{keys.LabelLWSName: o.Name, keys.LabelLWSGroupIndex: o.Index}
	case kindJobSet:
		r, a := o.replicatedJob()
		return labels.Set{keys.LabelJobSetName: o.Name, keys.LabelJobSetReplicatedJob: r, keys.LabelJobSetRestartAttempt: a}
	}
	return nil
}

// replicatedJob is a JobSet owner's replicated job and restart attempt.
func (o owner) replicatedJob() (name, attempt string) {
	name, attempt, _ = strings.Cut(o.Index, "/")
	return name, attempt
}

// has says whether pod is one of the owner's.
func (o owner) has(pod *corev1.Pod) bool {
	if !o.group() {
		return pod.UID == o.UID
	}
	return pod.Namespace == o.Namespace && ownerOf(pod).key() == o.key()
}

// key identifies the owner in maps and work queues.
func (o owner) key() string {
	switch o.Kind {
	case kindPodGroup:
		return "group/" + o.Namespace + "/" + o.Name
	case kindLWS:
		return "lws/" + o.Namespace + "/" + o.Name + "/" + o.Index
	case kindJobSet:
		return "jobset/" + o.Namespace + "/" + o.Name + "/" + o.Index
	}
	return "pod/" + string(o.UID)
}

func (o owner) String() string {
	switch o.Kind {
	case kindPodGroup:
		return "PodGroup " + o.Namespace + "/" + o.Name
	case kindLWS:
		return "LeaderWorkerSet " + o.Namespace + "/" + o.Name + " group " + o.Index
	case kindJobSet:
		r, a := o.replicatedJob()
		return "JobSet " + o.Namespace + "/" + o.Name + " replicated job " + r + " (restart attempt " + a + ")"
	}
	return "pod " + o.Namespace + "/" + o.Name
}

// The job's comment names its owner; onepool finds its placeholder jobs,
// after a restart too, by this prefix.
const commentPrefix = keys.PlaceholderCommentPrefix

// path is the owner as namespace/name, and /index for a LeaderWorkerSet
// group or a JobSet's replicated job: in its job's name and comment.
func (o owner) path() string {
	if o.Kind == kindLWS || o.Kind == kindJobSet {
		return o.Namespace + "/" + o.Name + "/" + o.Index
	}
	return o.Namespace + "/" + o.Name
}

// jobName is the placeholder job's name as squeue shows it.
func (o owner) jobName() string { return "onepool/" + o.path() }

// bodyKinds are the words a comment's body starts with, by kind.
var bodyKinds = []struct {
	kind ownerKind
	word string
}{{kindPod, "pod="}, {kindPodGroup, "group="}, {kindLWS, "lws="}, {kindJobSet, "jobset="}}

// body is what a placeholder's comment says of its owner: its kind,
// namespace, name (and group index) and uid.
func (o owner) body() string {
	word := ""
	for _, k := range bodyKinds {
		if k.kind == o.Kind {
			word = k.word
		}
	}
	return fmt.Sprintf("%s%s;uid=%s", word, o.path(), o.UID)
}

// parseBody reads an owner back from a comment's body; ok is false for
// anything onepool would not have written.
func parseBody(b string) (owner, bool) {
	o := owner{}
	var rest string
	ok := false
	for _, k := range bodyKinds {
		if rest, ok = strings.CutPrefix(b, k.word); ok {
			o.Kind = k.kind
			break
		}
	}
	if !ok {
		return owner{}, false
	}
	path, uid, ok := strings.Cut(rest, ";uid=")
	if !ok || uid == "" || strings.ContainsAny(uid, "/;") {
		return owner{}, false
	}
	parts := strings.Split(path, "/")
	want := map[ownerKind]int{kindLWS: 3, kindJobSet: 4}[o.Kind]
	if want == 0 {
		want = 2
	}
	if len(parts) != want || slices.Contains(parts, "") || strings.Contains(parts[1], ";") {
		return owner{}, false
	}
	switch o.Kind {
	case kindLWS:
		if !digits(parts[2]) {
			return owner{}, false
		}
		o.Index = parts[2]
	case kindJobSet:
		if strings.Contains(parts[2], ";") || !digits(parts[3]) {
			return owner{}, false
		}
		o.Index = parts[2] + "/" + parts[3]
	}
	o.Namespace, o.Name, o.UID = parts[0], parts[1], types.UID(uid)
	return o, true
}

// sigLen is the length in bytes of a comment's signature (HMAC-SHA256
// cut to 128 bits: a forgery needs the key, not luck).
const sigLen = 16

// commentKeys prove that onepool made a placeholder job: its comment ends
// with an HMAC over the body, keyed by a secret only onepool's scheduler
// holds. Anyone can copy a comment, no one can make one for another pod;
// a copy of a live placeholder's comment is a second job for the same
// owner, and onepool keeps the older (its own) and cancels the copy.
type commentKeys struct {
	sign   []byte   // signs new comments
	accept [][]byte // every key a comment may be signed with (sign first)
}

// newCommentKeys returns keys that sign with current and also accept
// comments signed with previous (a rotation); empty previous ones are
// skipped.
func newCommentKeys(current []byte, previous ...[]byte) (*commentKeys, error) {
	if len(current) < minKeyLen {
		return nil, fmt.Errorf("the placeholder signing key has %d bytes, want at least %d", len(current), minKeyLen)
	}
	k := &commentKeys{sign: current, accept: [][]byte{current}}
	for _, p := range previous {
		if len(p) >= minKeyLen {
			k.accept = append(k.accept, p)
		}
	}
	return k, nil
}

// minKeyLen is the shortest signing key accepted, in bytes.
const minKeyLen = 32

func mac(key []byte, body string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(body))
	return m.Sum(nil)[:sigLen]
}

// comment encodes the owner and the Slurm user the job runs as, signed,
// into a job's comment. The user is signed with it because a Slurm user
// may set any comment on a job of their own: a copy of another
// placeholder's comment on a job of another user does not verify
// (jobOf), and a job's own user is the only one who could copy its
// comment onto another of their jobs.
func (k *commentKeys) comment(o owner, user string) string {
	b := o.body() + ";user=" + user
	return commentPrefix + b + ";sig=" + base64.RawURLEncoding.EncodeToString(mac(k.sign, b))
}

// parse reads the owner and the Slurm user from a job's comment; ok is
// false unless onepool signed it (a job a Slurm user made with a comment
// of onepool's form).
func (k *commentKeys) parse(c string) (owner, string, bool) {
	rest, ok := strings.CutPrefix(c, commentPrefix)
	if !ok {
		return owner{}, "", false
	}
	i := strings.LastIndex(rest, ";sig=")
	if i < 0 {
		return owner{}, "", false
	}
	signed := rest[:i]
	sig, err := base64.RawURLEncoding.DecodeString(rest[i+len(";sig="):])
	if err != nil || len(sig) != sigLen {
		return owner{}, "", false
	}
	b, user, ok := strings.Cut(signed, ";user=")
	if !ok || strings.Contains(user, ";") {
		return owner{}, "", false
	}
	o, ok := parseBody(b)
	if !ok {
		return owner{}, "", false
	}
	for _, key := range k.accept {
		if hmac.Equal(sig, mac(key, signed)) {
			return o, user, true
		}
	}
	return owner{}, "", false
}

// jobOwner is the owner of job j if it is onepool's placeholder: its
// comment verifies and names the user the job runs as.
func (k *commentKeys) jobOwner(j slurmrest.Job) (owner, bool) {
	o, user, ok := k.parse(j.Comment)
	if !ok || (user != "" && j.User != user) {
		return owner{}, false
	}
	return o, true
}
