#!/usr/bin/env bash
# ab.sh: versions of snnc's CUDA code side by side on one GPU, in one call of a lent machine.
#
#   bench/gpu/ab.sh prepare NAME SNNC [ENV=VALUE...]   # here: bench/gpu/ab/NAME/ from that snnc
#   bench/gpu/ab.sh run OUT NAME...                    # on the GPU machine, repository root
#
# prepare builds, with the given snnc (and environment), the model.so files a version is compared
# on: the Fashion-MNIST MLP and conv SNN (conv without its weights: the runs load the example's
# file) and the LIF layer N = 2^22, T = 32, for sm_90, CPU code for x86-64-v2. Carry bench/gpu/ab
# and bench/gpu/prebuilt (snnc_bench, the test set).
#
# run, per version: snnc_bench --device=cuda (host arrays in and out, the copies included) on the
# networks at batch 256 and 1024 (4,096 images) and batch-1 latency (200 runs), and Nsight Compute's
# duration of every kernel of one conv batch of 256 and of the LIF layer (--clock-control none: the
# card's own clocks). A table, every version in one column; every version's network outputs are
# compared with the first version's (cmp of snnc_bench --output). A version may hold some of the
# files only (a change that concerns the LIF layer alone). SNN_AB_NCU=0 leaves Nsight Compute out;
# SNN_AB_IMAGES and SNN_AB_RUNS change the 4,096 images and the 200 latency runs.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
ab=$here/ab
pre=$here/prebuilt

if [ "${1:-}" = prepare ]; then
  set -e
  name=$2 snnc=$3
  shift 3
  mkdir -p "$ab/$name"
  common=(--cuda-arch=sm_90 --cpu=x86-64-v2 -q)
  env "$@" "$snnc" "$root/examples/fmnist_mlp.snn" "${common[@]}" -o "$ab/$name/mlp.so"
  env "$@" "$snnc" "$root/examples/fmnist_conv.snn" --no-embed-weights "${common[@]}" -o "$ab/$name/conv.so"
  env "$@" "$snnc" "$pre/snn/lif_n4194304_t32.snn" "${common[@]}" -o "$ab/$name/lif.so"
  echo "$name: $* $("$snnc" --version | head -1)" >"$ab/$name/what"
  ls -la "$ab/$name"
  exit 0
fi
if [ "${1:-}" != run ] || [ $# -lt 3 ]; then
  echo "usage: bench/gpu/ab.sh prepare NAME SNNC [ENV=VALUE...] | run OUT NAME..." >&2
  exit 2
fi
out=$2
shift 2
mkdir -p "$out"
bench=$pre/snnc_bench
export SNN_DATA_DIR=${SNN_DATA_DIR:-$pre/data}
w=$root/examples/fmnist_conv.safetensors
images=${SNN_AB_IMAGES:-4096} runs=${SNN_AB_RUNS:-200}
ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null || true)
tmp=$(mktemp -d /tmp/ab.XXXXXX)
ref=$1
python3 -c "import numpy as np; np.save('$tmp/lif.npy', np.random.default_rng(7).uniform(0, 2.5, (1, 32, 1 << 22)).astype(np.float32))"

field() { sed -n "s/.*\"$1\": \([0-9.e+-]*\).*/\1/p" | head -1; }
for v in "$@"; do
  d=$ab/$v
  echo "== $v: $(cat "$d/what")"
  for net in mlp conv; do
    [ -f "$d/$net.so" ] || continue
    wa=()
    [ $net = conv ] && wa=(--weights="$w")
    for b in 256 1024; do
      r=$("$bench" "$d/$net.so" --fmnist --device=cuda "${wa[@]}" --batch=$b --limit=$images --repeats=5 \
          --output="$tmp/$v.$net.$b.npy" 2>&1 | tail -1)
      echo "$v $net b$b img/s $(echo "$r" | field images_per_s)" | tee -a "$out/ab.txt"
    done
    r=$("$bench" "$d/$net.so" --fmnist --device=cuda "${wa[@]}" --batch=1 --limit=16 --repeats=1 \
        --latency-runs=$runs 2>&1 | tail -1)
    echo "$v $net b1 ms $(echo "$r" | field latency_b1_ms)" | tee -a "$out/ab.txt"
    cmp -s "$tmp/$v.$net.256.npy" "$tmp/$ref.$net.256.npy" && cmp -s "$tmp/$v.$net.1024.npy" "$tmp/$ref.$net.256.npy" &&
      echo "$v $net outputs=$ref same" | tee -a "$out/ab.txt" || echo "$v $net outputs=$ref DIFFER" | tee -a "$out/ab.txt"
  done
  [ -n "$ncu" ] && [ "${SNN_AB_NCU:-1}" != 0 ] || continue
  for what in "conv.so --fmnist --weights=$w --batch=256 --limit=256" "lif.so --input=$tmp/lif.npy --batch=1 --limit=1"; do
    read -r so rest <<<"$what"
    [ -f "$d/$so" ] || continue
    # shellcheck disable=SC2086
    timeout 60 "$ncu" --clock-control none --metrics gpu__time_duration.sum --csv \
      "$bench" "$d/$so" --device=cuda $rest --repeats=1 >"$tmp/ncu.csv" 2>"$tmp/ncu.err" ||
      { echo "$v ncu $so failed: $(tail -2 "$tmp/ncu.err")"; continue; }
    { echo "== $v $so"; cat "$tmp/ncu.csv"; } >>"$out/ncu.log"
    # the first pass (the warm-up) of each kernel: name, microseconds
    python3 - "$tmp/ncu.csv" "$v" "${so%.so}" <<'PY' | tee -a "$out/ab.txt"
import csv, sys
rows = [r for r in csv.reader(l for l in open(sys.argv[1]) if l.startswith('"'))]
head = next(r for r in rows if r and r[0] == "ID")
rows = [r for r in rows if r is not head and len(r) == len(head)]
name, unit, val = head.index("Kernel Name"), head.index("Metric Unit"), head.index("Metric Value")
seen = {}
for r in rows:
    if r[name] in seen:
        continue
    x = float(r[val].replace(",", ""))
    seen[r[name]] = x / 1000 if r[unit] == "nsecond" else x * 1000 if r[unit] == "msecond" else x
for k, us in seen.items():
    print(f"{sys.argv[2]} {sys.argv[3]} kernel {k} us {us:.1f}")
PY
  done
done
rm -rf "$tmp"
echo "== table"
python3 - "$out/ab.txt" <<'PY'
import sys, collections
rows = collections.OrderedDict()
vers = []
for line in open(sys.argv[1]):
    p = line.split()
    if len(p) < 5 or p[1] == "ncu":
        continue
    v, key, val = p[0], " ".join(p[1:-1]), p[-1]
    if v not in vers:
        vers.append(v)
    rows.setdefault(key, {})[v] = val
if not rows:
    sys.exit(0)
w = max(len(k) for k in rows)
print(" " * w + " | " + " | ".join(f"{v:>12}" for v in vers))
for k, r in rows.items():
    print(f"{k:<{w}} | " + " | ".join(f"{r.get(v, '-'):>12}" for v in vers))
PY
