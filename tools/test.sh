#!/usr/bin/env bash
# Builds snnc and runs the whole test suite: a warnings-as-errors build, the same tests under
# AddressSanitizer + UndefinedBehaviorSanitizer, and the fuzz targets (libFuzzer, clang) for a short run.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install-deps.sh
tools/install-python-deps.sh --tests
jobs=$(nproc)

echo "== build (warnings are errors) and test"
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSNN_WERROR=ON >/dev/null
cmake --build build -j"$jobs" >/dev/null
ctest --test-dir build --output-on-failure -j"$jobs"

echo "== AddressSanitizer + UndefinedBehaviorSanitizer build and test"
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DSNN_WERROR=ON -DSNN_SANITIZE=ON >/dev/null
cmake --build build-asan -j"$jobs" >/dev/null
ASAN_OPTIONS=detect_leaks=1 ctest --test-dir build-asan --output-on-failure -j"$jobs" -LE slow

echo "== fuzz targets (libFuzzer, short runs from the committed seeds)"
CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSNN_WERROR=ON -DSNN_FUZZ=ON >/dev/null
cmake --build build-fuzz -j"$jobs" >/dev/null
ctest --test-dir build-fuzz --output-on-failure -j"$jobs" -L fuzz
