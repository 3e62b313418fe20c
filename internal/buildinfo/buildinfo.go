// Package buildinfo tells which build of onepool a binary is: its
// version, the commit it was built from and the Go that built it, read
// from what the Go toolchain embeds (no ldflags needed), and exported as
// the conventional onepool_build_info gauge.
package buildinfo

import (
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// MetricName is the build info gauge's name.
const MetricName = "onepool_build_info"

// version may be set at link time (-ldflags "-X
// github.com/onepool/onepool/internal/buildinfo.version=v0.3.0"); empty:
// the module version Go recorded, or the commit.
var version string

// Info is what a binary knows of its own build.
type Info struct {
	// Version is a release version where one was given at link time, else
	// the module's version, else "devel".
	Version string
	// Revision is the commit it was built from ("unknown" without VCS
	// information, e.g. a build outside a git checkout); Modified says the
	// checkout had uncommitted changes.
	Revision string
	Modified bool
	// GoVersion is the Go toolchain that built it.
	GoVersion string
}

// Read returns this binary's build info.
func Read() Info {
	bi, ok := debug.ReadBuildInfo()
	return fromBuildInfo(bi, ok, version)
}

// fromBuildInfo is Read's decision, apart from the running binary.
func fromBuildInfo(bi *debug.BuildInfo, ok bool, linked string) Info {
	in := Info{Version: "devel", Revision: "unknown", GoVersion: runtime.Version()}
	if ok && bi != nil {
		if v := bi.Main.Version; v != "" && v != "(devel)" {
			in.Version = v
		}
		if bi.GoVersion != "" {
			in.GoVersion = bi.GoVersion
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				in.Revision = s.Value
			case "vcs.modified":
				in.Modified = s.Value == "true"
			}
		}
	}
	if linked != "" {
		in.Version = linked
	}
	return in
}

// String is the build in one word for logs and --version:
// "devel (3f2a9c1e0b7d, modified, go1.25.3)".
func (i Info) String() string {
	rev := i.Revision
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if i.Modified {
		rev += ", modified"
	}
	return i.Version + " (" + rev + ", " + i.GoVersion + ")"
}

// Collector is onepool_build_info{component,version,revision,go_version} 1,
// the series dashboards join on to tell which build runs where.
func Collector(component string) prometheus.Collector {
	return CollectorOf(component, Read())
}

// CollectorOf is Collector for a given build.
func CollectorOf(component string, in Info) prometheus.Collector {
	rev := in.Revision
	if in.Modified {
		rev += "-modified"
	}
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: MetricName,
		Help: "A constant 1 labelled with the component and the build running it: version, revision (the commit; -modified for a build with uncommitted changes) and go_version.",
		ConstLabels: prometheus.Labels{
			"component": component, "version": in.Version, "revision": rev, "go_version": in.GoVersion,
		},
	})
	g.Set(1)
	return g
}
