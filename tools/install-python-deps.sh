#!/usr/bin/env bash
# Installs the Python packages snnc's scripts use, for the python3 first on PATH, and nothing when
# they are all there already.
#   tools/install-python-deps.sh --tests   what the test suite needs (numpy: lit tests make and
#                                          compare .npy/.npz arrays with it; h5py: they edit .nir
#                                          files' metadata; pytest, nir and torch: the Python
#                                          package's tests, python/tests, snnc.torch and
#                                          DistributedDataParallel among them; ray[data]:
#                                          snnc.ray's; matplotlib: snnc.plot's; snntorch,
#                                          nirtorch, spikingjelly (its import needs loguru and
#                                          tqdm only, so it comes without its other
#                                          dependencies): snnc.compile of their modules);
#                                          tools/test.sh runs this
#   tools/install-python-deps.sh           that, and what the fixture scripts (tools/fixtures/*.py)
#                                          and the benchmarks (bench/) use, at the versions the
#                                          committed fixtures and docs/benchmarks.md were made with
# pip installs them; where python3 is a system Python that pip may not change (Debian's, marked
# EXTERNALLY-MANAGED), the test packages come from Debian's python3-* packages instead.
set -euo pipefail
tests=(numpy==2.4.6 h5py==3.16.0 pytest==9.2.0 nir==1.0.8 torch==2.15.0 "ray[data]==2.40.0"
       matplotlib==3.11.2 snntorch==1.0.0 nirtorch==2.6 spikingjelly==2.0.0 loguru==0.7.3
       tqdm==4.70.1 norse==1.1.0)
packages=("${tests[@]}"
  safetensors==0.8.0                             # files
  torch==2.15.0                                  # the frameworks' base
  spikingjelly==2.0.0 snntorch==1.0.0 norse==1.1.0   # the peers
  nir==1.0.8 nirtorch==2.6                       # NIR export of snnTorch and Norse models
  jax==0.10.2 jaxlib==0.10.2                     # the JAX peer (bench/cpu/jax_peer.py), CPU
  sinabs==3.1.3 pbr==7.1.3                       # Sinabs (installed without its dependencies)
)
# Sinabs 3.1.3 pins nir<=1.0.4 and pulls samna (its Speck hardware backend); its NIR export and
# its layers run with nir 1.0.8 (tests/nir/VERSIONS.txt), so it is installed with --no-deps and
# its one other import-time dependency (pbr) is listed above
nodeps=(sinabs)
case "${1:-}" in
  --tests) wanted=("${tests[@]}"); nodeps+=(spikingjelly) ;;
  "") wanted=("${packages[@]}") ;;
  *) echo "usage: $0 [--tests]" >&2; exit 2 ;;
esac

# the installed version of a distribution, or nothing
have() { python3 -c "import importlib.metadata as m; print(m.version('$1'))" 2>/dev/null || true; }

missing=()
for spec in "${wanted[@]}"; do
  name=${spec%%==*} want=${spec##*==}
  name=${name%%\[*} # ray[data]: the distribution is ray
  [ "$(have "$name")" = "$want" ] && continue
  # the test suite needs the package, not this exact version: any installed one will do
  [ "${1:-}" = --tests ] && [ -n "$(have "$name")" ] && continue
  missing+=("$spec")
done
[ ${#missing[@]} -eq 0 ] && exit 0

python=$(command -v python3) || { echo "install-python-deps: no python3 on PATH" >&2; exit 1; }
managed=$(python3 -c 'import sys, sysconfig, os
print(int(sys.prefix == sys.base_prefix and os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED"))))')
if [ "$managed" = 1 ] && [ "${1:-}" = --tests ]; then
  # a system Python: its packages come from the system's package manager
  debs=()
  for spec in "${missing[@]}"; do
    if [ "${spec%%==*}" = nir ]; then # on PyPI only
      echo "install-python-deps: nir is not packaged by Debian: the Python package's NIR-object" \
           "tests skip on $python (a virtual environment runs them)" >&2
      continue
    fi
    if [ "${spec%%==*}" = torch ]; then # Debian's is older than torch.library.custom_op
      echo "install-python-deps: Debian's torch is too old for snnc.torch: its tests skip on" \
           "$python (a virtual environment runs them)" >&2
      continue
    fi
    case "${spec%%==*}" in snntorch | nirtorch | spikingjelly | norse) # on PyPI only
      echo "install-python-deps: ${spec%%==*} is not packaged by Debian: snnc.compile's tests of" \
           "framework modules skip on $python (a virtual environment runs them)" >&2
      continue ;;
    esac
    if [ "${spec%%==*}" = "ray[data]" ]; then # on PyPI only
      echo "install-python-deps: ray is not packaged by Debian: snnc.ray's test skips on" \
           "$python (a virtual environment runs it)" >&2
      continue
    fi
    debs+=("python3-${spec%%==*}")
  done
  [ ${#debs[@]} -eq 0 ] && exit 0
  echo "install-python-deps: $python is the system's Python; installing ${debs[*]}" >&2
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${debs[@]}" >/dev/null
  exit 0
fi
extra=()
[ "$managed" = 1 ] && extra=(--break-system-packages) # the frameworks are on PyPI only
if ! python3 -m pip --version >/dev/null 2>&1; then
  echo "install-python-deps: $python has no pip; installing it with ensurepip" >&2
  python3 -m ensurepip --upgrade >/dev/null
fi
echo "install-python-deps: installing ${missing[*]} for $python" >&2
with=() without=()
for spec in "${missing[@]}"; do
  if [[ " ${nodeps[*]} " == *" ${spec%%==*} "* ]]; then without+=("$spec"); else with+=("$spec"); fi
done
if [ ${#without[@]} -gt 0 ]; then
  python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore "${extra[@]}" --no-deps "${without[@]}"
fi
[ ${#with[@]} -eq 0 ] && exit 0
if ! python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore "${extra[@]}" "${with[@]}"; then
  [ "${1:-}" = --tests ] || exit 1
  # no wheel of the pinned version for this Python: the newest that has one serves the tests
  echo "install-python-deps: the pinned versions failed; trying the newest" >&2
  python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore "${extra[@]}" "${with[@]%%==*}"
fi
