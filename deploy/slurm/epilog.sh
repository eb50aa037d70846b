#!/bin/bash
# SLURM Epilog for wattwise: give back every GPU setting a finished job still holds through the node agent.
#
# The agent restores a GPU the moment its holder process exits, so after a job whose processes are all
# gone nothing is left to do. This epilog handles the rest: a process of the job that outlived it (a
# command that escaped the job's cleanup, a `wattwise cap` wrapper's command left running) still holds a
# lease, so the GPU would stay capped or clocked for the next job. For each GPU the agent shows held by a
# process of this job (its uid is SLURM_JOB_UID and its environment or cgroup names SLURM_JOB_ID), the
# epilog sends that process SIGTERM, and its whole process group when the lease follows the group (a
# `wattwise cap` command's: wattwise then restores its own settings), waits, then SIGKILL (the agent
# restores at once when the holder dies). Then `wattwise agent release --job SLURM_JOB_ID` has the
# agent restore whatever the job still holds, found by the job id its clients sent with their leases, not
# through /proc (a holder in a PID namespace this script cannot see is released too), the epilog checks
# that the job holds no GPU, and it ends the job's registration (prolog.sh registered its GPUs).
#
# Install on every node (slurm.conf, then `scontrol reconfigure`):
#   Epilog=/etc/slurm/wattwise-epilog.sh      (this file, mode 0755, owned by root)
# Environment (slurmd sets the first two): SLURM_JOB_ID, SLURM_JOB_UID; WATTWISE (default
# /usr/local/bin/wattwise), WATTWISE_AGENT_SOCKET (default /run/wattwise/agent.sock),
# WATTWISE_AGENT_STATE_DIR (the agent's --state-dir, default /var/lib/wattwise-agent),
# WATTWISE_EPILOG_GRACE_S (seconds between SIGTERM and SIGKILL, default 10).
# Exit status: 0 when the job holds nothing any more (or no agent runs on this node and its journal names
# no live process of the job); 1 when a GPU is still held by the job, or the agent is stopped while its
# journal names a live process of the job (its cap stays on the GPU until the agent starts again), which
# makes SLURM drain the node so that no job runs on a GPU left changed.
set -u -o pipefail

job="${SLURM_JOB_ID:?SLURM_JOB_ID is not set: run this as the SLURM Epilog}"
uid="${SLURM_JOB_UID:?SLURM_JOB_UID is not set: run this as the SLURM Epilog}"
wattwise="${WATTWISE:-/usr/local/bin/wattwise}"
socket="${WATTWISE_AGENT_SOCKET:-/run/wattwise/agent.sock}"
state_dir="${WATTWISE_AGENT_STATE_DIR:-/var/lib/wattwise-agent}"
grace_s="${WATTWISE_EPILOG_GRACE_S:-10}"
case "$grace_s" in ''|*[!0-9]*) echo "wattwise epilog (job $job): WATTWISE_EPILOG_GRACE_S must be a whole number of seconds (got '$grace_s'); 10 s it is" >&2; grace_s=10 ;; esac
log() { echo "wattwise epilog (job $job): $*" >&2; }
# The job's registration ends with it: its user's rights on this node's GPUs go with it. When the agent
# does not answer, `end-job --state-dir` records the job's end in the agent's state dir, which the agent
# reads at its next start (or before its next decision), so the registration ends whatever its state.
end_job() { "$wattwise" agent end-job --socket "$socket" --job "$job" --state-dir "$state_dir" >/dev/null 2>&1 || log "could not end the job's registration"; }

# The Python of wattwise's own installation reads the agent's JSON (no other dependency on the node).
python="$(dirname "$(readlink -f "$wattwise")")/python"
[ -x "$python" ] || python=python3

# Whether a process of this job (tied to it through /proc) runs: pid argv[3], else a process of group argv[4].
IN_JOB='
import json, os, sys
job, uid = sys.argv[1], int(sys.argv[2])

def in_job(pid):
    try:
        if os.stat(f"/proc/{pid}").st_uid != uid:
            return False
        with open(f"/proc/{pid}/environ", "rb") as fh:
            if f"SLURM_JOB_ID={job}".encode() in fh.read().split(b"\0"):
                return True
        with open(f"/proc/{pid}/cgroup") as fh:
            return any(part == f"job_{job}" for line in fh for part in line.strip().split("/"))
    except OSError:  # gone already (the agent restores its GPUs itself), or not ours to see
        return False

def group_in_job(pgid):
    """Whether a process of group `pgid` is one of the job'"'"'s (the group a lease follows outlives its leader)."""
    for entry in os.listdir("/proc") if pgid else []:
        try:
            with open(f"/proc/{entry}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if entry.isdigit() and int(fields[2]) == pgid and in_job(entry):
            return True
    return False
'

# The agent is stopped (no socket): a live holder keeps its settings on the GPU until the agent starts
# again (its journal names it). Say so and fail when one is the job's, else there is nothing to release.
if [ ! -S "$socket" ]; then
    if live="$("$python" -c "$IN_JOB"'
try:
    with open(sys.argv[3]) as fh:
        changes = json.load(fh).get("changes", [])
except FileNotFoundError:
    changes = []
except (OSError, ValueError, AttributeError) as err:
    print(f"? ({err})")
    sys.exit(0)
held = {}
for change in changes if isinstance(changes, list) else []:
    holder = change.get("holder") if isinstance(change, dict) else None
    if isinstance(holder, dict) and holder.get("uid") == uid and (in_job(holder.get("pid")) or group_in_job(holder.get("pgid") or 0)):
        held.setdefault(change["device"].get("index"), holder.get("pid"))
print(" ".join(f"GPU {i} (pid {p})" for i, p in sorted(held.items(), key=str)))
' "$job" "$uid" "$state_dir/journal.json")" && [ -n "$live" ]; then
        log "the node agent at $socket is stopped and the job's running processes still hold $live with their settings (journal $state_dir/journal.json); start the agent, which restores them when they end"
        [ -d "$state_dir" ] && end_job
        exit 1
    fi
    log "no node agent at $socket; nothing to release"
    [ -d "$state_dir" ] && end_job  # an agent ran here: its registration of the job ends at its next start
    exit 0
fi

# One line per GPU the job holds: "INDEX PID" when the holder is a process of this job that this script
# sees (its uid is SLURM_JOB_UID and its environment or cgroup names SLURM_JOB_ID), "INDEX -" when only
# the lease says so (its client sent this SLURM_JOB_ID; the holder may run in a PID namespace this script
# cannot see, so its pid is not signalled: `wattwise agent release --job` gives the GPU back instead).
held_by_job() {
    "$wattwise" agent status --json --socket "$socket" | "$python" -c "$IN_JOB"'
try:
    gpus = json.load(sys.stdin)["gpus"]
except (ValueError, KeyError, TypeError):  # the agent did not answer: `agent status` said why already
    sys.exit(3)
for gpu in gpus:
    holder = gpu.get("holder")
    if not holder or holder["uid"] != uid:
        continue
    pgid = holder.get("pgid") or 0
    if in_job(holder["pid"]) or group_in_job(pgid):
        print(gpu["index"], holder["pid"], pgid)
    elif holder.get("job_id") == job:
        print(gpu["index"], "-")
' "$job" "$uid"
}

# Wait up to $1 seconds (by the clock, however long each look takes) for the job's processes that this
# script sees to have given back their GPUs.
wait_signalled() {
    local end=$(( ${EPOCHREALTIME/./} + $1 * 1000000 ))
    while [ "${EPOCHREALTIME/./}" -lt "$end" ]; do
        left="$(held_by_job | awk '$2 != "-"')" && [ -z "$left" ] && return 0
        sleep 0.1
    done
    left="$(held_by_job | awk '$2 != "-"')" && [ -z "$left" ]
}

if ! held="$(held_by_job)"; then
    log "the node agent at $socket does not answer; cannot check what the job left"
    end_job
    exit 1
fi
if [ -z "$held" ]; then end_job; exit 0; fi

pids="$(echo "$held" | awk '$2 != "-" {print $2}' | sort -u)"
# A lease that follows a process group (a `wattwise cap` command's) is held by every process of it.
groups="$(echo "$held" | awk '$2 != "-" && $3 > 0 {print "-" $3}' | sort -u)"
if [ -n "$pids" ]; then
    log "GPU(s) $(echo "$held" | awk '$2 != "-" {print $1}' | paste -sd, -) still held by the job's process(es) $(echo $pids)${groups:+ and process group(s) $(echo ${groups//-/})}; SIGTERM"
    kill -TERM -- $groups $pids 2>/dev/null
    if ! wait_signalled "$grace_s"; then
        log "still held after ${grace_s} s; SIGKILL"
        kill -KILL -- $groups $pids 2>/dev/null
        wait_signalled 5
    fi
fi
# Whatever the job still holds, seen here or not: the agent restores it and drops the leases (audit-logged).
left="$(held_by_job)"
if [ -n "$left" ]; then
    out="$("$wattwise" agent release --job "$job" --socket "$socket" 2>&1)"
    log "wattwise agent release --job $job: ${out//wattwise agent release: job $job: /}"
    left="$(held_by_job)"
fi
if [ -n "$left" ]; then
    log "GPU(s) still held: $(echo "$left" | paste -sd' ' -); the node should be drained"
    exit 1
fi
end_job
log "released"
exit 0
