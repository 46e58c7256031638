#!/usr/bin/env bash
# Installs what tilesmith needs to build (Debian/Ubuntu; apt only when something is missing),
# then configures and builds it. Idempotent: a second run checks, and rebuilds nothing.
#
#   scripts/setup.sh                         # build into ./build
#   BUILD_DIR=build-debug scripts/setup.sh
#   TILESMITH_PREBUILT=1 scripts/setup.sh    # a build folder carried from another machine:
#                                            # use it as it is (no apt, no build)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}

if [[ ${TILESMITH_PREBUILT:-0} == 1 ]]; then
  # The GPU machine has no Boost or sqlite3.h and no network: binaries are built elsewhere.
  [[ -x $BUILD_DIR/tilesmith ]] || { echo "setup: TILESMITH_PREBUILT=1 but $BUILD_DIR/tilesmith is missing" >&2; exit 1; }
  echo "setup: using the prebuilt $BUILD_DIR as it is"
  exit 0
fi

packages=(cmake ninja-build g++ libboost-program-options-dev libsqlite3-dev nlohmann-json3-dev
          libgtest-dev)
missing=()
for package in "${packages[@]}"; do
  dpkg -s "$package" >/dev/null 2>&1 || missing+=("$package")
done
if ((${#missing[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "setup: missing packages: ${missing[*]}" >&2
    echo "setup: run this script as root, or: sudo apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
  echo "setup: installing ${missing[*]}"
  apt-get update
  DEBIAN_FRONTEND=noninteractive apt-get install -y "${missing[@]}"
fi

# The CUDA toolkit does not come from apt here: NVRTC and the CUDA headers come from it.
if [[ ! -f $CUDA_HOME/include/nvrtc.h ]]; then
  echo "setup: no CUDA toolkit at $CUDA_HOME ($CUDA_HOME/include/nvrtc.h is missing)." >&2
  echo "setup: install the CUDA 13 toolkit there (or set CUDA_HOME to where it is)." >&2
  exit 1
fi
export CUDAToolkit_ROOT=$CUDA_HOME

cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build "$BUILD_DIR" -j"$(nproc)"

# The Python package (python/): staged with the library and the CLI inside it, then installed
# into this Python with pip (without its torch dependency, which the user's environment brings:
# a torch for their CUDA). Where pip may not install here (no pip, or an externally managed
# system Python), the staged copy is still usable and this says how to install it.
stage=$BUILD_DIR/python
rm -rf "$stage" && mkdir -p "$stage/tilesmith/lib" "$stage/tilesmith/bin"
cp python/pyproject.toml "$stage/" && cp python/tilesmith/*.py "$stage/tilesmith/"
cp "$BUILD_DIR/libtilesmith.so.0" "$stage/tilesmith/lib/" && cp "$BUILD_DIR/tilesmith" "$stage/tilesmith/bin/"
if python3 -m pip --version >/dev/null 2>&1 &&
   python3 -m pip install --quiet --no-deps --upgrade "$stage" > "$BUILD_DIR/python-install.log" 2>&1; then
  echo "setup: Python package installed ($(python3 -c 'import sys; print(sys.executable)')): import tilesmith (needs torch)"
else
  echo "setup: Python package staged in $stage but not installed into $(command -v python3) (see $BUILD_DIR/python-install.log):"
  echo "setup:   pip install --no-deps $stage   (in your torch environment), or PYTHONPATH=$stage"
fi
