#!/bin/sh
# fetch-wheels.sh: downloads, here, the Python wheels the GPU machine lacks, for bench/gpu/peers.py.
# The GPU machine (python3 3.12, torch, triton, cupy-cuda13x, numpy, safetensors, matplotlib, ...
# installed; no network) has no SpikingJelly, and the suite needs two versions of it, which cannot be
# installed side by side: one folder per version, each installed into its own directory by peers.py.
#
#   bench/gpu/fetch-wheels.sh [DEST]     # default bench/gpu/wheels (git-ignored)
#
#   DEST/sj2/    spikingjelly 2.0.0 (triton / torch / native-CUDA neuron implementations) and the
#                two packages it needs that the GPU machine lacks: loguru (imported by
#                spikingjelly.logger) and SciencePlots (its plotting helpers)
#   DEST/sj014/  spikingjelly 0.0.0.0.14, the release with backend='cupy' (2.x has no cupy backend);
#                everything it needs (torch, cupy, numpy, scipy, matplotlib, tqdm, torchvision) is there
#
# All are pure-Python wheels (py3-none-any), about 1.6 MB together. Carry the folder with the device
# tool's `carry` (it must be git-ignored, as this one is): see bench/gpu/README.md.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
dest=${1:-$here/wheels}
py=${PYTHON:-python3}

fetch() { # fetch GROUP REQUIREMENT...
    group=$1
    shift
    mkdir -p "$dest/$group"
    # the GPU machine's interpreter: CPython 3.12 on x86-64 (pure wheels match any platform)
    "$py" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 \
        --platform any -d "$dest/$group" "$@"
}

rm -rf "$dest/sj2" "$dest/sj014"
fetch sj2 spikingjelly==2.0.0 loguru==0.7.3 SciencePlots==2.2.2
fetch sj014 spikingjelly==0.0.0.0.14

for group in sj2 sj014; do
    for whl in "$dest/$group"/*.whl; do
        printf '%s/%s\n' "$group" "$(basename "$whl")"
    done
done
du -sh "$dest" | sed 's/\t/  /'
