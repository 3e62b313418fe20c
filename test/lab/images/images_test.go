package images

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onepool/onepool/test/lab/rootfs"
)

// dockerStage is what one stage of the Dockerfile installs and sets.
type dockerStage struct {
	parent     string
	packages   []string
	copies     []string // destinations of COPY from the build stage or build/slurm
	entrypoint []string
	user       string
}

// parseDockerfile reads the stages of the repository's Dockerfile:
// FROM ... AS, apt-get install, COPY, USER and ENTRYPOINT.
func parseDockerfile(t *testing.T) map[string]*dockerStage {
	t.Helper()
	b, err := os.ReadFile("../../../Dockerfile")
	require.NoError(t, err)
	text := strings.ReplaceAll(string(b), "\\\n", " ")
	stages := map[string]*dockerStage{}
	var cur *dockerStage
	install := regexp.MustCompile(`apt-get install -y --no-install-recommends ([a-z0-9 .+-]+)`)
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		switch f[0] {
		case "FROM":
			if len(f) == 4 && f[2] == "AS" {
				cur = &dockerStage{parent: f[1]}
				stages[f[3]] = cur
			}
		case "RUN":
			for _, m := range install.FindAllStringSubmatch(line, -1) {
				for _, p := range strings.Fields(m[1]) {
					if p != "&&" {
						cur.packages = append(cur.packages, p)
					}
				}
			}
		case "COPY":
			cur.copies = append(cur.copies, f[1:]...)
		case "USER":
			cur.user = f[1]
		case "ENTRYPOINT":
			require.NoError(t, json.Unmarshal([]byte(strings.TrimPrefix(line, "ENTRYPOINT ")), &cur.entrypoint), line)
		}
	}
	return stages
}

// The images `make images` assembles are the Dockerfile's targets: the
// same names, the packages of their stages (all in the rootfs they are
// made of), the same binaries and scripts, users and entrypoints.
func TestImagesMatchTheDockerfile(t *testing.T) {
	stages := parseDockerfile(t)
	var targets []string
	for name := range stages {
		if name != "build" && name != "jail" && name != "slurm-common" {
			targets = append(targets, name)
		}
	}
	slices.Sort(targets)
	names := Names()
	slices.Sort(names)
	require.Equal(t, targets, names, "the Dockerfile's targets")
	// The jail plugin is compiled on the runtime images' base, against its
	// Slurm release's headers (a build for another release is refused by
	// slurmd), and every Slurm image takes it from there.
	require.Contains(t, stages, "jail")
	assert.Equal(t, "${BASE_IMAGE}", stages["jail"].parent, "the jail plugin's stage")
	assert.Contains(t, stages["jail"].packages, "libslurm-dev")
	assert.NotContains(t, stages["build"].packages, "libslurm-dev", "the Go build stage's Slurm headers are trixie's alone")
	assert.Contains(t, stages["slurm-common"].copies, "--from=jail")

	for _, spec := range specs {
		t.Run(spec.Name, func(t *testing.T) {
			var pkgs, copies []string
			common := false
			for s := stages[spec.Name]; s != nil; s = stages[s.parent] {
				pkgs = append(pkgs, s.packages...)
				copies = append(copies, s.copies...)
				common = common || s == stages["slurm-common"]
			}
			want := slices.Clone(spec.Packages)
			slices.Sort(pkgs)
			slices.Sort(want)
			assert.Equal(t, pkgs, want, "packages")
			for _, p := range want {
				assert.Contains(t, rootfs.Packages(), p, "the lab rootfs (the images' base) installs it")
			}
			assert.Equal(t, common, spec.Common, "built on slurm-common")
			if spec.Binary != "" {
				assert.Contains(t, copies, "/out/"+spec.Binary, "copies its binary")
			}
			if spec.Script != "" {
				assert.Contains(t, copies, "build/slurm/"+spec.Script)
			}
			if common {
				for _, s := range slurmCommonScripts {
					assert.Contains(t, copies, "build/slurm/"+s)
				}
				// The plugin goes into PluginDir of the build's
				// architecture (the jail stage makes
				// /out/lib/<gcc -dumpmachine>/slurm-wlm); the lab's images
				// put it at slurmconf.JailPluginPath, that dir on x86_64.
				assert.Contains(t, copies, "/out/lib/")
				assert.Contains(t, copies, "/usr/lib/")
			}
			assert.Equal(t, stages[spec.Name].entrypoint, spec.Config.Entrypoint, "entrypoint")
			user := ""
			for s := stages[spec.Name]; s != nil && user == ""; s = stages[s.parent] {
				user = s.user
			}
			assert.Equal(t, user, spec.Config.User, "user")
		})
	}
}

// The Dockerfile fixes the uids of slurm and slurmrestd; the rootfs the
// images are made of makes them with the same ids.
func TestImageUsersMatchTheDockerfile(t *testing.T) {
	b, err := os.ReadFile("../../../Dockerfile")
	require.NoError(t, err)
	df := string(b)
	for _, argv := range rootfs.ImageUsers() {
		if argv[0] != "useradd" {
			continue
		}
		uid, name := argv[slices.Index(argv, "-u")+1], argv[len(argv)-1]
		assert.Regexp(t, `useradd -r -u `+uid+` -g `+name+` `, df, "the Dockerfile makes %s with uid %s", name, uid)
	}
}
