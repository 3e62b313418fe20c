#!/usr/bin/env bash
# Builds the real-GPU proof's binaries into .gpuproof/bin (see README.md):
# the shipped node agent, built as the Makefile builds it (cgo on: go-nvml
# dlopens libnvidia-ml.so.1 at run time), and the proof program. Stripped
# (-s -w) they are still ~82 MiB together (client-go and the DRA helper in
# both), over what the GPU machine is carried (60 MiB), so the folder holds
# them gzipped (~25 MiB); run.sh unpacks them into its temp dir.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=.gpuproof/bin
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export CGO_ENABLED=1
go build -ldflags='-s -w' -o "$tmp/onepool-node-agent" ./cmd/onepool-node-agent
go build -ldflags='-s -w' -o "$tmp/gpuproof" ./test/gpuproof
rm -rf "$out"
mkdir -p "$out"
for b in onepool-node-agent gpuproof; do
	gzip -9 -n -c "$tmp/$b" >"$out/$b.gz"
	need=$(objdump -T "$tmp/$b" 2>/dev/null | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1 || true)
	echo "$b: $(stat -c %s "$tmp/$b") bytes, $(stat -c %s "$out/$b.gz") gzipped${need:+, needs $need}"
done
total=$(du -cb "$out" | tail -1 | cut -f1)
echo "$out: $((total / 1024 / 1024)) MiB ($total bytes)"
if ((total >= 60 * 1024 * 1024)); then
	echo "build.sh: $out is over 60 MiB" >&2
	exit 1
fi
