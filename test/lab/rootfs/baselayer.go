package rootfs

import (
	"bufio"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/onepool/onepool/test/lab/oci"
)

// The base layer is the rootfs as Debian made it, before the lab sets
// anything up in it: the one layer every image of `make images` starts
// from (test/lab/images.go).

// BaseLayerSuffix names the base layer beside its rootfs (.lab/rootfs.layer.tar).
const BaseLayerSuffix = ".layer.tar"

// ImageUsers are made in a new rootfs before Debian's packages, with the
// ids the Dockerfile gives them: slurmctld, slurmdbd and every slurmd must
// agree on slurm's uid; slurmrestd refuses to run as root or SlurmUser.
func ImageUsers() [][]string {
	return [][]string{
		{"groupadd", "-g", "64030", "slurm"},
		{"useradd", "-r", "-u", "64030", "-g", "slurm", "-d", "/var/lib/slurm", "-s", "/usr/sbin/nologin", "slurm"},
		{"groupadd", "-g", "6820", "slurmrestd"},
		{"useradd", "-r", "-u", "6820", "-g", "slurmrestd", "-s", "/usr/sbin/nologin", "slurmrestd"},
	}
}

// baseLayerSkips are left out of the base layer, with what is under them:
// what the runtime provides (/dev, /proc, ...), apt's caches and docs, and
// the munge key Debian's package generates (each cluster brings its own).
var baseLayerSkips = []string{
	"dev/", "proc/", "sys/", "run/", "tmp/", "var/tmp/",
	"var/lib/apt/lists/", "var/cache/apt/", "var/log/",
	// mariadb's postinst database: onepool-mariadb makes its own on first start.
	"var/lib/mysql/",
	"usr/share/doc/", "usr/share/man/", "usr/share/info/",
	"etc/munge/munge.key", "etc/resolv.conf",
}

// baseLayerPackages: the lab's own tools in the rootfs, which no image
// needs (Debian's files of the packages these globs name are left out):
// the real node's runtime, the jail's shell, the compiler the jail plugin
// is built with (gcc-14 in trixie, gcc-15 in sid).
var baseLayerPackages = []string{"containerd", "runc", "busybox-static",
	"gcc-[0-9]*-x86-64-linux-gnu", "cpp-[0-9]*-x86-64-linux-gnu", "libgcc-[0-9]*-dev", "libasan[0-9]*", "libtsan[0-9]*",
	"liblsan[0-9]*", "libubsan[0-9]*", "libhwasan[0-9]*", "binutils-x86-64-linux-gnu", "linux-libc-dev"}

// WriteBaseLayer writes root (a rootfs just built) as a layer tar at path,
// and its digest beside it.
func WriteBaseLayer(root, path string) (oci.Layer, error) {
	pkgFiles, err := dpkgFiles(root, baseLayerPackages)
	if err != nil {
		return oci.Layer{}, err
	}
	layer, err := oci.LayerFromDir(path, root, func(rel string) bool {
		for _, p := range baseLayerSkips {
			if strings.HasSuffix(p, "/") && strings.HasPrefix(rel+"/", p) && rel+"/" != p {
				return true // the folder stays, its content goes
			}
			if rel == p {
				return true
			}
		}
		return pkgFiles[rel] || rel == Marker
	})
	if err != nil {
		return oci.Layer{}, err
	}
	return layer, oci.SaveLayer(layer)
}

// RemoveBaseLayer removes a base layer and its digest; none is no error.
func RemoveBaseLayer(path string) error {
	return errors.Join(ignoreNotExist(os.Remove(path)), ignoreNotExist(os.Remove(path+".digest")))
}

func ignoreNotExist(err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// dpkgFiles lists the regular files and links dpkg installed for the
// packages the globs name (paths relative to root); a glob that names no
// installed package lists nothing.
func dpkgFiles(root string, globs []string) (map[string]bool, error) {
	out := map[string]bool{}
	for _, g := range globs {
		var lists []string
		for _, suffix := range []string{".list", ":amd64.list"} {
			m, err := filepath.Glob(filepath.Join(root, "var/lib/dpkg/info", g+suffix))
			if err != nil {
				return nil, err
			}
			lists = append(lists, m...)
		}
		for _, list := range lists {
			f, err := os.Open(list)
			if err != nil {
				return nil, err
			}
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				rel := strings.TrimPrefix(sc.Text(), "/")
				if fi, err := os.Lstat(filepath.Join(root, rel)); err == nil && !fi.IsDir() {
					out[rel] = true
				}
			}
			f.Close()
			if err := sc.Err(); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}
