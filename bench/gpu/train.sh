#!/usr/bin/env bash
# train.sh: training on a lent GPU in one call of the device tool: the CUDA backend's correctness
# (tools/gpu-check.sh run, which includes the training parity on the GPU), snnc --train
# --device=cuda against the peers on the same GPU (bench/cpu/train.py --device cuda: SpikingJelly
# with its CuPy and Triton neurons, the network by hand in PyTorch, eager and compiled), and
# Nsight Compute's time for every kernel of snnc's conv training step.
#
#   bench/gpu/train.sh prepare          # here: build-gpu (tools/gpu-check.sh prepare), the wheels,
#                                       # bench/gpu/traindata (the first 12,800 training images)
#   bench/gpu/train.sh run OUT [WHAT]   # there, from the repository root; WHAT: a comma list of
#                                       # check (the training step's correctness), conv, mlp
#                                       # (training against the peers), lif (a LIF layer's forward
#                                       # and backward against SpikingJelly's Triton kernels), ncu
#                                       # (default all of these), fullcheck (tools/gpu-check.sh),
#                                       # tta (the conv net's time to 93% test accuracy on all
#                                       # 60,000 images: needs prepare-tta)
#   bench/gpu/train.sh prepare-tta      # here: bench/gpu/traindata-full, the whole training set
#                                       # (26 MB): too much beside the repository's two 26 MB conv
#                                       # weight files, so a tta call leaves them behind (git rm
#                                       # --cached them and list them in .git/info/exclude for the
#                                       # call; the check item needs them, tta does not)
#
# The call (the repository's own files travel; these are git-ignored and carried):
#   run(command="bash bench/gpu/train.sh run $OUT", carry=["build-gpu/driver/snnc",
#       "build-gpu/tests/npycmp", "build-gpu/ref", "bench/gpu/wheels", "bench/gpu/traindata"])
# SNN_TRAIN_IMAGES_MLP / _CONV: images per row (default 12,800 and 6,400); SNN_TRAIN_PEERS: the
# rows (default snnc,sj-cupy,sj-triton,hand,hand-compile); SNN_TRAIN_TIMEOUT: seconds a row may
# take (150); SNN_TRAIN_SNNC_ARGS_MLP / _CONV: more snnc arguments; SNN_CHECK_SECONDS: gpu-check's
# limit.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
if [ "${1:-}" = prepare ]; then
  set -e
  tools/gpu-check.sh prepare
  bench/gpu/fetch-wheels.sh
  python3 - <<'EOF'
import gzip, os, shutil, struct
src = os.environ.get("SNN_DATA_DIR", "/usr/share/datasets/fashion-mnist") + "/"
dst = "bench/gpu/traindata/"
os.makedirs(dst, exist_ok=True)
N = 12800  # the training set's first images (the whole set would not fit the 64 MiB that travel)
raw = gzip.open(src + "train-images-idx3-ubyte.gz").read()
magic, _, r, c = struct.unpack(">IIII", raw[:16])
gzip.open(dst + "train-images-idx3-ubyte.gz", "wb").write(
    struct.pack(">IIII", magic, N, r, c) + raw[16:16 + N * r * c])
raw = gzip.open(src + "train-labels-idx1-ubyte.gz").read()
gzip.open(dst + "train-labels-idx1-ubyte.gz", "wb").write(
    struct.pack(">II", struct.unpack(">I", raw[:4])[0], N) + raw[8:8 + N])
for f in ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"):
    shutil.copy(src + f, dst + f)
EOF
  du -sh build-gpu/driver/snnc bench/gpu/wheels bench/gpu/traindata
  exit 0
fi
if [ "${1:-}" = prepare-tta ]; then
  set -e
  src=${SNN_DATA_DIR:-/usr/share/datasets/fashion-mnist}
  mkdir -p bench/gpu/traindata-full
  cp "$src"/*-ubyte.gz bench/gpu/traindata-full/
  du -sh bench/gpu/traindata-full
  exit 0
fi
if [ "${1:-}" != run ] || [ $# -lt 2 ]; then
  echo "usage: bench/gpu/train.sh prepare | prepare-tta | run OUT [check,conv,mlp,lif,ncu,fullcheck,tta]" >&2
  exit 2
fi
out=$2 what=${3:-check,conv,mlp,lif,ncu}
mkdir -p "$out"
start=$(date +%s)
stamp() { echo "== $1 ($(($(date +%s) - start)) s)"; }
export PYTHONUNBUFFERED=1
export SNN_DATA_DIR=$root/bench/gpu/traindata SNNC=$root/build-gpu/driver/snnc
# NVRTC, as tools/gpu-check.sh finds it
if ! ldconfig -p | grep -q 'libnvrtc\.so\.1[23] '; then
  lib=$(find /usr/local/cuda*/ /usr/lib /opt -name 'libnvrtc.so.1[23]' 2>/dev/null | head -1)
  [ -n "$lib" ] && export SNN_NVRTC=$lib LD_LIBRARY_PATH=$(dirname "$lib")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
for g in sj2 sj014; do
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "/tmp/site/$g" \
    bench/gpu/wheels/$g/*.whl >/dev/null 2>&1 || echo "pip install of $g failed"
done
export SNN_SJ2_SITE=/tmp/site/sj2 SNN_SJ014_SITE=/tmp/site/sj014
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv,noheader
case ",$what," in *,fullcheck,*)
  stamp "correctness: tools/gpu-check.sh run (${SNN_CHECK_SECONDS:-100} s a check)"
  tools/gpu-check.sh run "$out" "${SNN_CHECK_SECONDS:-100}" 2>&1 | tee "$out/check.log" | tail -30
esac
case ",$what," in *,check,*)
  # the training step alone: the parity fixtures on the GPU (bit for bit with the interpreter),
  # and compute-sanitizer's memcheck and initcheck over a conv net step and a fixture's
  stamp "correctness of the training step: tests/grad.sh, compute-sanitizer"
  san=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
  w=$(mktemp -d)
  step=(--train --device=cuda --init --data=fashion-mnist --limit=64 --batch=64 --test-limit=64
        --no-shuffle -q)
  (timeout 150 "$san" --tool memcheck --error-exitcode 1 "$SNNC" examples/fmnist_conv.snn \
     "${step[@]}" -o "$w/m.safetensors" >"$out/memcheck-train.log" 2>&1; echo "memcheck exit $?") &
  (cd tests/grad/sj_conv && timeout 150 "$san" --tool initcheck --error-exitcode 1 "$SNNC" --train \
     --device=cuda model.snn --input=input.npy --labels=labels.npy --loss=mse --batch=8 \
     --no-shuffle -o "$w/i.safetensors" -q >"$out/initcheck-train.log" 2>&1; echo "initcheck exit $?") &
  (cd tests/grad/sj_conv && timeout 150 "$san" --tool racecheck --error-exitcode 1 "$SNNC" --train \
     --device=cuda model.snn --input=input.npy --labels=labels.npy --loss=mse --batch=8 \
     --no-shuffle -o "$w/r.safetensors" -q >"$out/racecheck-train.log" 2>&1; echo "racecheck exit $?") &
  timeout 150 bash tests/grad.sh "$SNNC" "$root/build-gpu/tests/npycmp" "$root/tests/grad" "$w/grad" \
    >"$out/grad.log" 2>&1
  echo "grad.sh exit $?: $(tail -1 "$out/grad.log")"
  grep -A8 '^FAIL' "$out/grad.log" | head -30
  wait
  tail -3 "$out"/*check-train.log
esac
peers=${SNN_TRAIN_PEERS:-snnc,sj-cupy,sj-triton,hand,hand-compile}
for net in ${SNN_TRAIN_NETS:-conv mlp}; do
  case ",$what," in *,$net,*) ;; *) continue ;; esac
  n=${SNN_TRAIN_IMAGES_MLP:-12800}
  sargs=${SNN_TRAIN_SNNC_ARGS_MLP:-}
  [ $net = conv ] && n=${SNN_TRAIN_IMAGES_CONV:-6400} sargs=${SNN_TRAIN_SNNC_ARGS_CONV:-}
  stamp "training $net, $n images: $peers"
  python3 bench/cpu/train.py --device cuda --net $net --images "$n" --threads 16 --only "$peers" \
    --timeout "${SNN_TRAIN_TIMEOUT:-150}" --snnc-args="$sargs" --json "$out/train-$net.json" 2>&1 |
    tee "$out/train-$net.log"
done
case ",$what," in *,tta,*)
  # the conv net to 93% test accuracy on all 60,000 training images (shuffled, Adam 1e-3 on a
  # cosine over SNN_TTA_EPOCHS epochs, batch 64, the same initial weights for snnc and the hand
  # peer): each row's training seconds to the first epoch at 93% (testing not counted)
  if [ -d "$root/bench/gpu/traindata-full" ]; then
    stamp "time to 93%, conv net, all 60,000 images, up to ${SNN_TTA_EPOCHS:-20} epochs: ${SNN_TTA_PEERS:-snnc,sj-triton}"
    SNN_DATA_DIR=$root/bench/gpu/traindata-full python3 bench/cpu/train.py --device cuda --net conv \
      --images 60000 --epochs "${SNN_TTA_EPOCHS:-20}" --tta 0.93 --threads 16 \
      --only "${SNN_TTA_PEERS:-snnc,sj-triton}" --timeout "${SNN_TTA_TIMEOUT:-400}" \
      --json "$out/tta-conv.json" 2>&1 | tee "$out/tta-conv.log"
  else
    echo "tta: no bench/gpu/traindata-full (bench/gpu/train.sh prepare-tta, then carry it)"
  fi
esac
case ",$what," in *,lif,*)
  stamp "LIF layer forward + backward, N = 2^20, T = 8 and 32: snnc against SpikingJelly Triton"
  timeout 150 python3 bench/cpu/lif_train.py --device cuda --reps 5 --json "$out/lif-train.json" 2>&1 |
    tail -5
esac
case ",$what," in *,ncu,*)
  stamp "Nsight Compute: every kernel of 2 conv training steps of 64"
  ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null)
  timeout 150 "$ncu" --clock-control none --metrics gpu__time_duration.sum --csv \
    "$SNNC" --train --device=cuda examples/fmnist_conv.snn --init --data=fashion-mnist \
    --limit=128 --batch=64 --test-limit=0 --optimizer=adam --loss=mse --no-shuffle \
    -o /tmp/ncu.safetensors -q >"$out/ncu-train-conv.csv" 2>"$out/ncu.err"
  echo "ncu exit $?"
  python3 - "$out/ncu-train-conv.csv" <<'EOF'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
if not rows:
    print(open(sys.argv[1]).read()[-2000:]); sys.exit()
h = rows[0]; k, v = h.index("Kernel Name"), h.index("Metric Value")
tot = collections.OrderedDict()
for r in rows[1:]:
    tot[r[k]] = tot.get(r[k], 0) + float(r[v].replace(",", "")) / 2  # ns per step (2 steps)
s = sum(tot.values())
for name, ns in sorted(tot.items(), key=lambda x: -x[1]):
    print(f"{ns / 1e3:10.1f} us {100 * ns / s:5.1f}%  {name}")
print(f"{s / 1e3:10.1f} us a step in kernels")
EOF
esac
stamp done
