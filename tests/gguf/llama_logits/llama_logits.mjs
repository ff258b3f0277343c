// llama.cpp's side of tests/gguf/llama_logits_test.sh: loads GGUF files in the llama.cpp that
// node-llama-cpp ships prebuilt (CPU build, never compiled here), feeds a fixed token sequence
// and compares the raw logits after every token with the reference's (reference_logits.cpp).
//
//   QFORGE_NODE_LLAMA_CPP=DIR node llama_logits.mjs TOKENS CASE...
//   CASE = label:file.gguf:reference.json:max_dlogit:max_dp:min_weight_snr_db ("!label": must exceed a bound)
//
// Prints one line per case (max |d logit|, max |d p| over every position and vocabulary entry,
// the reference's weight SNR against the source) and exits 1 when any case exceeds its bounds.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";

// node-llama-cpp lives in the test's cache folder, not beside this file: resolved from there
// (ES modules ignore NODE_PATH).
const from = createRequire(process.env.QFORGE_NODE_LLAMA_CPP + "/package.json");
const { getLlama, LlamaLogLevel } = await import(pathToFileURL(from.resolve("node-llama-cpp")).href);

const [tokensArg, ...cases] = process.argv.slice(2);
const tokens = tokensArg.split(",").map(Number);

function softmax(v) {
  const mx = Math.max(...v);
  const e = v.map((x) => Math.exp(x - mx));
  const z = e.reduce((a, b) => a + b, 0);
  return e.map((x) => x / z);
}

// build: "never" — only the prebuilt binary; a missing or unusable one is a failure to report,
// not a 10-minute source build.
// Exit 3 says the binary cannot run on this machine (the script reports it as a skip).
let llama;
try {
  llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
} catch (e) {
  console.log(`the prebuilt llama.cpp of node-llama-cpp cannot run here: ${e.message}`);
  process.exit(3);
}
let failed = false;
for (const c of cases) {
  const [label, file, refFile, maxDLogit, maxDp, minSnr] = c.split(":");
  const ref = JSON.parse(readFileSync(refFile, "utf8"));
  const model = await llama.loadModel({ modelPath: file });
  const context = await model.createContext({
    contextSize: 64, batchSize: 64, threads: 1, sequences: 1,
    // The reference keeps K and V in float; llama.cpp's default F16 cache alone moves the
    // logits by ~1e-2, which would hide small real errors under the F32 bound.
    experimentalKvCacheKeyType: "F32", experimentalKvCacheValueType: "F32", flashAttention: false,
  });
  const seq = context.getSequence();
  const out = await seq.controlledEvaluate(tokens.map((t) => [t, { generateNext: { logits: true } }]));
  let dl = 0, dp = 0;
  for (let i = 0; i < tokens.length; ++i) {
    const got = new Array(ref.logits[i].length).fill(-Infinity);
    for (const [tok, v] of out[i].next.logits) got[tok] = v;
    const pg = softmax(got), pr = softmax(ref.logits[i]);
    for (let j = 0; j < got.length; ++j) {
      dl = Math.max(dl, Math.abs(got[j] - ref.logits[i][j]));
      dp = Math.max(dp, Math.abs(pg[j] - pr[j]));
    }
  }
  const snr = ref.weights.min_snr_db;
  const within = dl <= Number(maxDLogit) && dp <= Number(maxDp) && snr >= Number(minSnr);
  // A label starting with "!" is a broken reference the comparison must reject.
  const expectFail = label.startsWith("!");
  const ok = within !== expectFail;
  failed ||= !ok;
  console.log(`${ok ? "ok  " : "FAIL"} ${(expectFail ? label + " (must fail)" : label).padEnd(24)} max|dlogit| ${dl.toExponential(2)} (<= ${maxDLogit})` +
              `  max|dp| ${dp.toExponential(2)} (<= ${maxDp})  weights min SNR ${snr.toFixed(1)} dB (>= ${minSnr}, ${ref.weights.tensor})`);
  await context.dispose();
  await model.dispose();
}
await llama.dispose();
process.exit(failed ? 1 : 0);
