#!/usr/bin/env bash
# CTest examples/onnx_export_in_onnxruntime: every model of onnx_export_cases (nn/'s layers, the
# Transformer, gpt's two architectures, seq2seq) exported, accepted by ONNX's own Python checker
# (onnx.checker.check_model with full_check: strict shape inference), and run in ONNX Runtime
# on inputs other than the export's, its outputs compared with cppgrad's.
# Then gpt (gpt2 and llama) and seq2seq, trained for two steps, write their --export-onnx files,
# which pass the same checker and run in ONNX Runtime at two sizes each (finite logits of the
# right shape: their numbers are the cases' gpt_* and seq2seq above).
#   check.sh ONNX_EXPORT_CASES GPT SEQ2SEQ WORK_DIR
# ONNX Runtime's CPU build comes from the npm package onnxruntime-node (its binaries are in the
# package), installed into WORK_DIR at test time (tests/common/npm_package.sh).
# Exit 77 (CTest: skipped, with the reason printed) when node, npm or Python's onnx is missing.
set -euo pipefail
cases=$1 gpt=$2 seq2seq=$3 work=$4
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/../../tests/common/npm_package.sh"  # need_npm_package
python=""
for candidate in python3 /usr/bin/python3; do
  if command -v "$candidate" >/dev/null && "$candidate" -c "import onnx" 2>/dev/null; then python=$candidate; break; fi
done
if [ -z "$python" ]; then
  echo "NOT RUN: no python3 with the onnx module (Debian: apt-get install python3-onnx; scripts/setup installs it)"
  exit 77
fi

need_npm_package onnxruntime-node@1.30.0 "$work/npm" && module=$npm_module
mkdir -p "$work/models"

rm -f "$work"/models/*
"$cases" "$work/models"
# The examples' flag: a tiny run each, then their files beside the cases'.
text=/usr/share/common-licenses/GPL-3  # a short text every Debian machine has (base-files)
[ -r "$text" ] || text="$here/../../README.md"
gpt_tiny=(--data "$text" --threads 1 --d-model 32 --seq-len 16 --batch 8 --bpe-vocab 300 --seed 7 --size tiny
          --steps 2 --eval-every 2 --sample-len 0)
"$gpt" "${gpt_tiny[@]}" --export-onnx "$work/models/example_gpt2.onnx" >"$work/gpt2.log"
"$gpt" "${gpt_tiny[@]}" --arch llama --kv-heads 1 --export-onnx "$work/models/example_llama.onnx" >"$work/llama.log"
"$seq2seq" --threads 1 --d-model 32 --heads 2 --layers 1 --ff 64 --batch 16 --seq-len 6 --vocab 10 --seed 7 \
  --steps 2 --eval-every 2 --export-onnx "$work/models/example_seq2seq.onnx" >"$work/seq2seq.log"
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
node "$here/run_examples.js" "$module" "$work/models"
