// Runs the files that gpt and seq2seq wrote with --export-onnx in ONNX Runtime, each at two sizes
// other than the export's: the logits must have the inputs' batch and length and be finite.
//   node run_examples.js ONNXRUNTIME_NODE_MODULE DIR
'use strict';
const path = require('path');
const [moduleDir, dir] = process.argv.slice(2);
const ort = require(moduleDir);

const ids = (b, t, vocab) => new ort.Tensor('int64', BigInt64Array.from({ length: b * t }, (_, i) => BigInt((i * 7 + 3) % vocab)), [b, t]);
const pad = (b, t) => new ort.Tensor('bool', Uint8Array.from({ length: b * t }, (_, i) => (i % t) >= t - (Math.floor(i / t) % 2)), [b, t]);

const cases = [
  { file: 'example_gpt2.onnx', sizes: [[3, 16], [1, 5]], feeds: ([b, t]) => ({ tokens: ids(b, t, 300) }) },
  { file: 'example_llama.onnx', sizes: [[2, 20], [4, 1]], feeds: ([b, t]) => ({ tokens: ids(b, t, 300) }) },
  { file: 'example_seq2seq.onnx', sizes: [[3, 7], [1, 2]],
    feeds: ([b, t]) => ({ src: ids(b, t, 10), tgt_in: ids(b, t + 1, 10), src_pad: pad(b, t), tgt_pad: pad(b, t + 1) }),
    length: ([b, t]) => t + 1 },
];

async function main() {
  let failed = 0;
  for (const c of cases) {
    const session = await ort.InferenceSession.create(path.join(dir, c.file));
    for (const size of c.sizes) {
      const { logits } = await session.run(c.feeds(size));
      const length = c.length ? c.length(size) : size[1];
      const finite = logits.data.every(Number.isFinite);
      const ok = logits.dims[0] === size[0] && logits.dims[1] === length && finite;
      console.log(`${ok ? 'ok  ' : 'FAIL'} ${c.file} batch ${size[0]}, length ${length}: logits [${logits.dims}]` +
                  (finite ? '' : ', not all finite'));
      if (!ok) failed++;
    }
  }
  if (failed) {
    console.log(`FAIL: ${failed} run(s) of the examples' files`);
    process.exit(1);
  }
}

main().catch((e) => { console.log(`FAIL: ${e.stack || e}`); process.exit(1); });
