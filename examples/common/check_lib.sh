# Shell helpers the examples' check.sh scripts share (sourced, not run).

fail() { echo "FAIL: $*" >&2; exit 1; }

# An SVG a browser opens: it starts as XML or <svg, ends with </svg>, and parses when xmllint exists.
check_svg() {
  [ -s "$1" ] || fail "$1 is missing or empty"
  head -c 200 "$1" | grep -q '<svg\|<?xml' || fail "$1 does not start as an SVG"
  tail -c 20 "$1" | grep -q '</svg>' || fail "$1 does not end with </svg>"
  if command -v xmllint > /dev/null; then xmllint --noout "$1" || fail "$1 is not well-formed XML"; fi
}

# The loss of the first and the last progress line (whatever they print: a "nan" must fail the
# numeric check of the caller, not be skipped).
losses() { tr '\r' '\n' < "$1" | grep -o '^step *[0-9]*/[0-9]*  loss [^ ]*' | awk 'NR == 1 { first = $NF } { last = $NF } END { print first, last }'; }

# --save-every 13 --keep-last 2 over a 40-step run: only step-00000039 and step-00000040 are left
# (and no temporary file); with step 40's removed, as if the job had died after step 39 (a step
# between two progress reports), --resume latest continues from 39 and ends with a checkpoint
# byte for byte STRAIGHT's (the same 40 steps run straight with --save). Runs "$@" (the program,
# or scripts/mpirun N program, and the run's options).
check_periodic_resume() {
  local straight="$1"; shift
  rm -rf ck
  "$@" --steps 40 --save-every 13 --keep-last 2 --save-dir ck --resume latest > periodic.log
  grep -q 'no checkpoint in ck yet; starting a new run' periodic.log || fail "--resume latest: no note of a new run"
  [ "$(ls -A ck | tr '\n' ' ')" = "step-00000039.safetensors step-00000040.safetensors " ] \
    || fail "--save-every 13 --keep-last 2 left: $(ls -A ck | tr '\n' ' ')"
  rm ck/step-00000040.safetensors
  "$@" --steps 40 --save-every 13 --keep-last 2 --save-dir ck --resume latest --save latest.safetensors > latest.log
  grep -q 'resumed from ck/step-00000039.safetensors at step 39' latest.log || fail "--resume latest: $(head -n 2 latest.log)"
  cmp "$straight" latest.safetensors || fail "resumed from --save-every's step 39, the run differs from the straight one"
  "$@" --steps 40 --resume ck --save dir.safetensors > dir.log  # a directory: its newest
  grep -q 'resumed from ck/step-00000040.safetensors at step 40' dir.log || fail "--resume ck: $(head -n 2 dir.log)"
}
