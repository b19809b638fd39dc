#!/usr/bin/env bash
# Proves that `cmake --install` gives headers and a package config that find_package(cppgrad)
# finds: installs the build tree into a fresh temporary prefix, configures and builds
# tests/install/consumer against that prefix alone, and runs the program.
#
#   run_install_test.sh BUILD_DIR CONSUMER_SOURCE_DIR CMAKE CXX_COMPILER BUILD_TYPE GENERATOR
#
# A sanitized build (CPPGRAD_SANITIZE) needs nothing more here: the library's interface link
# options carry -fsanitize=..., so the consumer links the sanitizer runtimes it needs.
set -euo pipefail
build_dir=$1 consumer_src=$2 cmake=$3 cxx=$4 build_type=$5 generator=$6

work=$(mktemp -d "${TMPDIR:-/tmp}/cppgrad-install-test.XXXXXX")
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix

echo "-- cmake --install $build_dir --prefix $prefix"
"$cmake" --install "$build_dir" --prefix "$prefix" >"$work/install.log" || { cat "$work/install.log"; exit 1; }
test -f "$prefix/include/cppgrad/cppgrad.h" || { echo "FAIL: no include/cppgrad/cppgrad.h"; exit 1; }
# Nothing but cppgrad/ at the top of the installed include directory: a user's include path must
# not gain generic names such as tensor/ or nn/.
others=$(find "$prefix/include" -mindepth 1 -maxdepth 1 ! -name cppgrad)
[ -z "$others" ] || { echo "FAIL: the install puts these at the top of include/: $others"; exit 1; }

echo "-- configure and build the consumer against $prefix"
"$cmake" -S "$consumer_src" -B "$work/build" -G "$generator" -DCMAKE_CXX_COMPILER="$cxx" \
  -DCMAKE_BUILD_TYPE="$build_type" -DCMAKE_PREFIX_PATH="$prefix"
"$cmake" --build "$work/build"

# The package must have come from the fresh prefix, not from anywhere else on the machine.
found=$(sed -n 's/^cppgrad_DIR:PATH=//p' "$work/build/CMakeCache.txt")
case "$found" in
  "$prefix"/*) echo "-- cppgrad_DIR = $found" ;;
  *) echo "FAIL: find_package(cppgrad) found '$found', not the install in $prefix"; exit 1 ;;
esac

echo "-- run the consumer"
"$work/build/consumer"

# The distributed floor, when it was built: a component of the same package.
if [ -f "$prefix/lib/cmake/cppgrad/cppgradDistributedTargets.cmake" ] || \
   ls "$prefix"/lib*/cmake/cppgrad/cppgradDistributedTargets.cmake > /dev/null 2>&1; then
  echo "-- configure, build and run the distributed consumer"
  "$cmake" -S "$consumer_src/../consumer_distributed" -B "$work/build_distributed" -G "$generator" \
    -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE="$build_type" -DCMAKE_PREFIX_PATH="$prefix"
  "$cmake" --build "$work/build_distributed"
  "$work/build_distributed/consumer_distributed"
fi
