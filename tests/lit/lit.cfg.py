# lit configuration for snnc's FileCheck tests: language features, the textual IR, diagnostics.
# The build writes lit.site.cfg.py (paths) and loads this file from it.
import os
import re
import shutil
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
config.substitutions.append(("%nirdir", os.path.join(config.snnc_src_root, "tests", "nir")))

path = [config.llvm_tools_dir, os.environ.get("PATH", "")]
config.environment["PATH"] = os.pathsep.join(path)
for var in ("ASAN_OPTIONS", "UBSAN_OPTIONS", "SNN_DATA_DIR", "HOME", "SNN_VEC512"):
    if var in os.environ:
        config.environment[var] = os.environ[var]
# a sanitized build: its model.so needs the sanitizer runtime first in a process (not Python's).
# A leak report aborts the process (abort_on_error), so that `not %snnc` (an expected error) still
# fails the test when the error path leaks: every error test is a leak check of its path.
if getattr(config, "snnc_sanitize", "OFF").upper() in ("ON", "1", "TRUE", "YES"):
    config.available_features.add("asan")
    opts = config.environment.get("ASAN_OPTIONS", "")
    config.environment["ASAN_OPTIONS"] = ":".join(
        o for o in (opts, "detect_leaks=1", "abort_on_error=1") if o)
if os.path.isdir("/usr/share/datasets/fashion-mnist") or os.environ.get("SNN_DATA_DIR"):
    config.available_features.add("fmnist")
import subprocess
# %failio: the LD_PRELOAD library that fails writes to snnc's temporary files (tests/tools/failio.c)
config.substitutions.append(("%failio", getattr(config, "failio_path", "")))
# `mount`: a private mount namespace with a tmpfs of our own can be made (root, unshare), for
# writes to a file system that is really full
try:
    if subprocess.run(["unshare", "-m", "sh", "-c", "d=$(mktemp -d) && mount -t tmpfs -o size=64k "
                       "tmpfs $d && umount $d && rmdir $d"], capture_output=True).returncode == 0:
        config.available_features.add("mount")
except OSError:
    pass
try:
    if "--backend=cpu" in subprocess.run([config.snnc_path, "--help"], capture_output=True, text=True).stdout:
        config.available_features.add("llvm")
except OSError:
    pass
# CUDA without a GPU: `nvrtc` when snnc finds NVRTC (snnc --version says which), `ptxas` when the
# toolkit's assembler is there (%ptxas). GPU runs need more (REQUIRES: cuda, not set here).
try:
    env = {k: v for k, v in os.environ.items() if k != "SNN_NVRTC"}  # tests do not see it either
    version = subprocess.run([config.snnc_path, "--version"], capture_output=True, text=True, env=env)
    if re.search(r"^nvrtc: \d+\.\d+", version.stdout, re.M):
        config.available_features.add("nvrtc")
    if re.search(r"^nir: on", version.stdout, re.M):
        config.available_features.add("nir")
except OSError:
    pass
# `rsvg-convert`: --plot's SVG rendered to PNG and looked at (tools/install-deps.sh installs it)
if shutil.which("rsvg-convert"):
    config.available_features.add("rsvg-convert")
ptxas = shutil.which("ptxas") or ("/usr/local/cuda/bin/ptxas" if os.access("/usr/local/cuda/bin/ptxas", os.X_OK) else None)
if ptxas:
    config.available_features.add("ptxas")
    config.substitutions.append(("%ptxas", ptxas))
# The CPU stand-in for libcuda and libnvrtc (tests/cuda_emu): %cuemu runs a command on it, so the
# CUDA backend's whole path is tested here; `cuemu` when it was built.
cuemu = getattr(config, "cuemu_path", "")
if cuemu and os.path.exists(cuemu):
    config.available_features.add("cuemu")
    config.substitutions.append(("%cuemu", "env SNN_NVRTC=%s SNN_CUDA_DRIVER=%s" % (cuemu, cuemu)))
