#!/usr/bin/env bash
# check_refusals.sh LESSON: the lesson program refuses bad options with a line naming the value
# and a usage exit code, never an abort and never by running anyway. Each case below once
# crashed (an uncaught exception from the symbol count's conversion), named the wrong value,
# wrapped a negative seed around, or was ignored because the option belongs to another lesson.
set -u
lesson=$1
failed=0
expect() {  # TEXT ARGS...: exit code 2 (a refusal, as every example program's), and TEXT in what it printed
  local text=$1 out rc
  shift
  out=$("$lesson" "$@" 2>&1)
  rc=$?
  if ((rc != 2)) || [[ $out != *"$text"* ]]; then
    echo "lesson $*: exit code $rc, expected a refusal saying \"$text\"; it printed:" >&2
    echo "$out" | head -5 >&2
    failed=1
  fi
}
expect "Value abc not in range 2 to 1000" 8 --heads-symbols abc
expect "Value 99999999999999999999 not in range 2 to 1000" 8 --heads-symbols 99999999999999999999
expect "Value 1 not in range 2 to 1000" 8 --heads-symbols 1
expect "--heads-d-model 30 is not a multiple of 8" 8 --heads-d-model 30
expect "--heads-d-model 12 is not a multiple of 8" 8 --heads-d-model 0x0c
expect "-5 is not a non-negative whole number" 4 --seed -5
expect "--steps is lesson 4's option; lesson 8 does not take it" 8 --steps 5
expect "--positions-seeds is lesson 11's option; lesson 1 does not take it" 1 --positions-seeds 2
expect "lesson: number: 0 not in" 0
exit $failed
