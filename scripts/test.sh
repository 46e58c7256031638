#!/usr/bin/env bash
# Builds tilesmith and runs the test suite. GPU tests skip, saying why, when there is no GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}

BUILD_DIR=$BUILD_DIR scripts/setup.sh
ctest --test-dir "$BUILD_DIR" --output-on-failure -j"$(nproc)"
