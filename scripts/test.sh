#!/usr/bin/env bash
# Builds tilesmith and runs the test suite. GPU tests skip, saying why, when there is no GPU.
# Then installs the package into the build folder and builds examples/ against it alone, as a
# user's project would (find_package(tilesmith CONFIG)), and runs each example program (without
# a GPU they say so and pass).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}

BUILD_DIR=$BUILD_DIR scripts/setup.sh
ctest --test-dir "$BUILD_DIR" --output-on-failure -j"$(nproc)"

prefix=$(cd "$BUILD_DIR" && pwd)/install  # BUILD_DIR may be relative or absolute
cmake --install "$BUILD_DIR" --prefix "$prefix" > /dev/null
cmake -S examples -B "$BUILD_DIR/examples" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH="$prefix" -DCUDAToolkit_ROOT="$CUDA_HOME" > /dev/null
cmake --build "$BUILD_DIR/examples"
for program in matmul_c every_op_c runtime_cpp; do  # their own database: never the user's cache
  "$BUILD_DIR/examples/$program" "$BUILD_DIR/examples/examples.db"
done
echo "examples: built against the package installed in $prefix; each ran"
