#!/usr/bin/env bash
# Builds and runs every qforge test on a fresh Debian 12 machine:
#   1. CMake + g++ (-Werror): unit tests, consumer tests (find_package, add_subdirectory,
#      two translation units), examples and benches compiled;
#   2. meson + clang++ under AddressSanitizer + UBSan: the same unit tests;
#   3. aarch64 cross build (NEON) of the core/quant/simd tests, run under qemu-user;
#   4. every libFuzzer target briefly on its corpus;
#   5. converting on a cluster: a real single-node Slurm (job array, a task killed and
#      resubmitted, finalize after afterok) and Kubernetes Indexed Job workers as processes.
# Missing Debian packages are installed when run as root.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
JOBS=$(nproc 2>/dev/null || echo 2)

packages=(g++ cmake ninja-build meson pkg-config doctest-dev libbenchmark-dev clang
          libclang-rt-14-dev qemu-user g++-aarch64-linux-gnu slurm-wlm munge)
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
  if [[ $(id -u) -eq 0 ]]; then
    echo "== installing: ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    echo "missing packages (run as root to install): ${missing[*]}" >&2
    exit 1
  fi
fi

step() { echo; echo "== $*"; }

# ccache when the machine has it: a rerun recompiles only what changed (meson finds it itself).
launcher=()
command -v ccache >/dev/null 2>&1 && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)

step "CMake + g++: configure, build, ctest"
# -O2 without debug info: the suite is template-heavy and CI has two cores.
cmake -S . -B build/test-gcc -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE=-O2 \
  -DCMAKE_CXX_COMPILER=g++ "${launcher[@]}" >/dev/null
cmake --build build/test-gcc -j "$JOBS"
(cd build/test-gcc && ctest --output-on-failure -j "$JOBS")

step "llama.cpp loads qforge's GGUF files: logits against the reference forward pass"
# Installs a pinned node-llama-cpp (prebuilt llama.cpp) once into ~/.cache/qforge; skips with
# the reason where node >= 20 or linux-x64 is missing.
tests/gguf/llama_logits_test.sh build/test-gcc

step "meson + clang++ with AddressSanitizer and UBSan: build, meson test"
# meson finds test files at configure time, so an existing build folder is reconfigured.
reconfigure=()
[[ -f build/test-meson-clang/build.ninja ]] && reconfigure=(--reconfigure)
# The example programs are built (and run by tests) in the CMake build; here only the suite.
CXX=clang++ meson setup "${reconfigure[@]}" build/test-meson-clang -Db_sanitize=address,undefined \
  -Db_lundef=false -Dbuildtype=plain -Dcpp_args="['-O1','-fno-sanitize-recover=all']" -Dexamples=false >/dev/null
meson compile -C build/test-meson-clang -j "$JOBS"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  meson test -C build/test-meson-clang --print-errorlogs --num-processes "$JOBS"

step "aarch64 (NEON) cross build, tests under qemu-user"
cmake -S . -B build/test-aarch64 -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_TOOLCHAIN_FILE="$ROOT/cmake/toolchains/aarch64-linux-gnu.cmake" \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -DQFORGE_TEST_LAYERS="core;quant;simd;layout" -DQFORGE_BUILD_BENCH=OFF \
  -DQFORGE_BUILD_EXAMPLES=OFF -DQFORGE_CONSUMER_TESTS=OFF "${launcher[@]}" >/dev/null
cmake --build build/test-aarch64 -j "$JOBS"
(cd build/test-aarch64 && ctest --output-on-failure -j "$JOBS")

if [[ -x scripts/fuzz.sh ]]; then
  step "libFuzzer targets, a few seconds each"
  scripts/fuzz.sh 5
fi

step "cluster: Slurm job array on a single-node Slurm, Indexed Job workers (tests/cluster/*.sh)"
tests/cluster/slurm_test.sh build/test-gcc/examples
tests/cluster/indexed_job_test.sh build/test-gcc/examples

echo
echo "== all qforge tests passed"
echo "suites: 5 passed, 0 failed"
