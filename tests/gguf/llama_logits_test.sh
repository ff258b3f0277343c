#!/usr/bin/env bash
# llama.cpp itself loads the GGUF files qforge writes and its logits are held against an
# independent forward pass.
#
#   tests/gguf/llama_logits_test.sh BUILD_DIR
#
# BUILD_DIR holds examples/qforge-convert and tests/gguf_reference_logits (the CMake build).
# 1. node-llama-cpp (pinned, with its prebuilt CPU llama.cpp) is installed once into a cache
#    folder outside the repository ($QFORGE_NODE_CACHE, else $XDG_CACHE_HOME/qforge, else
#    ~/.cache/qforge); later runs reuse it. Only the linux-x64 binary package is fetched (85 MB,
#    not the 725 MB of every CUDA/Vulkan/ARM variant npm would pull as optional dependencies).
#    Measured here: install 21 s (network-bound), then the whole test about 7 s.
# 2. stories260k (../shared/fixtures/stories260k: a trained Llama, bf16, tied head, GQA 8/4,
#    head_dim 8, K = 172 for ffn_down) is converted by qforge-convert to F32, F16, Q8_0, Q4_0
#    and Q4_K_M. It has no tokenizer; llama.cpp front ends assert on a file without one
#    (--no-vocab), so a byte-level BPE tokenizer.json of 256 byte tokens is written next to a
#    copy of the checkpoint (the logits never depend on it: the test feeds token ids).
# 3. gguf_reference_logits decodes each file's weights with qforge's dequantizers, un-permutes
#    q/k with convert_hf_to_gguf's formula, and runs tests/support/llama_reference.hpp (the
#    Hugging Face Llama definition, hyperparameters from config.json); llama_logits.mjs loads
#    the file in llama.cpp and compares the raw logits after each of 24 tokens.
# 4. The same for a generated gpt-oss (llama.cpp architecture gpt-oss, attention sinks, sliding
#    window, MoE with biases) from bf16 and from OpenAI's native MXFP4 (--repack), against
#    gguf_gpt_oss_reference_logits (the Hugging Face GptOss definition).
#
# Skips (exit 0, saying why) where node >= 20 / npm are missing, the machine is not linux-x64
# (the prebuilt binary's platform), npm cannot reach its registry, or the binary will not load; QFORGE_REQUIRE_LLAMA_CPP=1 turns a skip into a
# failure.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
BUILD=$(cd "${1:?usage: $0 BUILD_DIR}" && pwd)
NLC_VERSION=3.22.1  # node-llama-cpp 3.22.1 ships llama.cpp release v0.5.0 (its _nlcBuildMetadata.json)
SRC=$ROOT/../shared/fixtures/stories260k

skip() {
  echo "llama_logits_test: SKIP: $*"
  [[ ${QFORGE_REQUIRE_LLAMA_CPP:-0} == 1 ]] && exit 1
  exit 0
}
command -v node >/dev/null && command -v npm >/dev/null || skip "node and npm are needed (node-llama-cpp)"
(( $(node -p 'process.versions.node.split(".")[0]') >= 20 )) || skip "node-llama-cpp $NLC_VERSION needs node >= 20, found $(node --version)"
[[ $(node -p 'process.platform + "-" + process.arch') == linux-x64 ]] || skip "the prebuilt llama.cpp used here is linux-x64 only"
[[ -f $SRC/model.safetensors ]] || skip "no fixture at $SRC"

cache=${QFORGE_NODE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/qforge}/node-llama-cpp-$NLC_VERSION
t0=$(date +%s)
if [[ ! -f $cache/node_modules/@node-llama-cpp/linux-x64/package.json ]]; then
  mkdir -p "$cache"
  echo '{"private": true}' >"$cache/package.json"
  # --ignore-scripts: its postinstall would only try to download or build other binaries.
  npm install --prefix "$cache" --no-audit --no-fund --ignore-scripts --omit=optional --loglevel=error \
    "node-llama-cpp@$NLC_VERSION" "@node-llama-cpp/linux-x64@$NLC_VERSION" >/dev/null ||
    skip "npm could not install node-llama-cpp@$NLC_VERSION (no registry access?)"
fi
t1=$(date +%s)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/src"
cp "$SRC/config.json" "$SRC/model.safetensors" "$work/src/"  # copies: qforge refuses symlinks leaving the folder
# 256 byte-level tokens (GPT-2's bytes_to_unicode), one merge; ids 257..511 become [PAD<i>].
node -e '
  const bs = [];
  for (let b = 33; b <= 126; ++b) bs.push(b);
  for (let b = 161; b <= 172; ++b) bs.push(b);
  for (let b = 174; b <= 255; ++b) bs.push(b);
  const cs = bs.slice();
  for (let b = 0, n = 0; b < 256; ++b) if (!bs.includes(b)) { bs.push(b); cs.push(256 + n++); }
  const vocab = {};
  bs.forEach((b, i) => { vocab[String.fromCodePoint(cs[i])] = b; });
  vocab["\u0120t"] = 256;
  const tok = { model: { type: "BPE", vocab, merges: ["\u0120 t"] }, pre_tokenizer: { type: "ByteLevel" }, decoder: { type: "ByteLevel" } };
  require("fs").writeFileSync(process.argv[1], JSON.stringify(tok));' "$work/src/tokenizer.json"

# A fixed sequence over the whole vocabulary range, BOS first; 24 positions exercise RoPE well
# past the first rotation of its slowest pair that matters here.
TOKENS=1,403,28,317,67,281,489,12,350,73,198,445,5,260,129,37,500,311,90,222,61,415,147,2

# Bounds, from measured differences (x86-64 AVX-512 host, llama.cpp v0.5.0 CPU build, K/V cache
# in F32; every run prints the measured figures next to each bound). dlogit = max |logit
# difference| and dp = max |probability difference| over all 24 positions x 512 tokens.
#   F32    measured dlogit 8.8e-6, dp 1.2e-6 (llama.cpp's float32 against the double-
#          accumulated reference). Bounds 2e-4 / 2e-5: 20x margin for other CPUs' kernels, and
#          still under what a wrong hyperparameter costs: RMSNorm eps 1e-6 instead of 1e-5
#          moves the logits by 1.2e-3, RoPE base 500000 by 4.9, q/k rows left GGUF-permuted by
#          7.4 (the "!" cases below run exactly these and must fail).
#   F16    llama.cpp rounds the activations to f16 for F16 matmuls on the CPU (the weights are
#          bf16 values, exact in f16 here: SNR 167 dB); measured 7.1e-3 / 3.4e-4, bounds
#          3e-2 / 3e-3.
#   Q8_0, Q4_0, Q4_K_M  llama.cpp's CPU dot products quantize the activations too (Q8_0 blocks,
#          Q8_K for the K-quants), which the reference (float activations over the decoded
#          weights) does not; measured dlogit 0.18 / 0.20 / 0.20, dp 0.016 / 0.029 / 0.024.
#          Bounds 0.5 / 0.06: 2.5x, an order of magnitude under a wrong RoPE base or an
#          un-permuted q/k (both also run against the Q4_K_M file below and must fail).
#   Weights: the decoded, un-permuted weights against the source, min SNR over all 47 tensors:
#          F32 exact (printed as 999), F16 167 dB, Q8_0 44 dB, Q4_0 20 dB, Q4_K_M 26 dB (the
#          worst is layer 0's v_proj each time); bounds 3 to 6 dB under, so a quantizer that
#          gets worse fails, and a wrong permutation (-3 dB) fails whatever the type.
cases=()
f32_bounds=2e-4:2e-5:900 q4km_bounds=0.5:0.06:22
for spec in F32:$f32_bounds F16:3e-2:3e-3:160 Q8_0:0.5:0.06:40 Q4_0:0.5:0.06:17 Q4_K_M:$q4km_bounds; do
  IFS=: read -r type dl dp snr <<<"$spec"
  "$BUILD/examples/qforge-convert" "$work/src" "$work/$type.gguf" --format gguf --type "$type" --pre-tokenizer gpt-2 --quiet >/dev/null
  "$BUILD/tests/gguf_reference_logits" "$work/$type.gguf" "$SRC" "$TOKENS" >"$work/$type.json"
  cases+=("$type:$work/$type.gguf:$work/$type.json:$dl:$dp:$snr")
done
# The same comparison with a reference broken on purpose must fail at the F32 (and Q4_K_M) bounds: a wrong
# RoPE base, q/k rows not un-permuted (what a missing or wrong permutation in qforge looks
# like), a wrong RMSNorm epsilon.
for broken in rope-theta no-unpermute eps; do
  "$BUILD/tests/gguf_reference_logits" "$work/F32.gguf" "$SRC" "$TOKENS" "$broken" >"$work/$broken.json"
  cases+=("!$broken:$work/F32.gguf:$work/$broken.json:$f32_bounds")
done
for broken in rope-theta no-unpermute; do
  "$BUILD/tests/gguf_reference_logits" "$work/Q4_K_M.gguf" "$SRC" "$TOKENS" "$broken" >"$work/q4km-$broken.json"
  cases+=("!Q4_K_M-$broken:$work/Q4_K_M.gguf:$work/q4km-$broken.json:$q4km_bounds")
done

# gpt-oss (llama.cpp architecture gpt-oss): the generator's bf16 gpt-oss (2 layers, hidden 256,
# 8 heads of 32 over 4 KV heads, 4 experts of 128, top 2, attention biases and sinks) and its
# native-MXFP4 twin (OpenAI's layout, the same weights with MXFP4 experts), both given a sliding
# window of 6 so that the 24 positions cross it on the even layers, and the byte-level
# tokenizer above. gguf_gpt_oss_reference_logits runs tests/support/gpt_oss_reference.hpp (the
# Hugging Face GptOss definition: sinks in the softmax, the window, top-k softmax routing, the
# clamped swiglu with alpha 1.702) over the decoded weights.
#   F32            measured dlogit 5.8e-7, dp 3.0e-9; bounds as the Llama's F32.
#   Q8_0, MXFP4_MOE from bf16, MXFP4_MOE --repack from native (experts' codes copied): measured
#                  dlogit 1.4e-2 / 1.5e-2 / 1.4e-2, dp 3.9e-5 / 4.0e-5 / 3.8e-5 (llama.cpp
#                  quantizes the activations to Q8_0 for these dot products). Bounds 0.1 / 3e-4.
#   Broken references (must fail): sinks left out (dlogit 0.47), each expert's gate and up
#                  exchanged, i.e. the even/odd split read the other way (0.77 on F32, 0.81 on the
#                  repacked file), every layer attending fully (0.78).
#   Weights, min SNR: F32 exact, Q8_0 42.8 dB, MXFP4_MOE 17.9 dB (the requantized experts), the
#                  repack 43.4 dB: its experts decode exactly to the native blocks' values, the
#                  minimum is a Q8_0 tensor; a requantized expert (~18 dB) would fail its bound.
for kind in gpt-oss gpt-oss-mxfp4; do
  "$BUILD/examples/qforge-make-demo" "$work/$kind" --moe "$kind" --layers 2 --hidden 256 --vocab 512 --experts 4 \
    --moe-intermediate 128 >/dev/null
  cp "$work/src/tokenizer.json" "$work/$kind/tokenizer.json"
  node -e 'const fs = require("fs"), f = process.argv[1], c = JSON.parse(fs.readFileSync(f));
    c.sliding_window = 6; fs.writeFileSync(f, JSON.stringify(c, null, 2));' "$work/$kind/config.json"
done
oss_f32_bounds=2e-4:2e-5:900 oss_q_bounds=0.1:3e-4
for spec in gpt-oss:F32:$oss_f32_bounds gpt-oss:Q8_0:$oss_q_bounds:40 gpt-oss:MXFP4_MOE:$oss_q_bounds:15 \
            gpt-oss-mxfp4:MXFP4_MOE:$oss_q_bounds:40:--repack; do
  IFS=: read -r kind type dl dp snr repack <<<"$spec"
  out="$work/$kind-$type${repack:+-repack}"
  "$BUILD/examples/qforge-convert" "$work/$kind" "$out.gguf" --format gguf --type "$type" $repack --pre-tokenizer gpt-4o --quiet >/dev/null
  "$BUILD/tests/gguf_gpt_oss_reference_logits" "$out.gguf" "$work/$kind" "$TOKENS" >"$out.json"
  cases+=("$(basename "$out"):$out.gguf:$out.json:$dl:$dp:$snr")
done
for broken in no-sinks swap-gate-up no-window; do
  "$BUILD/tests/gguf_gpt_oss_reference_logits" "$work/gpt-oss-F32.gguf" "$work/gpt-oss" "$TOKENS" "$broken" >"$work/oss-$broken.json"
  cases+=("!gpt-oss-$broken:$work/gpt-oss-F32.gguf:$work/oss-$broken.json:$oss_f32_bounds")
done
"$BUILD/tests/gguf_gpt_oss_reference_logits" "$work/gpt-oss-mxfp4-MXFP4_MOE-repack.gguf" "$work/gpt-oss-mxfp4" "$TOKENS" swap-gate-up \
  >"$work/oss-repack-swap.json"
cases+=("!gpt-oss-repack-swap:$work/gpt-oss-mxfp4-MXFP4_MOE-repack.gguf:$work/oss-repack-swap.json:$oss_q_bounds:40")
t2=$(date +%s)
rc=0
QFORGE_NODE_LLAMA_CPP=$cache node --no-warnings "$ROOT/tests/gguf/llama_logits/llama_logits.mjs" "$TOKENS" "${cases[@]}" || rc=$?
((rc == 3)) && skip "the prebuilt llama.cpp binary does not run on this machine (message above)"
((rc == 0)) || { echo "llama_logits_test: FAILED"; exit 1; }
t3=$(date +%s)
echo "llama_logits_test: passed (install/cache $((t1 - t0)) s, convert + reference $((t2 - t1)) s, llama.cpp $((t3 - t2)) s)"
