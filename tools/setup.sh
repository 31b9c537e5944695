#!/usr/bin/env bash
# First run on a new machine: install what is missing (Debian packages; the main job needs no Python
# package), build snnc, install the Python package (python/snnc, editable) for the python3 first on
# PATH, and run the main job: the trained Fashion-MNIST MLP SNN on the 10,000 test images, compiled
# for this CPU by the LLVM backend (float32, equal to the interpreter's f32 bits).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)" >/dev/null
tools/install-python-package.sh
echo "built build/driver/snnc; running examples/fmnist_mlp.snn on Fashion-MNIST (10,000 test images)"
build/driver/snnc --run examples/fmnist_mlp.snn --data=fashion-mnist --precision=f32
