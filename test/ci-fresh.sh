#!/usr/bin/env bash
# `make ci-fresh`: what CI does — `CI=true bash .ci/run </dev/null` on a fresh
# clone — on a clone of this checkout's HEAD with no .lab/, so a warm machine
# cannot hide a cold-start breakage. Only committed work is tested.
#
# The Slurm rootfs is built first, outside any namespace (debootstrap needs
# Debian's mirror). The CI run then goes into a network namespace of its own
# (loopback only, same ports as any lab), so a lab that runs in this checkout
# is left alone. It has no network: Go modules come from the machine's module
# cache, served as a file proxy (checked against go.sum when they were
# downloaded, hence GOSUMDB=off), after `go mod download` outside. Everything
# the run started is stopped by .ci/run's `make down`; the clone stays in
# CI_FRESH_DIR for its logs until the next run.
set -euo pipefail

# Bash reads a script as it runs: an edit of this file during a run (an
# hour long) would make the running one jump to another line. Run a copy.
if [ -z "${CI_FRESH_COPY:-}" ]; then
	copy=$(mktemp /tmp/ci-fresh.XXXXXX.sh)
	cp "$0" "$copy"
	CI_FRESH_COPY=1 exec bash "$copy" "$@"
fi
rm -f "$0" # the copy: bash has it open

top=$(git rev-parse --show-toplevel)
dir=${CI_FRESH_DIR:-/tmp/onepool-ci-fresh}
ns=${CI_FRESH_NETNS:-onepool-ci-fresh}
clone=$dir/main
log=$dir/ci.log

if [ "$(id -u)" != 0 ]; then
	echo "ci-fresh: needs root, as the lab does" >&2
	exit 2
fi

# A previous run's lab must be down and unmounted before its folder goes:
# rm must never walk into a bind mount of /dev or /home.
# Inside its own network namespace while that exists: outside it, the same
# ports are this machine's own lab's.
# The same for the 26.05 lab make test runs beside it, in its own namespace.
ns2605=$ns-26.05
for lab in "$clone/.lab:$ns" "$clone/.lab-26.05:$ns2605"; do
	labdir=${lab%%:*} labns=${lab#*:}
	[ -d "$labdir" ] || continue
	inns=()
	if ip netns list | grep -qw "$labns"; then
		inns=(nsenter --net="/var/run/netns/$labns")
	fi
	(cd "$clone" && "${inns[@]}" env ONEPOOL_LAB_DIR="$labdir" go run ./test/lab/cmd/lab down) || true
done
# What lab down leaves (a run cut off while the real node ran: its kubelet's
# volumes, containerd's sandboxes) is unmounted here, deepest first; a mount
# that will not go stops the run before rm.
{ grep " $dir/" /proc/mounts || true; } | awk '{print $2}' | awk '{print length, $0}' | sort -rn | cut -d' ' -f2- |
	while read -r m; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; done
if grep -q " $dir/" /proc/mounts; then
	echo "ci-fresh: mounts remain under $dir; not removing it:" >&2
	grep " $dir/" /proc/mounts >&2
	exit 2
fi
rm -rf --one-file-system "$dir"
mkdir -p "$dir"
ip netns del "$ns" 2>/dev/null || true
ip netns del "$ns2605" 2>/dev/null || true

start=$(date +%s)
git clone -q --no-hardlinks "$top" "$clone"
# .ci/run runs with ../shared beside the checkout.
if [ -d "$top/../shared" ]; then
	ln -s "$(cd "$top/../shared" && pwd)" "$dir/shared"
fi
echo "ci-fresh: clone of $(git -C "$clone" log -1 --format='%h %s') in $clone; log: $log"

cd "$clone"
echo "ci-fresh: building the Slurm rootfs (needs the mirror)"
ONEPOOL_LAB_DIR="$clone/.lab" go run ./test/lab/cmd/lab rootfs 2>&1 | tee "$log"
# make test runs the suites on Slurm 26.05 (Debian sid), then the short
# soak on 24.11, in a second lab beside the first (the Makefile's
# LAB_2605_DIR).
ONEPOOL_LAB_DIR="$clone/.lab-26.05" ONEPOOL_LAB_SLURM=26.05 go run ./test/lab/cmd/lab rootfs 2>&1 | tee -a "$log"
ONEPOOL_LAB_DIR="$clone/.lab-26.05" ONEPOOL_LAB_SLURM=24.11 go run ./test/lab/cmd/lab rootfs 2>&1 | tee -a "$log"
rootfs_done=$(date +%s)
# The real node's host packages (runc, CNI plugins) come from the mirror
# too; inside the namespace below apt reaches nothing. CI itself runs
# without a namespace and installs them in `lab node up`.
echo "ci-fresh: the real node's host packages (needs the mirror)"
ONEPOOL_LAB_DIR="$clone/.lab" go run ./test/lab/cmd/lab node packages 2>&1 | tee -a "$log"

echo "ci-fresh: promtool from Debian's prometheus package (needs the mirror)"
make --no-print-directory LAB_DIR="$clone/.lab" "$clone/.lab/bin/promtool" 2>&1 | tee -a "$log"

echo "ci-fresh: go mod download (needs the Go proxy)"
go mod download
(cd test/tools/etcd && go mod download)
(cd test/tools/helm && go mod download)
(cd test/tools/kubelet && go mod download)
(cd test/tools/lws && go mod download)
(cd test/tools/jobset && go mod download)
(cd test/tools/kwok && go mod download)
(cd test/tools/kueue && go mod download)
(cd test/tools/kube-1.36 && go mod download)
(cd test/tools/golangci-lint && go mod download)
# The Makefile copies files out of these modules (CRDs, kwok's stages) with
# `go mod download -json MOD@VERSION`: a version no go.mod here requires
# (scheduler-plugins' PodGroup CRD) is on no fresh machine either.
for mv in sigs.k8s.io/kwok:KWOK_VERSION sigs.k8s.io/scheduler-plugins:SCHEDULER_PLUGINS_VERSION \
	sigs.k8s.io/lws:LWS_VERSION sigs.k8s.io/jobset:JOBSET_VERSION; do
	ver=$(sed -n "s/^${mv#*:} *[:?]*= *//p" Makefile | head -1)
	[ -n "$ver" ] || { echo "ci-fresh: no ${mv#*:} in the Makefile" >&2; exit 1; }
	go mod download "${mv%%:*}@$ver"
done
modcache=$(go env GOMODCACHE)

ip netns add "$ns"
trap 'ip netns del "$ns" 2>/dev/null || true; ip netns del "$ns2605" 2>/dev/null || true' EXIT
ip -n "$ns" link set lo up
# With loopback addresses alone, getaddrinfo(AI_ADDRCONFIG) finds no address
# family and slurmdbd cannot open its port: give the namespace one more.
ip -n "$ns" addr add 10.99.0.1/32 dev lo

echo "ci-fresh: CI=true bash .ci/run (network namespace $ns)"
ci_start=$(date +%s)
rc=0
nsenter --net="/var/run/netns/$ns" env CI=true ONEPOOL_LAB_DIR="$clone/.lab" LAB_2605_NETNS="$ns2605" \
	GOPROXY="file://$modcache/cache/download" GOSUMDB=off \
	bash .ci/run </dev/null >>"$log" 2>&1 || rc=$?
end=$(date +%s)

echo "ci-fresh: the rootfs's packages:"
grep -E '^(slurmctld|slurmdbd|slurmrestd|munge|mariadb-server|libmariadb3:amd64) ' "$clone/.lab/rootfs.manifest" | sed 's/^/    /' || true
grep -A 50 'differs from the packages last proven' "$log" | grep '^lab:   ' | sed 's/^/    /' || true
echo "ci-fresh: exit $rc; wall time $((end - start)) s (rootfs and downloads $((ci_start - start)) s, .ci/run $((end - ci_start)) s); make test's stages:"
grep -E '^STAGE ' "$log" | sed 's/^/    /' || true
if [ "$rc" != 0 ]; then
	echo "ci-fresh: the last lines of $log:"
	tail -40 "$log"
fi
exit "$rc"
