#!/bin/sh
# The main job, end to end, on a fresh Debian 12 machine, from the repository root:
#   1. install the build tools if missing (when run as root),
#   2. build the example programs (build-demo/, Release),
#   3. generate the deterministic demo checkpoint (Llama-like, bf16, two shards, tied embeddings),
#   4. convert it with the w4a8-cpu preset (GPTQ v1, sym 4-bit g64, 8-candidate search, bf16
#      scales, lm_head untied and quantized: vLLM's CPU W4A8 kernel),
#   5. decode every quantized layer independently of the converter and print its SNR against
#      the source weights.
set -eu
cd "$(dirname "$0")/.."

need=""
command -v cmake >/dev/null 2>&1 || need="$need cmake"
command -v g++ >/dev/null 2>&1 || need="$need g++"
command -v ninja >/dev/null 2>&1 || need="$need ninja-build"
if [ -n "$need" ]; then
    if [ "$(id -u)" = 0 ]; then
        apt-get update -qq && apt-get install -y -qq $need
    else
        echo "demo.sh: missing:$need (run as root to install them)" >&2
        exit 1
    fi
fi

build=build-demo
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DQFORGE_BUILD_TESTS=OFF -DQFORGE_BUILD_BENCH=OFF -DQFORGE_CONSUMER_TESTS=OFF >/dev/null
cmake --build "$build" --target qforge-make-demo qforge-convert qforge-inspect

work="$build/demo-run"
rm -rf "$work"
mkdir -p "$work"
start=$(date +%s)
"$build/examples/qforge-make-demo" "$work/demo"
"$build/examples/qforge-convert" "$work/demo" "$work/out" --preset w4a8-cpu
"$build/examples/qforge-inspect" "$work/out" --against "$work/demo"
echo "demo.sh: converted and verified in $(( $(date +%s) - start )) s; output in $work/out"
