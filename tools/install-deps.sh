#!/usr/bin/env bash
# Installs what snnc needs to build and test on Debian 12, and nothing when it is all there already.
# Debian packages only; run as root (or with sudo available).
set -euo pipefail

packages=(
  build-essential cmake flex bison zlib1g-dev      # the compiler itself
  llvm-14-dev llvm-14-tools                        # LLVM (CPU backend) and FileCheck/lit for tests
  clang libclang-rt-14-dev                         # libFuzzer and sanitizer runtimes for fuzz targets
  libhdf5-dev                                      # NIR import (.nir files are HDF5)
  python3                                          # lit runs on it
  dataset-fashion-mnist                            # the examples' data set (IDX files)
  librsvg2-bin                                     # rsvg-convert: tests render --plot's SVG
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "install-deps: installing ${missing[*]}" >&2
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
