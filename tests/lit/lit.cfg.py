# lit configuration for snnc's FileCheck tests: language features, the textual IR, diagnostics.
# The build writes lit.site.cfg.py (paths) and loads this file from it.
import os
import lit.formats

config.name = "snnc"
config.test_format = lit.formats.ShTest(execute_external=True)
config.suffixes = [".snn", ".snnir", ".test"]
config.excludes = ["Inputs"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.snnc_obj_root, "tests", "lit")

config.substitutions.append(("%snnc", config.snnc_path))
config.substitutions.append(("%npycmp", config.npycmp_path))
config.substitutions.append(("%examples", os.path.join(config.snnc_src_root, "examples")))
config.substitutions.append(("%parity", os.path.join(config.snnc_src_root, "tests", "parity")))

path = [config.llvm_tools_dir, os.environ.get("PATH", "")]
config.environment["PATH"] = os.pathsep.join(path)
for var in ("ASAN_OPTIONS", "UBSAN_OPTIONS", "SNN_DATA_DIR", "HOME"):
    if var in os.environ:
        config.environment[var] = os.environ[var]
if os.path.isdir("/usr/share/datasets/fashion-mnist") or os.environ.get("SNN_DATA_DIR"):
    config.available_features.add("fmnist")
import subprocess
try:
    if "--backend=cpu" in subprocess.run([config.snnc_path, "--help"], capture_output=True, text=True).stdout:
        config.available_features.add("llvm")
except OSError:
    pass
