package buildinfo

import (
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestFromBuildInfo(t *testing.T) {
	vcs := func(rev, modified string) []debug.BuildSetting {
		return []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: modified}}
	}
	tests := []struct {
		name   string
		bi     *debug.BuildInfo
		ok     bool
		linked string
		want   Info
	}{
		{"no build info", nil, false, "", Info{Version: "devel", Revision: "unknown", GoVersion: goVersion()}},
		{"a checkout's build", &debug.BuildInfo{GoVersion: "go1.25.3", Main: debug.Module{Version: "(devel)"}, Settings: vcs("3f2a9c1e0b7d55aa", "false")}, true, "",
			Info{Version: "devel", Revision: "3f2a9c1e0b7d55aa", GoVersion: "go1.25.3"}},
		{"uncommitted changes", &debug.BuildInfo{GoVersion: "go1.25.3", Settings: vcs("3f2a9c1e", "true")}, true, "",
			Info{Version: "devel", Revision: "3f2a9c1e", Modified: true, GoVersion: "go1.25.3"}},
		{"go install of a tag", &debug.BuildInfo{GoVersion: "go1.25.3", Main: debug.Module{Version: "v0.3.0"}}, true, "",
			Info{Version: "v0.3.0", Revision: "unknown", GoVersion: "go1.25.3"}},
		{"version given at link time wins", &debug.BuildInfo{GoVersion: "go1.25.3", Main: debug.Module{Version: "v0.3.0"}, Settings: vcs("abc", "false")}, true, "v0.4.0-rc.1",
			Info{Version: "v0.4.0-rc.1", Revision: "abc", GoVersion: "go1.25.3"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, fromBuildInfo(tt.bi, tt.ok, tt.linked))
		})
	}
}

func goVersion() string { return runtime.Version() }

func TestString(t *testing.T) {
	in := Info{Version: "devel", Revision: "3f2a9c1e0b7d55aa66", Modified: true, GoVersion: "go1.25.3"}
	assert.Equal(t, "devel (3f2a9c1e0b7d, modified, go1.25.3)", in.String())
	assert.Equal(t, "v1 (unknown, go1.25.3)", Info{Version: "v1", Revision: "unknown", GoVersion: "go1.25.3"}.String())
}

func TestCollector(t *testing.T) {
	c := CollectorOf("scheduler", Info{Version: "v0.3.0", Revision: "abc", Modified: true, GoVersion: "go1.25.3"})
	want := `# HELP onepool_build_info A constant 1 labelled with the component and the build running it: version, revision (the commit; -modified for a build with uncommitted changes) and go_version.
# TYPE onepool_build_info gauge
onepool_build_info{component="scheduler",go_version="go1.25.3",revision="abc-modified",version="v0.3.0"} 1
`
	require.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(want), MetricName))
	// The running test binary's own build has a Go version.
	assert.Equal(t, 1, testutil.CollectAndCount(Collector("x"), MetricName))
	assert.NotEmpty(t, Read().GoVersion)
}
