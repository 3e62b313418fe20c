package scheduler

import (
	"fmt"
	"strings"

	"github.com/onepool/onepool/keys"
)

// placeholderScript is the batch script of a placeholder job. It holds the
// allocation while the pod runs. Slurm ends a job (scancel, preemption,
// time limit) with SIGTERM and, KillWait (or the QOS GraceTime) later,
// SIGKILL. On SIGTERM the script asks onepool every half second whether
// the pod is gone and exits only when it is, so Slurm frees the GPUs after
// the pod stopped using them; SIGKILL bounds the wait. bash's /dev/tcp
// keeps the script free of curl; read -t bounds each answer.
func placeholderScript(o owner, host, port string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "#!/bin/bash\n")
	// The trap first: Slurm may end the job in its first milliseconds. It
	// also ends the sleep in progress, which a signal sent before that sleep
	// began never reached.
	b.WriteString("term=0\nchild=\ntrap 'term=1; [ -n \"$child\" ] && kill \"$child\" 2>/dev/null' TERM\n")
	fmt.Fprintf(&b, "# onepool placeholder for %s: holds this allocation until the pod is gone.\n", o)
	fmt.Fprintf(&b, "release_host=%s\nrelease_port=%s\n", host, port)
	fmt.Fprintf(&b, "path=\"%s${SLURM_JOB_ID}\"\n", keys.ReleasePath)
	b.WriteString(`pod_gone() {
	local code=""
	exec 3<>"/dev/tcp/${release_host}/${release_port}" 2>/dev/null || return 1
	printf 'GET %s HTTP/1.0\r\nHost: %s\r\n\r\n' "$path" "$release_host" >&3
	read -r -t 2 _ code _ <&3
	exec 3<&- 3>&-
	[ "$code" = 200 ]
}
echo "onepool: holding job ${SLURM_JOB_ID} on ${SLURM_JOB_NODELIST} for the pod"
while :; do
	if [ "$term" = 1 ]; then
		if pod_gone; then
			echo "onepool: the pod is gone; releasing the allocation"
			exit 0
		fi
		sleep 0.5 &
		child=$!
	else
		sleep 3600 &
		child=$!
		# A SIGTERM that came before this sleep began missed it: end it now.
		if [ "$term" = 1 ]; then kill "$child" 2>/dev/null; fi
	fi
	wait "$child" 2>/dev/null
	child=
done
`)
	return b.String()
}
