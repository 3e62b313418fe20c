package v1

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SetDefaults_OnepoolArgs fills what a config leaves out.
func SetDefaults_OnepoolArgs(a *OnepoolArgs) { //nolint:revive // the name defaulter-gen looks for
	def := func(d **metav1.Duration, v time.Duration) {
		if *d == nil || (*d).Duration == 0 {
			*d = &metav1.Duration{Duration: v}
		}
	}
	def(&a.RequestTimeout, 10*time.Second)
	def(&a.PollInterval, time.Second)
	def(&a.StaleAfter, 30*time.Second)
	def(&a.JobListInterval, 10*time.Second)
	def(&a.StartPollInterval, 100*time.Millisecond)
	def(&a.WatchInterval, 250*time.Millisecond)
	def(&a.TokenLifetime, time.Hour)
	if a.TokenUser == nil || *a.TokenUser == "" {
		a.TokenUser = ptr("slurm")
	}
	if a.ReleaseListenAddress == nil || *a.ReleaseListenAddress == "" {
		a.ReleaseListenAddress = ptr(":10270")
	}
	if a.SubmitWorkers == nil || *a.SubmitWorkers == 0 {
		a.SubmitWorkers = ptr[int32](16)
	}
	if a.WorkDir == nil || *a.WorkDir == "" {
		a.WorkDir = ptr("/tmp")
	}
}

func ptr[T any](v T) *T { return &v }
