#!/usr/bin/env bash
# CTest check of --trace and --log-dir (examples/common/observe.h), on a tiny seq2seq run:
#   observe_check.sh SEQ2SEQ DIR
# The trace is JSON with the steps 2-4 as spans, lanes named, and scripts/trace_svg.py draws one
# step of it as SVG (rendered by rsvg-convert when present); the log directory holds metrics.jsonl
# with every step's training loss and each evaluation, and a TensorBoard event file; a --trace
# that cannot be written is refused before training (exit 2).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/check_lib.sh"  # fail, check_svg
seq2seq="$1" dir="$2"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
rm -rf "$dir" && mkdir -p "$dir" && cd "$dir"
tiny=(--threads 1 --d-model 32 --heads 2 --layers 1 --ff 64 --batch 16 --seq-len 6 --vocab 10 --seed 7)

"$seq2seq" "${tiny[@]}" --steps 20 --eval-every 10 --trace run.trace.json --log-dir logs > run.log
grep -q '^trace of steps 2-4 written to run.trace.json' run.log || fail "no line saying the trace was written"
python3 - <<'PY' || fail "the trace or the log is not what --trace and --log-dir promise"
import glob, json, sys
trace = json.load(open("run.trace.json"))
events = trace["traceEvents"]
steps = sorted(e["name"] for e in events if e["ph"] == "X" and e.get("cat") == "step")
assert steps == ["step 2", "step 3", "step 4"], steps
names = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
assert "main" in names.values(), names
assert all(e["tid"] in names for e in events if e["ph"] == "X"), "a span on an unnamed lane"
assert any(e.get("cat") == "backward" for e in events), "no backward function"
lines = [json.loads(l) for l in open("logs/metrics.jsonl")]
train = [l["step"] for l in lines if l["tag"] == "train/loss"]
assert train == list(range(1, 21)), train
assert [l["step"] for l in lines if l["tag"] == "eval/loss"] == [10, 20]
assert [l["step"] for l in lines if l["tag"] == "eval/accuracy"] == [10, 20]
assert len(glob.glob("logs/events.out.tfevents.*")) == 1
PY
python3 "$root/scripts/trace_svg.py" run.trace.json step.svg --step "step 3"
check_svg step.svg
if command -v rsvg-convert > /dev/null; then rsvg-convert step.svg -o step.png || fail "rsvg-convert cannot render step.svg"; fi

set +e
"$seq2seq" "${tiny[@]}" --steps 5 --trace /nonexistent-dir/t.json > bad.out 2> bad.err; code=$?
set -e
[ "$code" -eq 2 ] || fail "--trace into a missing directory gave exit code $code, not 2"
grep -q -- '--trace' bad.err || fail "the refusal does not name --trace: $(cat bad.err)"
grep -q -- '--trace: --trace' bad.err && fail "the refusal names --trace twice: $(cat bad.err)"
echo "observe: trace, its picture and the log as promised"
