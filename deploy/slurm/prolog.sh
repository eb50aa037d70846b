#!/bin/bash
# SLURM Prolog for wattwise: before a job starts, register the GPUs SLURM gave the job with the node
# agent, and check that the agent answers and that those GPUs are free.
#
# Registered, the job's user may change only the GPUs of their jobs on this node, whatever the agent's
# `allocation` policy; the epilog (epilog.sh) ends the registration.
#
# A GPU still held when a job starts belongs to a process of an earlier job that outlived it (the
# epilog, epilog.sh, gives those back when that job ends); the new job's changes to it would be refused.
# The prolog logs each such GPU (slurmd's log) with its holder. With WATTWISE_PROLOG_STRICT=1 it also
# fails (exit 1) when the agent does not answer or one of the job's GPUs is held: SLURM then drains the
# node and requeues the job, so that no job runs where it could not cap its GPUs.
#
# Install on every node (slurm.conf, then `scontrol reconfigure`):
#   Prolog=/etc/slurm/wattwise-prolog.sh      (this file, mode 0755, owned by root)
# Environment (slurmd sets the first three): SLURM_JOB_ID, SLURM_JOB_UID, SLURM_JOB_GPUS (the node's GPU
# indices given to the job; when unset the job is not registered and every GPU is checked); WATTWISE (default /usr/local/bin/wattwise), WATTWISE_AGENT_SOCKET
# (default /run/wattwise/agent.sock), WATTWISE_PROLOG_STRICT (0 or 1, default 0).
set -u -o pipefail

job="${SLURM_JOB_ID:?SLURM_JOB_ID is not set: run this as the SLURM Prolog}"
wattwise="${WATTWISE:-/usr/local/bin/wattwise}"
socket="${WATTWISE_AGENT_SOCKET:-/run/wattwise/agent.sock}"
strict="${WATTWISE_PROLOG_STRICT:-0}"
log() { echo "wattwise prolog (job $job): $*" >&2; }
fail() { log "$*"; [ "$strict" = 1 ] && exit 1; exit 0; }

[ -S "$socket" ] || fail "no node agent at $socket: jobs on this node cannot change GPU settings"
if [ -n "${SLURM_JOB_UID:-}" ] && [ -n "${SLURM_JOB_GPUS:-}" ]; then
    out="$("$wattwise" agent register-job --socket "$socket" --job "$job" --uid "$SLURM_JOB_UID" \
        --gpus "$SLURM_JOB_GPUS" 2>&1)" || fail "cannot register the job's GPUs with the node agent: ${out##*error: }"
fi
python="$(dirname "$(readlink -f "$wattwise")")/python"
[ -x "$python" ] || python=python3

# One line per GPU of the job that someone holds.
busy_gpus() {
    "$wattwise" agent status --json --socket "$socket" | "$python" -c '
import json, sys
wanted = {int(i) for i in sys.argv[1].split(",") if i.strip().isdigit()} if sys.argv[1] else None
try:
    gpus = json.load(sys.stdin)["gpus"]
except (ValueError, KeyError, TypeError):  # the agent did not answer: `agent status` said why already
    sys.exit(3)
for gpu in gpus:
    holder = gpu.get("holder")
    if holder and (wanted is None or gpu["index"] in wanted):
        print("GPU %d is held by pid %d (uid %d, job %r)" % (gpu["index"], holder["pid"], holder["uid"], holder["job"]))
' "${SLURM_JOB_GPUS:-}"
}

busy="$(busy_gpus)" || fail "the node agent at $socket does not answer"
[ -z "$busy" ] && exit 0
while IFS= read -r line; do log "$line"; done <<< "$busy"
fail "the job's GPUs are not all free"
