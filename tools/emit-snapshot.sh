#!/usr/bin/env bash
# Writes what the compiler generates for every example, parity and NIR fixture and bench model
# (--emit=kernel, --emit=llvm, --emit=cuda; -O2, the default, and -O0) into DIR, so a refactoring
# can be checked to change nothing: run it before and after, then `diff -r BEFORE AFTER`.
# Usage: tools/emit-snapshot.sh SNNC DIR
set -u
snnc=$1 out=$2
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
models=()
for f in "$root"/examples/*.snn "$root"/bench/cpu/models/*.snn "$root"/tests/parity/*/model.snn; do
  [ -f "$f" ] && models+=("$f")
done
n=0
emit() { # NAME MODEL ARGS...
  local name=$1 model=$2
  shift 2
  for kind in kernel llvm cuda; do
    for opt in -O2 -O0; do
      "$snnc" --emit=$kind "$opt" "$model" "$@" -q -o "$out/$name.$kind$opt.txt" 2>"$out/$name.$kind$opt.err" ||
        echo "exit $?" >>"$out/$name.$kind$opt.err"
      n=$((n + 1))
    done
  done
}
for f in "${models[@]}"; do
  rel=${f#"$root"/}
  emit "${rel//\//_}" "$f"
done
for d in "$root"/tests/nir/*/; do
  [ -f "$d/model.nir" ] || continue
  read -r -a args < "$d/args"
  emit "nir_$(basename "$d")" "$d/model.nir" "${args[@]}"
done
echo "emit-snapshot: $n outputs in $out"
