#!/usr/bin/env bash
# Builds every libFuzzer target in tests/fuzz/fuzz_*.cpp with clang (ASan + UBSan) and runs each
# one for SECONDS (default 60), or for N executions (--runs N), on its corpus. Fails on the first
# target that crashes, leaks, times out or trips a sanitizer.
#
#   scripts/fuzz.sh [seconds] [target...]      e.g. scripts/fuzz.sh 5   or   scripts/fuzz.sh 300 json
#   scripts/fuzz.sh --runs N [target...]       e.g. scripts/fuzz.sh --runs 10000000 json gguf
#   QFORGE_FUZZ_MAX_SECONDS=S caps each --runs target at S seconds too (a campaign's deadline)
#
# The summary gives, per target, the executions, wall time, libFuzzer's final cov / ft (edge and
# feature coverage), the corpus size (libFuzzer's corp: inputs/bytes, and the files it saved in
# build-fuzz/corpus/<target>) and crashes: the row
# tests/hostile/FUZZING.md records for a campaign. A campaign is long: run it at low priority,
# one target at a time (e.g. nice -n 19 scripts/fuzz.sh --runs 10000000 json).
#
# Seeds are committed in tests/fuzz/corpus/<target>/ (made by qforge's own writers through
# tests/fuzz/make_seeds.cpp: `scripts/fuzz.sh --seeds` regenerates them). New inputs that
# libFuzzer discovers go to build-fuzz/corpus/<target>/, never into the repository; a crashing
# input is saved as build-fuzz/crashes/<target>-crash-<sha1> (reproduce: build-fuzz/<target> FILE).
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
out="${QFORGE_FUZZ_OUT:-build-fuzz}"  # another folder for concurrent runs
CXX_FUZZ="${CXX_FUZZ:-clang++}"
flags=(-std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
       -fno-omit-frame-pointer -Iinclude -Itests)

if ! command -v "$CXX_FUZZ" >/dev/null 2>&1; then
    echo "fuzz.sh: $CXX_FUZZ not found (apt-get install clang)" >&2
    exit 1
fi
mkdir -p "$out/crashes" "$out/corpus" "$out/seeds"

if [[ "${1:-}" == "--seeds" ]]; then
    # Regenerate the committed seed corpus with qforge's own writers.
    "$CXX_FUZZ" -std=c++20 -O1 -g -Iinclude -Itests -DQFORGE_SOURCE_DIR="\"$root\"" tests/fuzz/make_seeds.cpp -o "$out/make_seeds"
    "$out/make_seeds" tests/fuzz/corpus
    exit 0
fi

runs=""
seconds=60
if [[ "${1:-}" == "--runs" ]]; then
    runs="${2:?fuzz.sh: --runs needs a number of executions}"
    [[ "$runs" =~ ^[0-9]+$ ]] || { echo "fuzz.sh: --runs $runs is not a number" >&2; exit 1; }
    shift 2
elif [[ $# -gt 0 ]]; then
    seconds="$1"
    [[ "$seconds" =~ ^[0-9]+$ ]] || { echo "fuzz.sh: $seconds is neither seconds nor --runs N" >&2; exit 1; }
    shift
fi
if [[ -n "$runs" ]]; then
    budget=(-runs="$runs")
    what="$runs executions"
    # A campaign with a deadline: stop at N executions or after this many seconds, whichever first.
    if [[ -n "${QFORGE_FUZZ_MAX_SECONDS:-}" ]]; then
        budget+=(-max_total_time="$QFORGE_FUZZ_MAX_SECONDS")
        what+=" or ${QFORGE_FUZZ_MAX_SECONDS}s"
    fi
else
    budget=(-max_total_time="$seconds")
    what="${seconds}s"
fi
targets=("$@")
if [[ ${#targets[@]} -eq 0 ]]; then
    for src in tests/fuzz/fuzz_*.cpp; do
        [[ -e "$src" ]] || continue
        name="$(basename "$src" .cpp)"
        targets+=("${name#fuzz_}")
    done
fi

# Rebuild a target only when its source or any qforge header is newer than the binary, so the
# 5-second CI run costs one compile per target the first time and nothing after.
needs_build() {
    local bin="$1" src="$2"
    [[ ! -x "$bin" ]] && return 0
    [[ "$src" -nt "$bin" ]] && return 0
    [[ -n "$(find include tests/fuzz -name '*.hpp' -newer "$bin" -print -quit)" ]] && return 0
    return 1
}

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:allocator_may_return_null=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"

summary=()
status=0
for t in "${targets[@]}"; do
    src="tests/fuzz/fuzz_$t.cpp"
    bin="$out/fuzz_$t"
    if [[ ! -f "$src" ]]; then
        echo "fuzz.sh: no such target: $src" >&2
        exit 1
    fi
    if needs_build "$bin" "$src"; then
        echo "== build $t"
        "$CXX_FUZZ" "${flags[@]}" "$src" -o "$bin"
    fi
    mkdir -p "$out/corpus/$t"
    corpora=("$out/corpus/$t")
    [[ -d "tests/fuzz/corpus/$t" ]] && corpora+=("tests/fuzz/corpus/$t")
    dict=()
    [[ -f "tests/fuzz/$t.dict" ]] && dict=(-dict="tests/fuzz/$t.dict")
    log="$out/fuzz_$t.log"
    echo "== run $t for $what"
    start=$(date +%s)
    # rss_limit: a parser that allocates what a header claims shows up as an OOM crash.
    if "$bin" "${budget[@]}" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=1024 \
        -max_len=65536 -print_final_stats=1 -artifact_prefix="$out/crashes/$t-" \
        "${dict[@]}" "${corpora[@]}" >"$log" 2>&1; then
        elapsed=$(( $(date +%s) - start ))
        done_runs="$(grep -Eo 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -Eo '[0-9]+$' || echo '?')"
        # libFuzzer's last status line ("#N DONE cov: C ft: F corp: ...") holds the final coverage.
        cov="$(grep -Eo 'cov: [0-9]+ ft: [0-9]+' "$log" | tail -1 || true)"
        corp="$(grep -Eo 'corp: [0-9]+/[0-9]+[a-zA-Z]*' "$log" | tail -1 || true)"
        found="$(find "$out/corpus/$t" -type f | wc -l)"
        summary+=("$t: ${done_runs} executions in ${elapsed}s, ${cov:-cov: ? ft: ?}, ${corp:-corp: ?} (in memory; $found files in $out/corpus/$t), crashes: 0")
    else
        status=1
        summary+=("$t: FAILED (see $log and $out/crashes/$t-*)")
        tail -60 "$log" >&2
    fi
done

echo "== fuzz summary"
printf '%s\n' "${summary[@]}"
exit $status
