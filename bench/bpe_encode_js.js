// node bpe_encode_js.js MODULE_DIR TEXT: gpt-3-encoder's encode() of the whole text (read as UTF-8)
// once, in this fresh process (its cache of pre-tokens starts empty). Prints one tab-separated line:
//   javascript  <seconds>  <MB/s>  <tokens>  <FNV-1a hash of the ids>
const fs = require('fs');
const path = require('path');
const { encode } = require(path.resolve(process.argv[2]));
const bytes = fs.readFileSync(process.argv[3]);
const text = bytes.toString('utf-8');
const start = process.hrtime.bigint();
const ids = encode(text);
const seconds = Number(process.hrtime.bigint() - start) / 1e9;
let hash = 1469598103934665603n;
const joined = ids.join(' ');
for (let i = 0; i < joined.length; ++i) {
  hash = ((hash ^ BigInt(joined.charCodeAt(i))) * 1099511628211n) & 0xffffffffffffffffn;
}
console.log(['javascript', seconds.toFixed(4), (bytes.length / 1e6 / seconds).toPrecision(3), ids.length,
             hash.toString(16).padStart(16, '0')].join('\t'));
