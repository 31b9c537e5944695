"""Checks snnc --train --report=json: LOG EPOCHS RATIO ACCURACY: as many epochs as asked, the last
epoch's loss under RATIO times the first's, the last training accuracy at least ACCURACY."""
import json
import sys

log, epochs, ratio, accuracy = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
report = json.loads(open(log).read().strip().splitlines()[-1])
e = report["epochs"]
assert report["ok"] and len(e) == epochs, report
first, last = e[0]["loss"], e[-1]["loss"]
print(f"loss {first:.5f} -> {last:.5f}, train accuracy {e[0]['train_accuracy']:.3f} -> {e[-1]['train_accuracy']:.3f}")
assert last < ratio * first, (first, last)
assert e[-1]["train_accuracy"] >= accuracy, e[-1]
