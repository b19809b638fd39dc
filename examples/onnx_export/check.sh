#!/usr/bin/env bash
# CTest examples/onnx_export_in_onnxruntime: every model of onnx_export_cases (nn/'s layers, the
# Transformer, gpt's two architectures, seq2seq) exported, accepted by ONNX's own Python checker
# (onnx.checker.check_model with full_check: strict shape inference), and run in ONNX Runtime
# on inputs other than the export's, its outputs compared with cppgrad's.
#   check.sh ONNX_EXPORT_CASES WORK_DIR
# ONNX Runtime's CPU build comes from the npm package onnxruntime-node, installed into WORK_DIR at
# test time (its binaries are in the package; --ignore-scripts skips an install script that would
# download from a host not reachable here) and kept there, so a second run downloads nothing.
# Exit 77 (CTest: skipped, with the reason printed) when node, npm or Python's onnx is missing.
set -euo pipefail
cases=$1 work=$2
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
for tool in npm node; do
  if ! command -v "$tool" >/dev/null; then
    echo "NOT RUN: $tool is not installed (Debian: apt-get install npm), so ONNX Runtime cannot run the exported models"
    exit 77
  fi
done
python=""
for candidate in python3 /usr/bin/python3; do
  if command -v "$candidate" >/dev/null && "$candidate" -c "import onnx" 2>/dev/null; then python=$candidate; break; fi
done
if [ -z "$python" ]; then
  echo "NOT RUN: no python3 with the onnx module (Debian: apt-get install python3-onnx; scripts/setup installs it)"
  exit 77
fi

package="onnxruntime-node@1.30.0"
module="$work/npm/node_modules/onnxruntime-node"
mkdir -p "$work/npm" "$work/models"
if [ ! -f "$module/package.json" ]; then
  if ! timeout 300 npm install --ignore-scripts --no-audit --no-fund --prefix "$work/npm" "$package" >"$work/npm.log" 2>&1; then
    cat "$work/npm.log"
    echo "FAIL: npm install $package failed (is the npm registry reachable?)"
    exit 1
  fi
fi

rm -f "$work"/models/*
"$cases" "$work/models"
"$python" - "$work/models" <<'PY'
import glob, sys
import onnx
files = sorted(glob.glob(sys.argv[1] + "/*.onnx"))
if not files:
    sys.exit("FAIL: no .onnx file was exported")
for f in files:
    onnx.checker.check_model(f, full_check=True)
    model = onnx.load(f)
    assert model.opset_import[0].version == 17, f
    print(f"onnx.checker (full_check) accepts {f.rsplit('/', 1)[1]}: {len(model.graph.node)} nodes, "
          f"{len(model.graph.initializer)} initializers")
PY
node "$here/run_ort.js" "$module" "$work/models"
