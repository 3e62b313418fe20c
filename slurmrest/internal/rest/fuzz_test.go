package rest

import (
	"os"
	"path/filepath"
	"testing"
)

func seed(f *testing.F, pattern string) {
	files, err := filepath.Glob(filepath.Join("testdata", "*", pattern)) // every version's answers
	if err != nil || len(files) == 0 {
		f.Fatalf("no seeds for %s", pattern)
	}
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
}

// Whatever slurmrestd (or something in its place) sends, decoding returns
// nodes or an error: it never panics, and every node has a name.
func FuzzDecodeNodes(f *testing.F) {
	seed(f, "node*.json")
	f.Fuzz(func(t *testing.T, body []byte) {
		nodes, _, err := DecodeNodes(body)
		if err != nil {
			return
		}
		for _, n := range nodes {
			if n.Name == "" {
				t.Fatal("decoded a node without a name")
			}
			_ = n.State.Base()
		}
		_, _ = DecodeErrors(body)
	})
}

// Like FuzzDecodeNodes for job listings and the /jobs/state answer.
func FuzzDecodeJobs(f *testing.F) {
	seed(f, "job*.json")
	f.Fuzz(func(t *testing.T, body []byte) {
		if jobs, _, err := DecodeJobs(body); err == nil {
			for _, j := range jobs {
				if j.ID == 0 {
					t.Fatal("decoded a job without an id")
				}
				_ = j.State.Finished()
			}
		}
		if states, err := DecodeJobStates(body); err == nil {
			for _, s := range states {
				if s.ID == 0 {
					t.Fatal("decoded a job state without an id")
				}
			}
		}
	})
}
