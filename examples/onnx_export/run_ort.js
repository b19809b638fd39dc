// Runs every case of manifest.json (written by onnx_export_cases) in ONNX Runtime and compares its
// output with cppgrad's, element by element: |ort − cppgrad| ≤ atol + rtol·|cppgrad|.
//   node run_ort.js ONNXRUNTIME_NODE_MODULE DIR
// Exit status 1 when any output differs or a model does not load or run.
'use strict';
const fs = require('fs');
const path = require('path');
const [moduleDir, dir] = process.argv.slice(2);
const ort = require(moduleDir);

// float32 kernels that add in different orders (OpenBLAS's GEMM against MLAS's, fused attention
// against MatMul/Softmax) differ by a few units in the last place of each partial sum; through
// the deepest case here (2 encoder + 2 decoder layers of width 16) that stays below 1e-5 relative
// to values of order 1. 1e-5 absolute covers outputs near zero, where relative error means nothing.
// (The float64 case meets the same bound with room to spare; it checks the types, not rounding.)
const rtol = 1e-5, atol = 1e-5;

const arrays = {
  float32: (buf) => new Float32Array(buf.buffer, buf.byteOffset, buf.length / 4),
  float64: (buf) => new Float64Array(buf.buffer, buf.byteOffset, buf.length / 8),
  int64: (buf) => new BigInt64Array(buf.buffer, buf.byteOffset, buf.length / 8),
  bool: (buf) => new Uint8Array(buf.buffer, buf.byteOffset, buf.length),
};

function load(entry) {
  const raw = fs.readFileSync(path.join(dir, entry.file));
  const buf = new Uint8Array(raw.length);  // its own ArrayBuffer at offset 0: aligned for any element type
  buf.set(raw);
  return new ort.Tensor(entry.dtype, arrays[entry.dtype](buf), entry.shape);
}

async function main() {
  const cases = JSON.parse(fs.readFileSync(path.join(dir, 'manifest.json'), 'utf8'));
  let failed = 0;
  for (const c of cases) {
    const session = await ort.InferenceSession.create(path.join(dir, c.model));
    for (const [r, run] of c.runs.entries()) {
      const feeds = {};
      for (const [name, entry] of Object.entries(run.inputs)) feeds[name] = load(entry);
      const got = (await session.run(feeds)).output;
      const want = load(run.output);
      const shapes = `[${want.dims}]`;
      if (`[${got.dims}]` !== shapes) {
        console.log(`FAIL ${c.name} run ${r}: ORT's output is [${got.dims}], cppgrad's ${shapes}`);
        failed++;
        continue;
      }
      let worst = 0, worstRatio = 0, nan = 0;
      for (let i = 0; i < want.data.length; i++) {
        const a = got.data[i], b = want.data[i];
        if (Number.isNaN(a) || Number.isNaN(b)) { nan += Number.isNaN(a) !== Number.isNaN(b); continue; }
        const diff = Math.abs(a - b);
        worst = Math.max(worst, diff);
        worstRatio = Math.max(worstRatio, diff / (atol + rtol * Math.abs(b)));
      }
      const ok = worstRatio <= 1 && nan === 0;
      const inputs = Object.entries(run.inputs).map(([n, e]) => `${n} [${e.shape}]`).join(', ');
      console.log(`${ok ? 'ok  ' : 'FAIL'} ${c.name} run ${r} (${inputs}) -> ${shapes}: ` +
                  `max |ort - cppgrad| = ${worst.toExponential(2)}, ${(worstRatio * 100).toFixed(1)}% of the tolerance` +
                  (nan ? `, ${nan} NaN in one only` : ''));
      if (!ok) failed++;
    }
  }
  if (failed) {
    console.log(`FAIL: ${failed} run(s) differ from cppgrad's outputs`);
    process.exit(1);
  }
}

main().catch((e) => { console.log(`FAIL: ${e.stack || e}`); process.exit(1); });
