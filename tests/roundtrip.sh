#!/usr/bin/env bash
# print(parse(print(m))) == print(m), byte for byte, for every example and test model.
# Usage: roundtrip.sh SNNC SOURCE_ROOT WORK_DIR
set -u
snnc=$1 root=$2 work=$3
mkdir -p "$work"
pass=0 fail=0
while IFS= read -r f; do
  # models that are meant to fail to compile are not round-tripped
  grep -q "RUN: not" "$f" && continue
  grep -q "^ *model " "$f" || continue
  base=$(echo "${f#$root/}" | tr '/' '_')
  if ! "$snnc" --emit=ir "$f" -o "$work/$base.1.snnir" 2>"$work/$base.err"; then
    echo "FAIL (does not compile): $f"; cat "$work/$base.err"; fail=$((fail + 1)); continue
  fi
  if "$snnc" --emit=ir "$work/$base.1.snnir" -o "$work/$base.2.snnir" 2>"$work/$base.err" &&
     cmp -s "$work/$base.1.snnir" "$work/$base.2.snnir"; then
    pass=$((pass + 1))
  else
    echo "FAIL (round trip differs): $f"; cat "$work/$base.err"
    diff "$work/$base.1.snnir" "$work/$base.2.snnir" | head -20
    fail=$((fail + 1))
  fi
done < <(find "$root/examples" "$root/tests/parity" "$root/tests/lit" -name '*.snn' -not -path '*/errors/*' -not -path '*/Inputs/*' | sort)
echo "roundtrip: $pass passed, $fail failed"
[ "$fail" -eq 0 ] && [ "$pass" -gt 0 ]
