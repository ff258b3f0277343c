#!/usr/bin/env bash
# Builds every libFuzzer target in tests/fuzz/fuzz_*.cpp with clang (ASan + UBSan) and runs each
# one for SECONDS (default 60) on its corpus. Fails on the first target that crashes, leaks,
# times out or trips a sanitizer.
#
#   scripts/fuzz.sh [seconds] [target...]      e.g. scripts/fuzz.sh 5   or   scripts/fuzz.sh 300 json
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

seconds="${1:-60}"
shift || true
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
    echo "== run $t for ${seconds}s"
    # rss_limit: a parser that allocates what a header claims shows up as an OOM crash.
    if "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=1024 \
        -max_len=65536 -print_final_stats=1 -artifact_prefix="$out/crashes/$t-" \
        "${dict[@]}" "${corpora[@]}" >"$log" 2>&1; then
        runs="$(grep -Eo 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -Eo '[0-9]+$' || echo '?')"
        cov="$(grep -Eo 'cov: [0-9]+' "$log" | tail -1 || true)"
        summary+=("$t: ${runs} executions in ${seconds}s, ${cov:-cov: ?}, crashes: 0")
    else
        status=1
        summary+=("$t: FAILED (see $log and $out/crashes/$t-*)")
        tail -60 "$log" >&2
    fi
done

echo "== fuzz summary"
printf '%s\n' "${summary[@]}"
exit $status
