// node encode.js MODULE_DIR FILE...: gpt-3-encoder's tokens of each file (read as UTF-8), one line
// of space-separated ids per file; MODULE_DIR is where npm installed the package.
const fs = require('fs');
const path = require('path');
const { encode } = require(path.resolve(process.argv[2]));
for (const file of process.argv.slice(3)) {
  console.log(encode(fs.readFileSync(file, 'utf-8')).join(' '));
}
