#!/usr/bin/env bash
# scripts/check_reading_map refuses a piece that calls a function defined off the map, and
# accepts the same call once the trust list names it. Run on a copy of the floors and the tour.
set -euo pipefail
root=$1
copy=$(mktemp -d)
trap 'rm -rf "$copy"' EXIT
cd "$root"
git ls-files runtime tensor autograd nn optim docs/tour scripts/check_reading_map scripts/reading_map_calls.py |
  tar -cf - -T - | tar -xf - -C "$copy"
cd "$copy"
git init -q . && git add -A

bash scripts/check_reading_map >/dev/null || { echo "FAIL: the untouched copy does not pass"; exit 1; }

# Adam's piece (optim/adam.cpp, from its "// ---- the update") starts calling live_tensor_count(),
# defined in tensor/tensor.cpp, which no piece covers.
sed -i '0,/^\/\/ ---- the update.*/s//&\nstatic const auto tensors_alive = cppgrad::live_tensor_count();/' optim/adam.cpp
git add -A
bash scripts/check_reading_map --update >/dev/null 2>&1 || true  # the counts follow the edit
if out=$(bash scripts/check_reading_map 2>&1); then
  echo "FAIL: a call to live_tensor_count, defined off the map, was accepted"; exit 1
fi
grep -q "optim/adam.cpp:[0-9]* calls live_tensor_count, defined off the map (tensor/tensor.cpp:" <<<"$out" ||
  { echo "FAIL: the refusal does not name the call and its definition:"; echo "$out"; exit 1; }

echo '<!-- reading-map: trust live_tensor_count -->' >>docs/tour/README.md
bash scripts/check_reading_map >/dev/null || { echo "FAIL: a trusted call is still refused"; exit 1; }

# A trust list entry the core does not define is refused too (a stale name).
echo '<!-- reading-map: trust no_such_function -->' >>docs/tour/README.md
if bash scripts/check_reading_map >/dev/null 2>&1; then echo "FAIL: a stale trusted name was accepted"; exit 1; fi
echo "ok: an off-map call is refused, a trusted one accepted, a stale trust entry refused"
