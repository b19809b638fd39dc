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
