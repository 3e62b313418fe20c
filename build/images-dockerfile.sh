#!/usr/bin/env bash
# `make images`: the Dockerfile's targets as OCI archives, on a machine with
# no Docker daemon and no registry but Debian's mirror and the Go proxy.
#
# buildah (a Debian package) builds the Dockerfile as it is; the two base
# images it names are made here instead of pulled:
#   BASE_IMAGE  localhost/onepool-base:trixie  debootstrap --variant=minbase trixie
#   GO_IMAGE    localhost/onepool-go:trixie    that + this machine's /usr/local/go
# The Go module and build caches are mounted into the build (the module
# cache at its own path, so the build cache's keys match), so a warm machine
# mostly links. Output: $OUT/<target>.tar (oci-archive), tagged
# onepool/<target>:$VERSION.
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-$top/.lab/images}
version=${VERSION:-$(git -C "$top" describe --always --dirty 2>/dev/null || echo dev)}
targets=${TARGETS:-controller-manager scheduler node-agent slurmctld slurmrestd slurmdbd login mariadb}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
work=$out/work
bah=(buildah --storage-driver vfs)
# IMAGES_STORAGE: buildah's storage root (default: the machine's,
# /var/lib/containers/storage); `make ci-fresh` gives it one in the clone so
# that nothing is reused from earlier builds.
if [ -n "${IMAGES_STORAGE:-}" ]; then
	bah+=(--root "$IMAGES_STORAGE/root" --runroot "$IMAGES_STORAGE/run")
fi

if [ "$(id -u)" != 0 ]; then
	echo "images: needs root (debootstrap, buildah's chroot isolation)" >&2
	exit 2
fi
for tool in buildah debootstrap; do
	if ! command -v "$tool" >/dev/null; then
		echo "images: installing $tool from Debian"
		apt-get install -y --no-install-recommends "$tool" >/dev/null
	fi
done
mkdir -p "$out" "$work"

has_image() { "${bah[@]}" inspect --type image "$1" >/dev/null 2>&1; }

# The base: Debian trixie, minbase, as a one-layer image.
if ! has_image localhost/onepool-base:trixie; then
	echo "images: debootstrap trixie for the base image (about a minute)"
	rm -rf "$work/base" && mkdir -p "$work/base"
	debootstrap --variant=minbase trixie "$work/base/rootfs" "$mirror" >"$work/debootstrap.log" 2>&1 ||
		{ tail -20 "$work/debootstrap.log"; exit 1; }
	rm -rf "$work/base/rootfs"/var/lib/apt/lists/* "$work/base/rootfs"/var/cache/apt/*.bin
	tar -C "$work/base/rootfs" --exclude='./dev/*' --exclude='./proc/*' --exclude='./sys/*' -cf "$work/base/rootfs.tar" .
	rm -rf "$work/base/rootfs"
	printf 'FROM scratch\nADD rootfs.tar /\nCMD ["/bin/bash"]\n' >"$work/base/Containerfile"
	"${bah[@]}" bud --quiet -f "$work/base/Containerfile" -t localhost/onepool-base:trixie "$work/base" >/dev/null
	rm -f "$work/base/rootfs.tar"
fi

# The Go image: the base with this machine's Go toolchain.
goroot=$(go env GOROOT)
gover=$(go env GOVERSION)
if ! has_image "localhost/onepool-go:$gover"; then
	echo "images: Go image from $goroot ($gover)"
	rm -rf "$work/go" && mkdir -p "$work/go"
	tar -C "$goroot" -cf "$work/go/go.tar" .
	printf 'FROM localhost/onepool-base:trixie\nADD go.tar /usr/local/go\nENV GOPATH=/go PATH=/usr/local/go/bin:/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n' >"$work/go/Containerfile"
	"${bah[@]}" bud --quiet -f "$work/go/Containerfile" -t "localhost/onepool-go:$gover" "$work/go" >/dev/null
	rm -f "$work/go/go.tar"
fi

modcache=$(go env GOMODCACHE)
gocache=$(go env GOCACHE)
mkdir -p "$modcache" "$gocache"
# Every module of go.mod's graph into the host's cache first: the build
# mounts that cache, and inside the build container `go mod download`
# cannot fetch a missing module (the host's proxy CA is not trusted there).
(cd "$top" && go mod download) || { echo "images: go mod download failed" >&2; exit 1; }
for t in $targets; do
	# An archive of this very commit is kept: a clean tree's version names
	# its source exactly (a dirty one always rebuilds). This also keeps a
	# second `make images` from needing the mirror: the pruning below drops
	# the layer cache.
	if [ "${version%-dirty}" = "$version" ] && [ -f "$out/$t.tar" ] && [ "$(cat "$out/$t.version" 2>/dev/null)" = "$version" ]; then
		echo "images: onepool/$t:$version is built ($out/$t.tar)"
		continue
	fi
	start=$(date +%s)
	"${bah[@]}" bud --isolation chroot --layers \
		--build-arg GO_IMAGE="localhost/onepool-go:$gover" \
		--build-arg BASE_IMAGE=localhost/onepool-base:trixie \
		--build-arg GOMODCACHE="$modcache" \
		-v "$modcache:$modcache" -v "$gocache:/root/.cache/go-build" \
		--target "$t" -t "localhost/onepool/$t:$version" -f "$top/Dockerfile" "$top" >"$out/$t.build.log" 2>&1 ||
		{ echo "images: $t failed; the end of $out/$t.build.log:"; tail -30 "$out/$t.build.log"; exit 1; }
	rm -f "$out/$t.tar"
	"${bah[@]}" push --quiet "localhost/onepool/$t:$version" "oci-archive:$out/$t.tar:onepool/$t:$version" >/dev/null
	echo "$version" >"$out/$t.version"
	echo "images: onepool/$t:$version -> $out/$t.tar ($(du -h "$out/$t.tar" | cut -f1), $(($(date +%s) - start)) s)"
done

# vfs keeps a full copy of every layer (a build stage is ~1 GB): drop the
# older tags of these images, working containers and dangling images.
for t in $targets; do
	for ref in $("${bah[@]}" images --noheading --format '{{.Name}}:{{.Tag}}' --filter reference="localhost/onepool/$t" 2>/dev/null); do
		[ "$ref" = "localhost/onepool/$t:$version" ] || "${bah[@]}" rmi "$ref" >/dev/null 2>&1 || true
	done
done
"${bah[@]}" rm --all >/dev/null 2>&1 || true
"${bah[@]}" rmi --prune >/dev/null 2>&1 || true
