#!/usr/bin/env bash
# Installs the Python packages the fixture scripts (tools/fixtures/*.py) and the benchmarks (bench/)
# use, at the versions the committed fixtures and docs/benchmarks.md were made with, and nothing
# when they are all there already. Not needed to build or test snnc: the fixtures are committed.
set -euo pipefail
packages=(
  numpy==2.4.6 safetensors==0.8.0 h5py==3.16.0   # arrays and files
  torch==2.15.0                                  # the frameworks' base
  spikingjelly==2.0.0 snntorch==1.0.0 norse==1.1.0   # the peers
  nir==1.0.8 nirtorch==2.6                       # NIR export of snnTorch and Norse models
)
missing=()
for spec in "${packages[@]}"; do
  name=${spec%%==*} want=${spec##*==}
  have=$(python3 -c "import importlib.metadata as m; print(m.version('$name'))" 2>/dev/null || true)
  [ "$have" = "$want" ] || missing+=("$spec")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "install-python-deps: installing ${missing[*]}" >&2
python3 -m pip install --quiet "${missing[@]}"
