#!/usr/bin/env bash
# Proves that `cmake --install` gives headers and a package config that find_package(cppgrad)
# finds: installs the build tree into a fresh temporary prefix, configures and builds
# tests/install/consumer against that prefix alone, and runs the program; then builds the same
# consumer without CMake, from the installed pkg-config file, and runs that too.
#
# Then the same for tests/install/consumer_tools, which asks for the tools component, for
# tests/install/consumer_formats, which asks for the file formats (npz, bpe), for
# tests/install/consumer_hf, which asks for the hf component and loads the Hugging Face twins'
# checkpoints of tests/data, for tests/install/consumer_onnx, which exports a module of its own
# (ONNX export), and for tests/install/consumer_onednn, autocast's oneDNN products.
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

# The installed CMake files name no library by path (the build's OpenBLAS path would break on a
# machine that keeps it elsewhere): dependencies are found by name when the package is loaded.
if grep -nE '(^|[" ;(])/(usr|opt|lib|home|root)/|libopenblas|openblas-openmp' "$prefix"/lib*/cmake/cppgrad/*.cmake; then
  echo "FAIL: the installed CMake files above name an absolute path or OpenBLAS's library"; exit 1
fi

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
# A program of the core alone needs none of the components' libraries (libzip, PCRE2, oneDNN,
# ONNX's and protobuf's).
if ldd "$work/build/consumer" | grep -E 'libzip|libpcre2|libdnnl|libonnx|libprotobuf'; then
  echo "FAIL: the core-only consumer needs the libraries above, which only cppgrad::npz, cppgrad::bpe, cppgrad::onednn, cppgrad::onnx and cppgrad::tools use"; exit 1
fi

echo "-- build the consumer with pkg-config alone (no CMake)"
pc_dir=$(dirname "$(find "$prefix" -name cppgrad.pc | head -n 1)")
[ -f "$pc_dir/cppgrad.pc" ] || { echo "FAIL: no cppgrad.pc installed"; exit 1; }
flags=$(PKG_CONFIG_PATH="$pc_dir" pkg-config --cflags --libs cppgrad)
echo "-- pkg-config --cflags --libs cppgrad: $flags"
# A sanitized library needs the sanitizer runtimes (CMake passes them on; pkg-config cannot know).
if grep -q '^CPPGRAD_SANITIZE:BOOL=ON' "$build_dir/CMakeCache.txt"; then flags="$flags -fsanitize=address,undefined"; fi
# shellcheck disable=SC2086  # the flags are words
"$cxx" -std=c++20 "$consumer_src/main.cpp" -o "$work/consumer_pkgconfig" $flags
"$work/consumer_pkgconfig"
if ldd "$work/consumer_pkgconfig" | grep -E 'libzip|libpcre2|libdnnl|libonnx|libprotobuf'; then
  echo "FAIL: the core-only consumer built from cppgrad.pc needs the libraries above"; exit 1
fi

# A consumer of components of the same package (tests/install/consumer_NAME), found as the
# README shows: its components' targets installed, then built with CMake and with their
# pkg-config files alone (cppgrad-COMPONENT.pc, each requiring cppgrad.pc), and run with ARGS.
#   consumer_of_components NAME "COMPONENT..." [ARGS...]
consumer_of_components() {
  local name=$1 components=$2 component pkgs="" flags
  shift 2
  for component in $components; do
    ls "$prefix"/lib*/cmake/cppgrad/cppgrad_${component}Targets.cmake > /dev/null 2>&1 ||
      { echo "FAIL: the install has no cppgrad_${component}Targets.cmake"; exit 1; }
    pkgs="$pkgs cppgrad-$component"
  done
  echo "-- configure, build and run the $name consumer"
  "$cmake" -S "$consumer_src/../consumer_$name" -B "$work/build_$name" -G "$generator" \
    -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE="$build_type" -DCMAKE_PREFIX_PATH="$prefix"
  "$cmake" --build "$work/build_$name"
  "$work/build_$name/consumer_$name" "$@"
  # shellcheck disable=SC2086  # one word per package
  flags=$(PKG_CONFIG_PATH="$pc_dir" pkg-config --cflags --libs $pkgs)
  echo "-- pkg-config --cflags --libs$pkgs: $flags"
  if grep -q '^CPPGRAD_SANITIZE:BOOL=ON' "$build_dir/CMakeCache.txt"; then flags="$flags -fsanitize=address,undefined"; fi
  # shellcheck disable=SC2086  # the flags are words
  "$cxx" -std=c++20 "$consumer_src/../consumer_$name/main.cpp" -o "$work/consumer_${name}_pkgconfig" $flags
  "$work/consumer_${name}_pkgconfig" "$@"
}

# The program tools; the file formats, NumPy's .npy/.npz (cppgrad::npz) and the BPE tokenizer
# (cppgrad::bpe); Hugging Face's checkpoints (nn/hf/), as docs/hugging-face.md shows, loading the
# twins of tests/data. The JSON reader is compiled in: nothing of nlohmann-json reaches the
# installed package.
if grep -n nlohmann "$prefix"/lib*/cmake/cppgrad/*.cmake "$pc_dir"/*.pc; then
  echo "FAIL: the installed package files above name nlohmann-json"; exit 1
fi
consumer_of_components tools tools
consumer_of_components formats "npz bpe"
consumer_of_components hf hf "$consumer_src/../../data"
consumer_of_components onnx onnx
consumer_of_components onednn onednn

# The distributed floor, when it was built: a component of the same package, found as the README
# shows it, and run as a world of one and of two processes (scripts/mpirun).
if grep -q '^CPPGRAD_BUILD_DISTRIBUTED:BOOL=ON' "$build_dir/CMakeCache.txt"; then
  ls "$prefix"/lib*/cmake/cppgrad/cppgradDistributedTargets.cmake > /dev/null 2>&1 ||
    { echo "FAIL: built with CPPGRAD_BUILD_DISTRIBUTED, but the install has no cppgradDistributedTargets.cmake"; exit 1; }
  echo "-- configure, build and run the distributed consumer"
  "$cmake" -S "$consumer_src/../consumer_distributed" -B "$work/build_distributed" -G "$generator" \
    -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE="$build_type" -DCMAKE_PREFIX_PATH="$prefix"
  "$cmake" --build "$work/build_distributed"
  "$work/build_distributed/consumer_distributed"
  MPIRUN_TIMEOUT=100 "$consumer_src/../../../scripts/mpirun" 2 "$work/build_distributed/consumer_distributed"
else
  echo "-- built without CPPGRAD_BUILD_DISTRIBUTED: no distributed component to test"
fi
