#!/bin/bash
# After `qforge-convert plan SRC DST --units N ...`: submits the array of N workers and the
# finalize job that runs once every task succeeded (afterok). Extra arguments go to both sbatch
# calls (e.g. --partition=cpu --account=lab).
#   examples/slurm/submit.sh /shared/models/out [sbatch options]
set -euo pipefail
DST=${1:?usage: submit.sh DST [sbatch options]}
shift
HERE=$(cd "$(dirname "$0")" && pwd)
plan="$(dirname "$DST")/.$(basename "$DST").qforge-staging/plan.json"
[[ -f $plan ]] || { echo "submit.sh: no plan at $plan (run qforge-convert plan first)" >&2; exit 1; }
# plan.json lists one {"items":[b,e],"cost":c} per unit.
units=$(grep -o '"items"' "$plan" | wc -l)
array=$(sbatch --parsable "$@" --array=0-$((units - 1)) "$HERE/work.sbatch" "$DST")
array=${array%%;*}
final=$(sbatch --parsable "$@" --dependency=afterok:"$array" "$HERE/finalize.sbatch" "$DST")
echo "workers: job $array (array 0-$((units - 1))), finalize: job ${final%%;*}"
