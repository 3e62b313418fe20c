#!/usr/bin/env bash
# make's e2e runs: test/e2e-run.sh NAME DIR GO-TEST-ARGUMENTS...
#
# go test -v into DIR/NAME.log; printed, each test's result and time, and
# on a failure what the failing tests said. The names of the tests that
# failed go to DIR/NAME.failed, which make test's STAGE line repeats: a CI
# report that shows only the last lines of the output still names them.
#
# With E2E_RERUN=N (by hand; make test never sets it: a flaky test is a
# failure), a run whose only failures are at most N top-level tests, with
# no panic and no timeout, runs those once more, alone (DIR/NAME-rerun.log),
# to tell a flake from a break; passing then, they are named flaky
# (DIR/NAME.flaky, repeated on the STAGE line). A test that fails twice
# fails the run.
set -u
name=$1 dir=$2
shift 2
log=$dir/$name.log
rm -f "$dir/$name.failed" "$dir/$name.flaky" "$dir/$name-rerun.log"

results() { grep -E '^\s*--- (PASS|FAIL|SKIP)|^(ok|FAIL|panic)' "$1"; }
said() {
	echo "$name: what the failing run said ($1):"
	grep -vE '^\s*(=== (RUN|PAUSE|CONT)|--- (PASS|SKIP))' "$1" | grep -E '_test\.go:|^\s*--- FAIL|^(FAIL|panic)|^\s+' | tail -150
}
failed() { grep -oE '^--- FAIL: \S+' "$1" | awk '{print $3}' | sort -u; }

go test -count=1 -p 1 -v "$@" >"$log" 2>&1
rc=$?
results "$log"
[ "$rc" = 0 ] && exit 0
said "$log"
first=$(failed "$log")
n=$(printf '%s\n' "$first" | grep -c .)
if [ "$n" -ge 1 ] && [ "$n" -le "${E2E_RERUN:-0}" ] && ! grep -qE '^panic:|^\s*panic: test timed out' "$log"; then
	echo "$name: running the $n failed test(s) once more, alone: $(echo $first)"
	go test -count=1 -p 1 -v "$@" -run "^($(echo $first | tr ' ' '|'))\$" >"$dir/$name-rerun.log" 2>&1
	rc=$?
	results "$dir/$name-rerun.log"
	if [ "$rc" = 0 ]; then
		echo "flaky: $(echo $first)" >"$dir/$name.flaky"
		echo "$name: FLAKY, failed once and passed alone: $(echo $first) (logs: $log, $dir/$name-rerun.log)"
		exit 0
	fi
	said "$dir/$name-rerun.log"
fi
{
	failed "$log"
	grep -oE '^panic: .{0,80}' "$log" | head -1
} | tr '\n' ' ' >"$dir/$name.failed"
exit "$rc"
