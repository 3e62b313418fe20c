#!/usr/bin/env bash
# The real-GPU proof (issue 37 item 6, see README.md): runs the shipped node
# agent's detect and health and the proof program (the DRA driver's prepare
# and its CDI spec) on this machine's GPUs, and compares NVML's UUIDs and
# minors with nvidia-smi's and the kernel driver's. The report goes to stdout
# and to ${OUT:-/tmp}/gpu-proof-report.txt; its last line is GPUPROOF PASS or
# GPUPROOF FAIL: <what>. Each step is bounded (timeout 60 s, less once the
# whole run nears 170 s).
#
#   test/gpuproof/run.sh [BIN]   BIN: build.sh's folder (default: the repo's .gpuproof/bin)
#
# GPUPROOF_INVENTORY=<file> uses the agent's fake inventory instead of NVML: a
# dry run of the script without a GPU, which never passes.
set -u -o pipefail

BIN=${1:-$(cd "$(dirname "$0")/../.." && pwd)/.gpuproof/bin}
REPORT=${OUT:-/tmp}/gpu-proof-report.txt
INVENTORY=${GPUPROOF_INVENTORY:-}
WORK=$(mktemp -d /tmp/gpuproof.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
deadline=$((SECONDS + 170))
fails=()

fail() {
	fails+=("$*")
	echo "FAIL: $*"
}

section() { printf '\n######## %s\n' "$*"; }

# bounded CMD...: runs CMD under timeout, printing its exit code and time.
bounded() {
	local t=$((deadline - SECONDS)) start=$SECONDS rc
	((t > 60)) && t=60
	if ((t < 5)); then
		echo "SKIPPED (the run's time is spent): $*"
		return 124
	fi
	echo "\$ $*"
	timeout -k 5 "$t" "$@"
	rc=$?
	((rc == 124 || rc == 137)) && echo "TIMED OUT after ${t}s"
	echo "-> exit $rc ($((SECONDS - start))s)"
	return "$rc"
}

# step NAME CMD...: bounded CMD, its output kept in WORK/NAME.txt and printed.
step() {
	local name=$1 rc
	shift
	bounded "$@" >"$WORK/$name.txt" 2>&1
	rc=$?
	cat "$WORK/$name.txt"
	return "$rc"
}

# binary NAME: the path of NAME from BIN, unpacking NAME.gz into WORK.
binary() {
	if [[ -x $BIN/$1 ]]; then
		echo "$BIN/$1"
	elif [[ -f $BIN/$1.gz ]] && gzip -dc "$BIN/$1.gz" >"$WORK/$1" && chmod +x "$WORK/$1"; then
		echo "$WORK/$1"
	fi
}

main() {
	# Nothing from the environment may stand in for NVML or change a check.
	local v
	for v in $(compgen -e | grep '^ONEPOOL_'); do unset "$v"; done
	local inv=()
	[[ -n $INVENTORY ]] && inv=(--gpu-inventory "$INVENTORY")

	section "machine"
	date -u +%FT%TZ
	echo "host $(hostname), $(uname -srm), $(ldd --version 2>&1 | head -1)"
	echo "driver: $(head -1 /proc/driver/nvidia/version 2>/dev/null || echo 'no /proc/driver/nvidia/version')"
	echo "modules: $(grep -o '^nvidia[a-z_]*' /proc/modules 2>/dev/null | tr '\n' ' ')"
	echo "libnvidia-ml: $(ldconfig -p 2>/dev/null | grep -m1 -o '/.*libnvidia-ml.so.1$' || echo 'not in the ldconfig cache')"
	ls -l /dev/nvidia* 2>&1
	[[ -n $INVENTORY ]] && echo "FAKE GPU INVENTORY $INVENTORY: NVML is not used, this is no GPU proof"

	local agent proof
	agent=$(binary onepool-node-agent)
	proof=$(binary gpuproof)
	if [[ -z $agent || -z $proof ]]; then
		fail "onepool-node-agent or gpuproof missing in $BIN (run test/gpuproof/build.sh)"
	fi
	echo "binaries: ${agent:-none} ${proof:-none}"

	# The GPU count the agent must find: the kernel driver's.
	local n
	n=$(find /proc/driver/nvidia/gpus -mindepth 1 -maxdepth 1 2>/dev/null | wc -l)
	if [[ -n $INVENTORY ]]; then
		n=0
		echo "expected GPUs: any (fake inventory)"
	elif ((n == 0)); then
		n=1
		echo "expected GPUs: 1 (the kernel driver lists none: /proc/driver/nvidia/gpus)"
	else
		echo "expected GPUs: $n (/proc/driver/nvidia/gpus)"
	fi

	section "1. onepool-node-agent detect (NVML: name, UUID, minor, memory, GRES type and order, Gres=, gres.conf)"
	if [[ -n $agent ]]; then
		step detect "$agent" detect --expected-gpus "$n" "${inv[@]}" || fail "detect exit $?"
	fi

	section "2. onepool-node-agent health --dry-run"
	if [[ -n $agent ]]; then
		step health "$agent" health --dry-run --node-name proof --expected-gpus "$n" --state-dir "$WORK/state" "${inv[@]}" ||
			fail "health exit $?: $(sed -n 's/ (dry run: not draining)$//; s/^unhealthy: //p' "$WORK/health.txt")"
	fi

	section "3+4. DRA driver: ResourceSlice devices, prepare a claim, its CDI spec, open its device nodes"
	if [[ -n $proof ]]; then
		step proof "$proof" --node-name proof --cdi-dir "$WORK/cdi" --count 2 "${inv[@]}" ||
			fail "proof program: $(grep -m1 '^PROOF FAIL' "$WORK/proof.txt" | sed 's/^PROOF FAIL: //')"
	fi

	section "5. nvidia-smi and the kernel driver, for comparison"
	local smi=no
	if command -v nvidia-smi >/dev/null; then
		smi=yes
		step smi-L nvidia-smi -L || fail "nvidia-smi -L exit $?"
		step smi-csv nvidia-smi --query-gpu=index,name,uuid,memory.total --format=csv || fail "nvidia-smi --query-gpu exit $?"
		# nvidia-smi -q prints each GPU's "GPU UUID" and then its "Minor Number".
		bounded nvidia-smi -q >"$WORK/smi-q.txt" 2>&1 || fail "nvidia-smi -q exit $?"
		awk -F'[ \t]*:[ \t]*' '{sub(/[ \t\r]+$/, "")} /^ *GPU UUID/{u=$2} /^ *Minor Number/{print u, $2}' "$WORK/smi-q.txt" | sort >"$WORK/smi-minors.txt"
		echo "nvidia-smi -q, UUID and minor:"
		cat "$WORK/smi-minors.txt"
	else
		echo "nvidia-smi: not found"
	fi
	local f
	for f in /proc/driver/nvidia/gpus/*/information; do
		[[ -f $f ]] || continue
		# "GPU UUID: \t GPU-..." and "Device Minor: \t 0"
		awk -F':[ \t]*' '{sub(/[ \t\r]+$/, "")} /^GPU UUID/{u=$2} /^Device Minor/{m=$2} END{print u, m}' "$f"
	done | sort >"$WORK/kernel-minors.txt"
	echo "kernel driver (/proc/driver/nvidia/gpus/*/information), UUID and minor:"
	cat "$WORK/kernel-minors.txt"
	[[ -s $WORK/kernel-minors.txt ]] || echo "(none)"

	section "6. MIG, read-only (informative: mode, GPU instance profiles, placements, instances; nothing is changed)"
	if [[ -n $proof && -z $INVENTORY ]]; then
		bounded "$proof" --mig || echo "(MIG survey: exit $?, not a proof failure)"
		if [[ $smi == yes ]]; then
			bounded nvidia-smi --query-gpu=index,mig.mode.current,mig.mode.pending --format=csv
			bounded nvidia-smi mig -lgip
		fi
	fi

	section "comparison"
	# NVML as the proof program saw it: "index uuid minor".
	sed -n 's/^gpu-id index=\([0-9]*\) uuid=\(.*\) minor=\([0-9]*\)$/\1 \2 \3/p' "$WORK/proof.txt" 2>/dev/null | sort >"$WORK/nvml.txt"
	echo "NVML (index uuid minor):"
	cat "$WORK/nvml.txt"
	if [[ ! -s $WORK/nvml.txt ]]; then
		fail "no GPU from NVML to compare"
	else
		grep -oE 'GPU-[A-Za-z0-9-]+' "$WORK/detect.txt" 2>/dev/null | sort >"$WORK/detect-uuids.txt"
		cut -d' ' -f2 "$WORK/nvml.txt" | sort | cmp -s - "$WORK/detect-uuids.txt" ||
			fail "detect's UUIDs ($(tr '\n' ' ' <"$WORK/detect-uuids.txt")) are not the proof program's"
		if [[ $smi == yes ]]; then
			# nvidia-smi's index,uuid joined with its uuid -> minor.
			grep '^[0-9]' "$WORK/smi-csv.txt" | awk -F', ' '{print $1, $3}' | while read -r i u; do
				echo "$i $u $(awk -v u="$u" '$1 == u {print $2}' "$WORK/smi-minors.txt")"
			done | sort >"$WORK/smi.txt"
			if cmp -s "$WORK/nvml.txt" "$WORK/smi.txt"; then
				echo "NVML and nvidia-smi agree on every GPU's index, UUID and minor"
			else
				echo "nvidia-smi (index uuid minor):"
				cat "$WORK/smi.txt"
				fail "NVML and nvidia-smi differ on index/UUID/minor"
			fi
		else
			fail "nvidia-smi not found: nothing to compare NVML with"
		fi
		if [[ -s $WORK/kernel-minors.txt ]]; then
			if cut -d' ' -f2,3 "$WORK/nvml.txt" | sort | cmp -s - "$WORK/kernel-minors.txt"; then
				echo "NVML and the kernel driver agree on every GPU's UUID and minor"
			else
				fail "NVML and the kernel driver (/proc/driver/nvidia/gpus) differ on UUID/minor"
			fi
		fi
	fi

	echo
	echo "(${SECONDS}s in all)"
	[[ -n $INVENTORY ]] && fails=("fake GPU inventory used, not NVML" "${fails[@]}")
	if ((${#fails[@]} == 0)); then
		echo "GPUPROOF PASS"
		return 0
	fi
	local msg=${fails[0]}
	for f in "${fails[@]:1}"; do msg+="; $f"; done
	if grep -qs 'NVML not found' "$WORK/detect.txt" "$WORK/proof.txt"; then
		msg="NVML not found: no NVIDIA driver (libnvidia-ml.so.1) on this machine, nothing ran on a GPU (${#fails[@]} checks failed, see above)"
	fi
	echo "GPUPROOF FAIL: $msg"
	return 1
}

mkdir -p "$(dirname "$REPORT")"
main 2>&1 | tee "$REPORT"
exit "${PIPESTATUS[0]}"
