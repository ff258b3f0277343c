#!/usr/bin/env bash
# The workers of examples/kubernetes/convert-indexed-job.yaml, run as plain processes: each
# with JOB_COMPLETION_INDEX (and QFORGE_WORKERS) set as Kubernetes sets them, two at a time on
# one folder; 3 workers over a 5-unit plan; pod 1 "restarted" (run again, nothing to do);
# finalize; the result compared byte for byte with the one-process output. The plan is made
# with relative paths and the workers start in / (a pod's working folder is not the plan's).
#   tests/cluster/indexed_job_test.sh BIN_DIR
set -euo pipefail
BIN=$(cd "${1:?usage: indexed_job_test.sh BIN_DIR}" && pwd)
W=$(mktemp -d /tmp/qforge-indexed-XXXXXX)
trap 'rm -rf "$W"' EXIT
cd "$W"
"$BIN/qforge-make-demo" src --layers 2 --hidden 256 --intermediate 512 --vocab 1024 >/dev/null
ARGS=(--preset w4a16 --max-shard-size 1MB --quiet --threads 1)
"$BIN/qforge-convert" src one "${ARGS[@]}" >/dev/null
"$BIN/qforge-convert" plan src out --units 5 "${ARGS[@]}" >/dev/null
pod() { (cd / && JOB_COMPLETION_INDEX=$1 QFORGE_WORKERS=3 "$BIN/qforge-convert" work "$W/out"); }
pod 0 > w0.txt &
pod 1 > w1.txt &
wait
pod 2 > w2.txt
pod 1 > w1-again.txt
grep -q "worker 0 of 3: 1 unit(s) converted" w0.txt
grep -q "worker 1 of 3: 2 unit(s) converted" w1.txt
grep -q "worker 2 of 3: 2 unit(s) converted" w2.txt
grep -q "0 unit(s) converted, 2 already done" w1-again.txt
(cd / && "$BIN/qforge-convert" finalize "$W/out" >/dev/null 2>&1)
diff -r one out
# The same for a GGUF (one staging file, tensors at planned offsets): 2 pods over 3 units, and
# finalize's --verify-data spelled out (the default; --no-verify-data trusts the records).
GG=(--format gguf --type Q4_K_M --no-vocab --quiet --threads 1)
"$BIN/qforge-convert" src one.gguf "${GG[@]}" >/dev/null
"$BIN/qforge-convert" plan src out.gguf --units 3 "${GG[@]}" >/dev/null
(cd / && JOB_COMPLETION_INDEX=0 QFORGE_WORKERS=2 "$BIN/qforge-convert" work "$W/out.gguf") > g0.txt &
(cd / && JOB_COMPLETION_INDEX=1 QFORGE_WORKERS=2 "$BIN/qforge-convert" work "$W/out.gguf") > g1.txt
wait
(cd / && "$BIN/qforge-convert" finalize "$W/out.gguf" --verify-data >/dev/null 2>&1)
cmp one.gguf out.gguf
echo "indexed_job_test: 3 Indexed Job workers over 5 units, one restarted; a GGUF over 2 workers: identical to one process"
