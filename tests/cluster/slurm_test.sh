#!/usr/bin/env bash
# A real single-node Slurm converts a generated checkpoint through examples/slurm/: plan, an
# array of 4 workers (task 2 stalled after a few tensors and killed with scancel), finalize
# refused while unit 2 is missing, task 2 resubmitted alone, finalize as a job with
# --dependency=afterok, and the result compared byte for byte with the one-process output.
#   tests/cluster/slurm_test.sh BIN_DIR      (BIN_DIR holds qforge-convert and qforge-make-demo)
# Installs Debian's slurm-wlm and munge when missing (as root); starts munged, slurmctld and
# slurmd from a generated slurm.conf in a temporary folder (proctrack/linuxproc, task/none)
# and stops them by their pids at the end.
set -euo pipefail
BIN=$(cd "${1:?usage: slurm_test.sh BIN_DIR}" && pwd)
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
  [[ $(id -u) -eq 0 ]] || { echo "slurm_test: slurm-wlm and munge missing (run as root to install)" >&2; exit 1; }
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge >/dev/null
fi

W=$(mktemp -d /tmp/qforge-slurm-XXXXXX)
chmod 700 "$W"
pids=()
cleanup() {
  local rc=$?
  for f in slurmd slurmctld munged; do
    [[ -f $W/$f.pid ]] && kill "$(cat "$W/$f.pid")" 2>/dev/null || true
  done
  sleep 1
  if ((rc)); then
    echo "slurm_test: FAILED; logs:" >&2
    tail -n 20 "$W"/*.log "$W"/*.out 2>/dev/null >&2 || true
  fi
  rm -rf "$W"
  exit $rc
}
trap cleanup EXIT

# munge: our own key, socket and pid file (never the system's daemon).
dd if=/dev/urandom of="$W/munge.key" bs=1 count=1024 status=none
chmod 400 "$W/munge.key"
mkdir -m 700 "$W/munge"
munged --force --key-file="$W/munge.key" --socket="$W/munge/munge.sock" --pid-file="$W/munged.pid" \
  --log-file="$W/munged.log" --seed-file="$W/munge/seed"

host=$(hostname -s)
port=$((20000 + RANDOM % 20000))
mkdir -p "$W/state" "$W/spool"
cat > "$W/slurm.conf" <<CONF
ClusterName=qforgetest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$W/munge/munge.sock
CredType=cred/munge
StateSaveLocation=$W/state
SlurmdSpoolDir=$W/spool
SlurmctldPidFile=$W/slurmctld.pid
SlurmdPidFile=$W/slurmd.pid
SlurmctldLogFile=$W/slurmctld.log
SlurmdLogFile=$W/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
MpiDefault=none
SlurmctldTimeout=30
SlurmdTimeout=30
NodeName=$host NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=test Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
CONF
export SLURM_CONF=$W/slurm.conf
slurmctld -i
slurmd
for _ in $(seq 60); do
  sinfo -h -o %T 2>/dev/null | grep -qE '^idle' && break
  sleep 1
done
sinfo -h -o %T | grep -qE '^idle' || { echo "slurm_test: the node never became idle" >&2; exit 1; }

wait_jobs() {  # until none of the given jobs is queued or running
  for _ in $(seq 300); do
    [[ -z $(squeue -h -j "$1" 2>/dev/null) ]] && return 0
    sleep 1
  done
  echo "slurm_test: jobs $1 still running" >&2
  return 1
}

cd "$W"
"$BIN/qforge-make-demo" src --layers 4 --hidden 256 --intermediate 768 --vocab 2048 >/dev/null
ARGS=(--preset w4a16 --max-shard-size 1MB --quiet --threads 1)
"$BIN/qforge-convert" src one "${ARGS[@]}" >/dev/null
"$BIN/qforge-convert" plan src out --units 4 "${ARGS[@]}"

export QFORGE_CONVERT="$BIN/qforge-convert"
# Unit 2 stalls before its 3rd tensor (2 written, no record): killed midway below.
array=$(QFORGE_CONVERT_STALL=2:2 sbatch --parsable --chdir="$W" --cpus-per-task=1 --mem=0 --array=0-3 \
  "$ROOT/examples/slurm/work.sbatch" "$W/out")
array=${array%%;*}
for _ in $(seq 300); do
  grep -q stalled "qforge-work-${array}_2.out" 2>/dev/null && break
  sleep 1
done
grep -q stalled "qforge-work-${array}_2.out" || { echo "slurm_test: task 2 never reached its stall point" >&2; exit 1; }
scancel "${array}_2"
wait_jobs "$array"
for t in 0 1 3; do grep -q "1 unit(s) converted" "qforge-work-${array}_$t.out"; done
[[ ! -f .out.qforge-staging/units/unit-00002.json ]]

# finalize refuses, naming unit 2, and writes nothing.
if "$BIN/qforge-convert" finalize out 2> refused.txt; then echo "slurm_test: finalize went ahead" >&2; exit 1; fi
grep -q "unit 2: not converted" refused.txt
[[ ! -e out ]]

# Task 2 alone (SLURM_ARRAY_TASK_COUNT is 1 here; the index still names unit 2), then finalize.
again=$(sbatch --parsable --chdir="$W" --cpus-per-task=1 --mem=0 --array=2 "$ROOT/examples/slurm/work.sbatch" "$W/out")
again=${again%%;*}
final=$(sbatch --parsable --chdir="$W" --cpus-per-task=1 --mem=0 --dependency=afterok:"$again" \
  "$ROOT/examples/slurm/finalize.sbatch" "$W/out")
wait_jobs "$again,$final"
grep -q "1 unit(s) converted" "qforge-work-${again}_2.out"
[[ -d out ]] || { echo "slurm_test: finalize job wrote nothing" >&2; cat "qforge-finalize-$final.out" >&2; exit 1; }
diff -r one out
echo "slurm_test: array of 4 with task 2 killed midway and resubmitted, finalize after afterok: identical to one process"
