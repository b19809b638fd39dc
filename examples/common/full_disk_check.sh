#!/usr/bin/env bash
# CTest check that no output file is left half-written: every file the training programs write
# (--trace, --plot, --attention, --export-onnx, --save, gpt's --save-hf) is aimed at a full disk.
# Each run must exit non-zero with a message naming the file, and leave nothing in the directory:
# no truncated file at the target, no temporary.
#   full_disk_check.sh SEQ2SEQ GPT DIR
# The full disk is a 64 KB tmpfs filled up by a file of its own (.filler), mounted in a private
# mount namespace (unshare -m, as root), so nothing is left mounted however the script ends.
# Where no tmpfs can be mounted, a 4 KB limit on the size of any file the program writes
# (ulimit -f, with SIGXFSZ ignored so that a write past it fails with EFBIG instead of killing the
# process) stands in for it; every output of these runs is larger than 4 KB.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/check_lib.sh"  # fail
seq2seq="$1" gpt="$2" dir="$3"

if [ -z "${FULL_DISK_INSIDE:-}" ]; then
  rm -rf "$dir" && mkdir -p "$dir/full"
  if [ "$(id -u)" -eq 0 ] && unshare -m --propagation private true 2> /dev/null; then
    exec env FULL_DISK_INSIDE=tmpfs unshare -m --propagation private bash "${BASH_SOURCE[0]}" "$@"
  fi
  exec env FULL_DISK_INSIDE=ulimit bash "${BASH_SOURCE[0]}" "$@"
fi
cd "$dir"
if [ "$FULL_DISK_INSIDE" = tmpfs ]; then
  mount -t tmpfs -o size=64k tmpfs full || fail "cannot mount a 64 KB tmpfs on $dir/full"
  head -c 1M /dev/zero > full/.filler 2> /dev/null || true  # stops where the disk is full
  [ "$(df --output=avail -B1 full | tail -n 1)" -eq 0 ] || fail "full/ is not full: $(df -B1 full | tail -n 1)"
  limit=()
  echo "full disk: a 64 KB tmpfs, filled"
else
  limit=(ulimit -f 4)  # blocks of 1024 bytes
  echo "full disk: no tmpfs here (not root, or no mount namespace); ulimit -f 4 instead"
fi

tiny=(--threads 1 --d-model 32 --heads 2 --layers 1 --ff 64 --batch 16 --seq-len 6 --vocab 10 --seed 7)
data=/usr/share/common-licenses/GPL-3
[ -r "$data" ] || data="$(dirname "${BASH_SOURCE[0]}")/../../README.md"
gpt_tiny=(--data "$data" --threads 1 --size tiny --d-model 32 --seq-len 32 --batch 8 --bpe-vocab 320 --seed 7
          --sample-len 0)

# expect_failed_write TARGET PROGRAM ARGS...: the run exits non-zero naming TARGET on stderr and
# leaves nothing in the full directory.
expect_failed_write() {
  local target="$1"; shift
  set +e
  (trap '' XFSZ; "${limit[@]}" 2> /dev/null; "$@" > run.out 2> run.err); local code=$?
  set -e
  [ "$code" -ne 0 ] || fail "$* exited 0 with $target not written: $(cat run.out run.err | tail -n 3)"
  grep -q -- "$target" run.err || fail "$* (exit $code) does not name $target: $(head -c 400 run.err)"
  [ -z "$(ls -A full | grep -vx '.filler')" ] || fail "$* (exit $code) left in full/: $(ls -lA full)"
  echo "exit $code: $(head -n 1 run.err)"
}

# 4 steps: steps 2-4 are traced and written after the loop (this wrote a cut trace and exited 0);
# 8 steps: written inside the loop, before step 5.
expect_failed_write full/run.trace.json "$seq2seq" "${tiny[@]}" --steps 4 --trace full/run.trace.json
expect_failed_write full/run.trace.json "$seq2seq" "${tiny[@]}" --steps 8 --trace full/run.trace.json
expect_failed_write full/loss.svg "$seq2seq" "${tiny[@]}" --steps 4 --plot full/loss.svg
expect_failed_write full/attention.svg "$seq2seq" "${tiny[@]}" --steps 4 --attention full/attention.svg
expect_failed_write full/model.onnx "$seq2seq" "${tiny[@]}" --steps 4 --export-onnx full/model.onnx
expect_failed_write full/run.safetensors "$seq2seq" "${tiny[@]}" --steps 4 --save full/run.safetensors
expect_failed_write full/gpt.svg "$gpt" "${gpt_tiny[@]}" --steps 30 --eval-every 10 --plot full/gpt.svg
# --save-hf makes the directory itself; the weights do not fit, so the directory is left empty.
set +e
(trap '' XFSZ; "${limit[@]}" 2> /dev/null; "$gpt" "${gpt_tiny[@]}" --steps 4 --save-hf full/hf > run.out 2> run.err)
code=$?
set -e
[ "$code" -ne 0 ] || fail "gpt --save-hf full/hf exited 0 with nothing written"
grep -q 'full/hf' run.err || fail "gpt --save-hf (exit $code) does not name full/hf: $(head -c 400 run.err)"
[ -z "$(find full -type f ! -name .filler)" ] || fail "gpt --save-hf (exit $code) left: $(find full -type f)"

# And the same runs with room to write do write (the failures above are the disk's, not the runs').
"$seq2seq" "${tiny[@]}" --steps 4 --trace run.trace.json --plot loss.svg > ok.out
python3 -c 'import json, sys; json.load(open("run.trace.json"))' || fail "the trace written with room is not JSON"
check_svg loss.svg
echo "full disk: every output refused whole, none left half-written"
