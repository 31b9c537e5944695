#!/usr/bin/env python3
"""GPU benchmarks: snnc's CUDA backend against SpikingJelly and a plain PyTorch ANN, one GPU, one run.

    python3 bench/gpu/peers.py             # full run (GPU machine): writes bench/gpu/peers.json
    python3 bench/gpu/peers.py --quick     # smoke run: fewer sizes, images and repeats
    python3 bench/gpu/peers.py --dry-run   # no GPU needed: the plan, the generated .snn files
                                           # checked by snnc, what would be carried and used
    python3 bench/gpu/peers.py --prepare   # here (no GPU): build the model.so files, snnc_bench
                                           # and the data the GPU machine cannot build (prebuilt/)
    python3 bench/gpu/peers.py --self-test # here: snnc's side of the suite on the CUDA emulator

Workloads (bench/gpu/README.md says what every figure means):
  lif   one multi-step LIF layer (tau=2, hard reset to 0, v_th=1), forward, N = 2^20 and 2^22,
        T = 4, 8, 32, 128, f32 and f16 input: device ms per forward, GB/s, % of the bandwidth floor
        (bytes that must move / a device-to-device copy's bandwidth measured in the same run),
        spike agreement with SpikingJelly. snnc runs a model.so generated per (N, T).
  mlp   examples/fmnist_mlp.snn (784-256-10 LIF, T=8, trained weights), the 10,000 test images
  conv  examples/fmnist_conv.snn (SpikingJelly's Fashion-MNIST CSNN, IF, T=4), the weights of
        bench/cpu/peers.py (seeded default initialisation; bn-calibrated BatchNorm statistics by
        default here, so that the spiking layers fire)
        images/s at batch 256 and 1024, batch-1 latency, kernels per forward, predictions and
        output rates compared with SpikingJelly.

Peers: SpikingJelly 0.0.0.0.14 with backend='cupy' (the CuPy kernels; SpikingJelly 2.x has no
cupy backend), SpikingJelly 2.x with its triton, torch and native-CUDA neuron implementations,
and the same networks as a plain PyTorch ANN (ReLU, no time loop). snnc: model.so on a "cuda"
session through ctypes with torch tensors' device pointers (snn_run_device: the kernel path,
no host copies), and through bench/cpu/snnc_bench --device=cuda (host arrays, copies included).
Each implementation runs in its own process (bench/gpu/worker.py); one that cannot run is
reported "not run: why" and the others go on.

Exit status: 0 when it measured (some rows may be "not run"), 2 when there is no CUDA device
(nothing measured, nothing written), 1 on a usage or set-up error. --dry-run, --prepare and a
passing --self-test exit 0.
"""
from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
OUT = HERE / "out"                # git-ignored: specs, logs, outputs, generated files
PREBUILT = HERE / "prebuilt"      # git-ignored: made by --prepare here, carried to the GPU machine
WHEELS = HERE / "wheels"          # git-ignored: made by fetch-wheels.sh here, carried likewise
WORKER = HERE / "worker.py"
CPU_BENCH = ROOT / "bench" / "cpu"
DEFAULT_DATA = Path("/usr/share/datasets/fashion-mnist")
DATA_FILES = ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")

LIF_NS, LIF_TS, LIF_DTYPES = (1 << 20, 1 << 22), (4, 8, 32, 128), ("f32", "f16")
QUICK_NS, QUICK_TS = (1 << 20,), (8, 32)
LIF_TAU = 2.0
NET_BATCHES = (256, 1024)

# the order they run in; the first SpikingJelly of REFERENCE_ORDER that ran is the agreement reference
LIF_IMPLS = ("snnc", "sj014-cupy", "sj2-triton", "sj2-torch", "sj2-auto", "sj2-cuda")
NET_IMPLS = ("snnc", "sj014-cupy", "ann", "sj2-triton", "sj2-torch", "ann-compile")
# snnc through snnc_bench (host arrays): the default model.so, and the -O3 one (the scan-epilogue
# pass: layers summed in their neuron scans), whose figures against snnc-host are that pass's
HOST_IMPLS = ("snnc-host", "snnc-o3-host")
REFERENCE_ORDER = ("sj2-torch", "sj2-auto", "sj2-triton", "sj014-cupy", "sj2-cuda")
# sj2-auto (SpikingJelly's own choice) only where it differs from a forced one: f16 inputs, which
# 2.x runs on its torch reference whatever the implementation asked for (and refuses when forced)
AUTO_ONLY_DTYPES = ("f16",)
LABELS = {
    "snnc": "snnc model.so, cuda session, snn_run_device",
    "snnc-host": "snnc model.so, snnc_bench --device=cuda (host arrays)",
    "snnc-o3-host": "snnc -O3 model.so (scan-epilogue), snnc_bench --device=cuda (host arrays)",
    "sj014-cupy": "SpikingJelly 0.0.0.0.14 backend='cupy'",
    "sj2-triton": "SpikingJelly 2.x triton",
    "sj2-torch": "SpikingJelly 2.x torch",
    "sj2-cuda": "SpikingJelly 2.x native CUDA",
    "sj2-auto": "SpikingJelly 2.x default selection (f16 inputs)",
    "ann": "PyTorch ANN (ReLU, no T)",
    "ann-compile": "PyTorch ANN (ReLU, no T) under torch.compile",
}
SHORT = {"snnc": "snnc", "snnc-host": "snnc host", "snnc-o3-host": "snnc -O3 host", "sj014-cupy": "SJ cupy", "sj2-triton": "SJ2 triton",
         "sj2-torch": "SJ2 torch", "sj2-cuda": "SJ2 cuda", "sj2-auto": "SJ2 auto", "ann": "ANN",
         "ann-compile": "ANN compiled"}
# wheel groups (fetch-wheels.sh): one folder per group, installed into its own directory, because
# the two SpikingJelly versions cannot share one
WHEEL_GROUPS = {"sj2": ("sj2-triton", "sj2-torch", "sj2-cuda", "sj2-auto"), "sj014": ("sj014-cupy",)}

# bench/cpu/peers.py's conv weights (conv_weights()): the recipe is repeated here so that the GPU
# machine can regenerate the 52 MB file; the sha256 check against the CPU suite's catches drift
CONV_SEED, CONV_CH = 2024, 128
CONV_WEIGHTS = CPU_BENCH / "fmnist_conv_bench.safetensors"
CONV_WEIGHTS_BNCAL = CPU_BENCH / "fmnist_conv_bench_bncal.safetensors"
CONV_WEIGHTS_TRAINED = ROOT / "examples" / "fmnist_conv.safetensors"
BN_STATS = ("conv_fc.1.running_mean", "conv_fc.1.running_var", "conv_fc.5.running_mean",
            "conv_fc.5.running_var")
MLP_WEIGHTS = ROOT / "examples" / "fmnist_mlp.safetensors"

# the GPU validation issue's goals: LIF forward at 90% of the fp32 floor and 3x SpikingJelly cupy,
# the conv SNN 3x SpikingJelly's fastest backend, batch-1 latency half the eager ANN's
GOALS = {"lif_floor_pct": 90.0, "lif_vs_cupy": 3.0, "conv_vs_sj": 3.0}


def log(msg: str):
    print(msg, flush=True)


def rel(p) -> str:
    p = Path(p)
    return str(p.relative_to(ROOT)) if p.is_absolute() and p.is_relative_to(ROOT) else str(p)


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def pow2(n: int) -> str:
    return f"2^{n.bit_length() - 1}" if n & (n - 1) == 0 else str(n)


# ------------------------------------------------------------------------------------------------
# snnc: the generated LIF models, building snnc and the model.so files
# ------------------------------------------------------------------------------------------------

def lif_snn(n: int, t: int) -> str:
    """The LIF layer of examples/lif_layer.snn for N neurons and T steps."""
    return (f"# One multi-step LIF layer, N = {n}, T = {t} (generated by bench/gpu/peers.py).\n"
            f"# Input [batch, {t}, {n}] currents; output the spikes of every step.\n"
            f"model lif_n{n}_t{t} {{\n"
            f"  timesteps {t}\n"
            f"  input x : f32[T, {n}]\n"
            f"  s = LIF(x, tau = {LIF_TAU})\n"
            f"  output spikes = sequence(s)\n"
            f"}}\n")


def lif_configs(quick: bool) -> list[tuple[int, int]]:
    return [(n, t) for n in (QUICK_NS if quick else LIF_NS) for t in (QUICK_TS if quick else LIF_TS)]


def write_lif_snn(dest: Path, configs) -> dict:
    dest.mkdir(parents=True, exist_ok=True)
    out = {}
    for n, t in configs:
        p = dest / f"lif_n{n}_t{t}.snn"
        p.write_text(lif_snn(n, t))
        out[(n, t)] = p
    return out


def run_cmd(cmd: list[str], commands: list | None = None, env: dict | None = None,
            timeout: float = 600) -> subprocess.CompletedProcess:
    if commands is not None:
        commands.append(shlex.join(cmd).replace(str(ROOT) + "/", ""))
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                          env=None if env is None else {**os.environ, **env})


def ensure_snnc_built(build: Path, targets: tuple[str, ...], commands: list) -> str | None:
    """Configures (if needed) and builds `targets` in `build`. None when done, else why not."""
    if not shutil.which("cmake"):
        return "cmake is not installed"
    if not (build / "CMakeCache.txt").exists():
        gen = ["-G", "Ninja"] if shutil.which("ninja") else []
        r = run_cmd(["cmake", "-S", str(ROOT), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release", *gen],
                    commands)
        if r.returncode != 0:
            return f"cmake configure failed: {(r.stdout + r.stderr).strip()[-600:]}"
    r = run_cmd(["cmake", "--build", str(build), "--target", *targets, "-j", str(os.cpu_count() or 2)],
                commands, timeout=900)
    if r.returncode != 0:
        return f"cmake --build failed: {(r.stdout + r.stderr).strip()[-600:]}"
    return None


def snnc_version(snnc: Path) -> str | None:
    try:
        return run_cmd([str(snnc), "--version"], timeout=30).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def build_models(snnc: Path, dest: Path, configs, arch: str, cpu: str | None, commands: list,
                 env: dict | None = None) -> dict:
    """model.so files for the LIF configurations and the two networks, into dest. Returns
    {"lif": {"NxT": path}, "lif_missing": {"NxT": why}, "mlp": path, "conv": path, "errors": []}."""
    dest.mkdir(parents=True, exist_ok=True)
    snn_dir = dest / "snn"
    files = write_lif_snn(snn_dir, configs)
    common = [f"--cuda-arch={arch}", "--report=json"] + ([f"--cpu={cpu}"] if cpu else [])
    res = {"lif": {}, "lif_missing": {}, "errors": [], "reports": {}}

    def build(src: Path, so: Path, extra=()) -> str | None:
        r = run_cmd([str(snnc), str(src), "-o", str(so), *common, *extra], commands, env=env)
        if r.returncode != 0:
            return f"snnc {src.name} -o: {(r.stderr or r.stdout).strip()[-500:]}"
        try:
            res["reports"][so.name] = json.loads(r.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            pass
        return None

    for (n, t), src in files.items():
        so = dest / f"lif_n{n}_t{t}.so"
        why = build(src, so)
        if why:
            res["lif_missing"][f"{n}x{t}"] = why
            res["errors"].append(why)
        else:
            res["lif"][f"{n}x{t}"] = str(so)
    for name, extra in (("fmnist_mlp", ()), ("fmnist_conv", ("--no-embed-weights",))):
        for sfx, opt in (("", ()), ("_o3", ("-O3",))):
            so = dest / f"{name}{sfx}.so"
            why = build(ROOT / "examples" / f"{name}.snn", so, (*extra, *opt))
            if why:
                res["errors"].append(why)
            else:
                res[name.split("_")[1] + sfx] = str(so)
    return res


def prepare(args) -> int:
    """Here, where snnc builds (LLVM, flex, bison): the model.so files for sm_90 (H100, H200),
    snnc_bench, the Fashion-MNIST test set and the conv BatchNorm statistics, into prebuilt/,
    with a manifest. The GPU machine runs them; it does not need to build snnc."""
    build = Path(args.build_dir)
    commands: list[str] = []
    why = ensure_snnc_built(build, ("snnc", "snnc_bench"), commands)
    if why:
        log(f"--prepare: snnc could not be built in {rel(build)}: {why}")
        return 1
    snnc, bench = build / "driver" / "snnc", build / "bench" / "snnc_bench"
    dest = Path(args.prebuilt_dir)
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    configs = [(n, t) for n in LIF_NS for t in LIF_TS]  # always the full sweep
    log(f"building {len(configs)} LIF models and the two networks for {args.cuda_arch} "
        f"(CPU code for {args.cpu}) ...")
    models = build_models(snnc, dest, configs, args.cuda_arch, args.cpu, commands)
    if models["errors"]:
        for e in models["errors"]:
            log(f"  FAILED: {e}")
        return 1
    shutil.copy2(bench, dest / "snnc_bench")
    data_src = Path(args.data_dir or os.environ.get("SNN_DATA_DIR") or DEFAULT_DATA)
    (dest / "data").mkdir()
    for f in DATA_FILES:
        if not (data_src / f).exists():
            log(f"--prepare: {data_src / f} not found (--data-dir, $SNN_DATA_DIR)")
            return 1
        shutil.copy2(data_src / f, dest / "data" / f)
    weights = {}
    if CONV_WEIGHTS.exists():
        weights["default_sha256"] = sha256(CONV_WEIGHTS)
    if CONV_WEIGHTS_BNCAL.exists():
        from safetensors.numpy import load_file, save_file
        w = load_file(str(CONV_WEIGHTS_BNCAL))
        save_file({k: w[k] for k in BN_STATS}, str(dest / "conv_bncal_bn_stats.safetensors"))
        os.chmod(dest / "conv_bncal_bn_stats.safetensors", 0o644)
        weights["bn_calibrated_sha256"] = sha256(CONV_WEIGHTS_BNCAL)
    else:
        log(f"  note: {rel(CONV_WEIGHTS_BNCAL)} is absent (python3 bench/cpu/peers.py "
            "--conv-weights bn-calibrated --only conv makes it): the GPU run falls back to the "
            "default conv weights")
    manifest = {
        "made": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "by": "python3 bench/gpu/peers.py --prepare", "project": project_info(snnc),
        "cuda_arch": args.cuda_arch, "cpu": args.cpu, "commands": commands,
        "lif": {k: Path(v).name for k, v in models["lif"].items()},
        "lif_snn_sha256": {f"{n}x{t}": hashlib.sha256(lif_snn(n, t).encode()).hexdigest()
                           for n, t in configs},
        "mlp": "fmnist_mlp.so", "conv": "fmnist_conv.so", "mlp_o3": "fmnist_mlp_o3.so",
        "conv_o3": "fmnist_conv_o3.so", "conv_weights_embedded": False,
        "snnc_bench": "snnc_bench", "data": "data", "conv_weights": weights,
        "build_reports": models["reports"],
        "files": {p.relative_to(dest).as_posix(): {"bytes": p.stat().st_size, "sha256": sha256(p)}
                  for p in sorted(dest.rglob("*")) if p.is_file()},
    }
    (dest / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    total = sum(p.stat().st_size for p in dest.rglob("*") if p.is_file())
    log(f"wrote {rel(dest)}: {len(manifest['files']) + 1} files, {total / 2**20:.1f} MiB")
    log("carry it with the wheels (bench/gpu/fetch-wheels.sh): see bench/gpu/README.md")
    return 0


def project_info(snnc: Path | None = None) -> dict:
    def out(cmd):
        try:
            return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""
    return {"git_commit": out(["git", "rev-parse", "HEAD"]) or None,
            "git_dirty": bool(out(["git", "status", "--porcelain", "--untracked-files=no"])),
            "snnc_version": snnc_version(snnc) if snnc and snnc.exists() else None}


def snnc_artifacts(args, probe: dict, configs, commands: list) -> dict:
    """Where snnc's model.so files come from on this machine: prebuilt/ (made by --prepare; the
    usual way on the GPU machine, which cannot build snnc), or built now with a snnc from
    --build-dir (configured and built there if absent). Returns the worker's snnc fields, or
    {"not_run": why}."""
    prebuilt = Path(args.prebuilt_dir)
    manifest_path = prebuilt / "manifest.json"
    use_prebuilt = args.snnc == "prebuilt" or (args.snnc == "auto" and manifest_path.exists())
    if args.snnc == "none":
        return {"not_run": "--snnc none"}
    if use_prebuilt:
        if not manifest_path.exists():
            return {"not_run": f"{rel(manifest_path)} not found (run --prepare where snnc builds)"}
        man = json.loads(manifest_path.read_text())
        res = {"source": f"prebuilt ({rel(prebuilt)}, {man.get('made')}, git "
                         f"{(man.get('project') or {}).get('git_commit')}"
                         f"{' dirty' if (man.get('project') or {}).get('git_dirty') else ''})",
               "manifest": {k: man.get(k) for k in ("made", "project", "cuda_arch", "cpu", "conv_weights")},
               "lif_so": {}, "lif_so_missing": {}}
        for n, t in configs:
            key = f"{n}x{t}"
            want = hashlib.sha256(lif_snn(n, t).encode()).hexdigest()
            if key not in man.get("lif", {}):
                res["lif_so_missing"][key] = "not in prebuilt/ (run --prepare again)"
            elif man.get("lif_snn_sha256", {}).get(key) != want:
                res["lif_so_missing"][key] = "prebuilt/ was made from another .snn text (run --prepare again)"
            else:
                res["lif_so"][key] = str(prebuilt / man["lif"][key])
        res["mlp_so"] = str(prebuilt / man["mlp"])
        res["conv_so"] = str(prebuilt / man["conv"])
        for net in ("mlp", "conv"):  # absent from a prebuilt/ made before -O3 existed
            if man.get(f"{net}_o3"):
                res[f"{net}_o3_so"] = str(prebuilt / man[f"{net}_o3"])
        bench = prebuilt / man.get("snnc_bench", "snnc_bench")
        res["snnc_bench"] = str(bench) if bench.exists() else None
        sm = probe.get("sm")
        arch = man.get("cuda_arch", "")
        if sm and sm not in arch.split(","):
            res["arch_note"] = (f"prebuilt for {arch}, the device is {sm}: the driver compiles the "
                                "PTX at load, or the session fails (run --prepare --cuda-arch=" + sm + ")")
        return res
    build = Path(args.build_dir)
    snnc, bench = build / "driver" / "snnc", build / "bench" / "snnc_bench"
    if not snnc.exists() or not bench.exists():
        if args.no_build:
            return {"not_run": f"no snnc in {rel(build)} (--no-build) and no {rel(manifest_path)}"}
        log(f"building snnc in {rel(build)} ...")
        why = ensure_snnc_built(build, ("snnc", "snnc_bench"), commands)
        if why:
            return {"not_run": f"snnc could not be built here ({why}); build prebuilt/ with --prepare "
                               "on a machine where it builds and carry it"}
    sm = probe.get("sm") or "sm_90"
    log(f"building the model.so files with {rel(snnc)} for {sm} ...")
    models = build_models(snnc, OUT / "so", configs, sm, None, commands)
    res = {"source": f"built now by {rel(snnc)} ({snnc_version(snnc)})", "lif_so": models["lif"],
           "lif_so_missing": models["lif_missing"], "mlp_so": models.get("mlp"),
           "conv_so": models.get("conv"), "mlp_o3_so": models.get("mlp_o3"),
           "conv_o3_so": models.get("conv_o3"), "snnc_bench": str(bench) if bench.exists() else None}
    if models["errors"]:
        res["build_errors"] = models["errors"]
    return res


# ------------------------------------------------------------------------------------------------
# the peers' packages (wheels carried from here) and their processes
# ------------------------------------------------------------------------------------------------

def install_wheels(args, commands: list) -> dict:
    """Each wheel group of --wheels-dir (fetch-wheels.sh) installed into its own directory under
    out/site; the workers of its implementations get it first on PYTHONPATH. A group without
    wheels uses whatever python3 already has."""
    res = {}
    wheels = Path(args.wheels_dir)
    for group in WHEEL_GROUPS:
        src = wheels / group
        whls = sorted(src.glob("*.whl")) if src.is_dir() else []
        if not whls:
            res[group] = {"site": None, "note": f"no wheels in {rel(src)}: the installed packages are used"}
            continue
        site = OUT / "site" / group
        stamp = site / ".installed"
        names = [w.name for w in whls]
        if stamp.exists() and json.loads(stamp.read_text()) == names:
            res[group] = {"site": str(site), "wheels": names, "note": "already installed"}
            continue
        if site.exists():
            shutil.rmtree(site)
        r = run_cmd([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                     "--no-compile", "--no-cache-dir", "--target", str(site), *map(str, whls)], commands)
        if r.returncode != 0:
            res[group] = {"site": None, "error": f"pip install failed: {(r.stderr or r.stdout).strip()[-400:]}"}
            continue
        stamp.write_text(json.dumps(names))
        res[group] = {"site": str(site), "wheels": names}
    return res


def worker_env(impl: str, wheels: dict) -> dict:
    env = {"PYTHONUNBUFFERED": "1"}
    for group, impls in WHEEL_GROUPS.items():
        if impl in impls and (wheels.get(group) or {}).get("site"):
            env["PYTHONPATH"] = os.pathsep.join(
                [wheels[group]["site"]] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []))
    if impl.startswith("sj2-"):
        which = impl.split("-", 1)[1]
        env["SJ_LIF_CUDA_IMPLEMENTATION"] = which
        env["SJ_IF_CUDA_IMPLEMENTATION"] = which
    return env


class Runner:
    """Starts the workers within the run's time budget and keeps their logs."""

    def __init__(self, args, budget_s: float):
        self.args = args
        self.deadline = time.time() + budget_s
        self.logs: list[Path] = []
        for d in ("specs", "results", "logs"):
            (OUT / d).mkdir(parents=True, exist_ok=True)

    def left(self) -> float:
        return self.deadline - time.time()

    def run(self, name: str, spec: dict, env: dict | None = None, cap: float = 300) -> dict:
        timeout = min(cap, self.left() - 10)
        if timeout < 20:
            return {"not_run": f"time budget spent (--budget-s {self.args.budget_s:.0f})"}
        spec = {**spec, "result": str(OUT / "results" / f"{name}.json")}
        Path(spec["result"]).unlink(missing_ok=True)
        spec_path = OUT / "specs" / f"{name}.json"
        spec_path.write_text(json.dumps(spec, indent=1) + "\n")
        log_path = OUT / "logs" / f"{name}.log"
        self.logs.append(log_path)
        t0 = time.time()
        with open(log_path, "w") as lf:
            try:
                p = subprocess.run([sys.executable, str(WORKER), str(spec_path)], stdout=lf,
                                   stderr=subprocess.STDOUT, timeout=timeout,
                                   env={**os.environ, **(env or {})}, cwd=ROOT)
                rc = p.returncode
            except subprocess.TimeoutExpired:
                rc = "timeout"
        res = json.loads(Path(spec["result"]).read_text()) if Path(spec["result"]).exists() else {}
        if rc == "timeout":
            res["not_run" if not res else "stopped"] = f"stopped after {timeout:.0f} s (time limit)"
        elif rc != 0 and "not_run" not in res:
            tail = log_path.read_text(errors="replace").strip().splitlines()[-3:]
            res["not_run"] = f"worker exited with {rc}: {' | '.join(tail)[-400:]}"
        res["wall_s"] = round(time.time() - t0, 1)
        res["log"] = rel(log_path)
        return res

    def combined_log(self, path: Path):
        with open(path, "w") as f:
            for lp in self.logs:
                f.write(f"===== {rel(lp)}\n")
                f.write(lp.read_text(errors="replace") if lp.exists() else "(missing)\n")


# ------------------------------------------------------------------------------------------------
# conv weights and data
# ------------------------------------------------------------------------------------------------

def conv_weights(kind: str, prebuilt: Path, expected: dict) -> dict:
    """The conv SNN's weights file of bench/cpu/peers.py: the file itself when it is here, else
    regenerated with its recipe (PyTorch default initialisation, torch.manual_seed(2024), layers
    created in network order) into out/weights; bn-calibrated replaces the four BatchNorm running
    statistics with those of bench/cpu's bn-calibrated file (carried in prebuilt/ as a 2 KB file).
    The sha256 is compared with the CPU suite's."""
    res = {"kind": kind}
    if kind == "trained":
        # the conv example's weights, trained by SpikingJelly (85% test accuracy; real firing
        # rates), stored in f16: widened to f32 for every implementation alike
        import numpy as np
        from safetensors.numpy import load_file, save_file
        out = OUT / "weights" / "fmnist_conv_trained.safetensors"
        out.parent.mkdir(parents=True, exist_ok=True)
        save_file({k: v.astype(np.float32) for k, v in load_file(str(CONV_WEIGHTS_TRAINED)).items()},
                  str(out))
        res.update(path=str(out), source=rel(CONV_WEIGHTS_TRAINED), sha256=sha256(out))
        return res
    path = CONV_WEIGHTS
    if not path.exists():
        path = OUT / "weights" / CONV_WEIGHTS.name
        if not path.exists():
            import numpy as np
            import torch
            from safetensors.numpy import save_file
            path.parent.mkdir(parents=True, exist_ok=True)
            torch.manual_seed(CONV_SEED)
            c = CONV_CH
            mods = {0: torch.nn.Conv2d(1, c, 3, padding=1, bias=False), 1: torch.nn.BatchNorm2d(c),
                    4: torch.nn.Conv2d(c, c, 3, padding=1, bias=False), 5: torch.nn.BatchNorm2d(c),
                    9: torch.nn.Linear(c * 7 * 7, c * 4 * 4, bias=False),
                    11: torch.nn.Linear(c * 4 * 4, 10, bias=False)}
            w = {f"conv_fc.{i}.{k}": v.detach().numpy().astype(np.float32).copy()
                 for i, m in mods.items() for k, v in m.state_dict().items() if k != "num_batches_tracked"}
            save_file(w, str(path))
        res["regenerated"] = True
    res["default_sha256"] = sha256(path)
    want = expected.get("default_sha256")
    res["default_matches_cpu_suite"] = None if not want else res["default_sha256"] == want
    if kind == "default":
        res["path"] = str(path)
        return res
    stats_file = prebuilt / "conv_bncal_bn_stats.safetensors"
    if CONV_WEIGHTS_BNCAL.exists():
        res["path"] = str(CONV_WEIGHTS_BNCAL)
    elif stats_file.exists():
        from safetensors.numpy import load_file, save_file
        w = load_file(str(path))
        w.update(load_file(str(stats_file)))
        out = OUT / "weights" / CONV_WEIGHTS_BNCAL.name
        out.parent.mkdir(parents=True, exist_ok=True)
        save_file(w, str(out))
        res["path"] = str(out)
    else:
        res["path"] = str(path)
        res["kind"] = "default"
        res["note"] = ("bn-calibrated asked for, but neither bench/cpu's bn-calibrated file nor "
                       "prebuilt/conv_bncal_bn_stats.safetensors is here: default weights (the "
                       "dense IF layers stay silent)")
        return res
    res["sha256"] = sha256(Path(res["path"]))
    want = expected.get("bn_calibrated_sha256")
    res["matches_cpu_suite"] = None if not want else res["sha256"] == want
    return res


def data_dir(args) -> Path:
    for d in (args.data_dir, os.environ.get("SNN_DATA_DIR"), PREBUILT / "data", DEFAULT_DATA):
        if d and all((Path(d) / f).exists() for f in DATA_FILES):
            return Path(d)
    return Path(args.data_dir or DEFAULT_DATA)


def test_labels(d: Path):
    import gzip
    import numpy as np
    raw = gzip.open(d / DATA_FILES[1], "rb").read()
    return np.frombuffer(raw, dtype=np.uint8, offset=8).astype(np.int64)


# ------------------------------------------------------------------------------------------------
# comparing outputs
# ------------------------------------------------------------------------------------------------

def spike_agreement(a_path: str, b_path: str) -> float:
    import numpy as np
    a, b = np.load(a_path), np.load(b_path)
    if a.shape != b.shape:
        return float("nan")
    x = np.bitwise_xor(a, b)
    diff = int(np.bitwise_count(x).sum()) if hasattr(np, "bitwise_count") else int(np.unpackbits(x).sum())
    return 1.0 - diff / (8 * a.size)


def first_argmax(a):
    import numpy as np
    return np.argmax(a, axis=1)  # first index on ties, like torch.argmax


# ------------------------------------------------------------------------------------------------
# the workloads
# ------------------------------------------------------------------------------------------------

# the order of the work: first what the goals compare (snnc, SpikingJelly cupy, the ANN) and the
# fastest SpikingJelly 2.x, then the rest, so that a run cut short by --budget-s keeps what matters
PHASES = (("snnc", "sj014-cupy", "ann", "sj2-triton", "snnc-host", "snnc-o3-host"),
          ("ann-compile", "sj2-torch", "sj2-auto", "sj2-cuda"))


def lif_spec(args, probe: dict) -> dict:
    cfgs = [{"N": n, "T": t, "dtype": d} for n, t in lif_configs(args.quick) for d in LIF_DTYPES]
    (OUT / "lif").mkdir(parents=True, exist_ok=True)
    return {"kind": "lif", "configs": cfgs, "out_dir": str(OUT / "lif"), "l2_bytes": probe.get("l2_bytes"),
            "repeats": 7 if args.quick else 15, "warmup": 3, "profile_calls": 5, "tf32": args.tf32}


def run_lif(args, runner: Runner, impl: str, base: dict, snnc: dict, wheels: dict) -> dict:
    log(f"LIF: {LABELS[impl]} ...")
    spec = {**base, "impl": impl}
    if impl == "sj2-auto":
        spec["configs"] = [c for c in base["configs"] if c["dtype"] in AUTO_ONLY_DTYPES]
    if impl == "snnc":
        if "not_run" in snnc:
            return {"not_run": snnc["not_run"]}
        spec.update({k: snnc.get(k) for k in ("lif_so", "lif_so_missing")}, snnc_source=snnc.get("source"))
    r = runner.run(f"lif_{impl}", spec, worker_env(impl, wheels), cap=args.worker_cap_s)
    if "not_run" in r:
        log(f"  not run: {r['not_run']}")
    return r


def lif_rows(args, base: dict, workers: dict, copy_gbps: float | None, final: bool) -> dict:
    """The LIF section: one row per (N, T, dtype) with every implementation's figures, the floor,
    and the spike agreement with the reference SpikingJelly."""
    impls = [i for i in LIF_IMPLS if i in workers]
    rows = []
    for c in base["configs"]:
        n, t, d = c["N"], c["T"], c["dtype"]
        eb = 4 if d == "f32" else 2
        row = {**c, "bytes_min": 2 * eb * t * n, "bytes_with_state": 2 * eb * t * n + 2 * 4 * n, "impls": {}}
        if copy_gbps:
            row["floor_ms"] = round(row["bytes_min"] / copy_gbps / 1e6, 5)
        for impl in impls:
            if impl == "sj2-auto" and d not in AUTO_ONLY_DTYPES:
                continue
            w = workers[impl]
            if "not_run" in w and "configs" not in w:
                row["impls"][impl] = {"not_run": w["not_run"]}
                continue
            r = next((x for x in w.get("configs", []) if (x["N"], x["T"], x["dtype"]) == (n, t, d)), None)
            r = dict(r) if r else {"not_run": w.get("stopped") or w.get("not_run") or "not reached"}
            if "wall" in r:
                dev = r.get("device", {})
                ms, basis = ((dev["span_ms"], "device span") if dev.get("span_ms") else
                             (dev["kernel_ms_per_call"], "kernel sum") if dev.get("kernel_ms_per_call") else
                             (r["wall"]["median_ms"], "wall"))
                r["ms"], r["time_basis"] = ms, basis
                r["GB_per_s"] = round(row["bytes_min"] / ms / 1e6, 1)
                if copy_gbps:
                    r["pct_of_floor"] = round(100 * row["floor_ms"] / ms, 1)
            row["impls"][impl] = r
        ref = next((i for i in REFERENCE_ORDER if row["impls"].get(i, {}).get("spikes_file")), None)
        row["reference"] = ref
        checks = {r.get("input_checksum") for r in row["impls"].values() if "input_checksum" in r}
        row["inputs_identical"] = len(checks) <= 1
        for impl, r in row["impls"].items():
            if ref and impl != ref and r.get("spikes_file") and Path(r["spikes_file"]).exists():
                r["spike_agreement"] = round(spike_agreement(r["spikes_file"], row["impls"][ref]["spikes_file"]), 8)
        rows.append(row)
    if final and not args.keep_outputs:
        for p in (OUT / "lif").glob("*.npy"):
            p.unlink()
    return {"what": "one multi-step LIF layer (tau=2, v_th=1, hard reset to 0, decay_input), forward "
                    "from rest, [T, N] input U[0, 2.5) from a CUDA generator seeded by (N, T)",
            "bytes_rule": "bytes_min = T*N*(input element + spike element) (f32: 8 B, f16: 4 B per "
                          "neuron-step); bytes_with_state adds the f32 state read and written once "
                          "(shared/reference/benchmarks.md counts it: 75.5 MB for 2^20 x 8)",
            "floor": "bytes_min / the copy yardstick's GB/s", "copy_GB_per_s": copy_gbps,
            "time": "ms = device span per call from torch.profiler (first start to last end of the "
                    "call's GPU activities) when available, else the sum of its kernels, else wall",
            "configs": rows, "workers": {k: {kk: vv for kk, vv in v.items() if kk != "configs"}
                                         for k, v in workers.items()}}


def net_spec(args, name: str, weights: dict, ddir: Path) -> dict:
    (OUT / "net").mkdir(parents=True, exist_ok=True)
    return {"kind": "net", "net": name, "images": 2048 if args.quick else 10000, "batches": list(NET_BATCHES),
            "data_dir": str(ddir), "out_dir": str(OUT / "net"),
            "weights": str(MLP_WEIGHTS) if name == "mlp" else weights["path"],
            "repeats": 3 if args.quick else 5, "latency_runs": 50 if args.quick else 200,
            "latency_warmup": 10 if args.quick else 20, "profile_calls": 3, "tf32": args.tf32}


def run_net(args, runner: Runner, impl: str, base: dict, snnc: dict, wheels: dict) -> dict:
    name = base["net"]
    log(f"{name}: {LABELS[impl]} ...")
    if impl.startswith("snnc") and "not_run" in snnc:
        return {"not_run": snnc["not_run"]}
    if impl in HOST_IMPLS:
        if not snnc.get("snnc_bench"):
            return {"not_run": "no snnc_bench"}
        so = snnc.get(f"{name}_o3_so" if impl == "snnc-o3-host" else f"{name}_so")
        if not so:
            return {"not_run": "no -O3 model.so (run --prepare again)"}
        return snnc_bench_rows(args, runner, name, {**snnc, f"{name}_so": so}, base["weights"],
                               base["images"], Path(base["data_dir"]), impl)
    spec = {**base, "impl": impl}
    if impl == "snnc":
        spec.update({f"{name}_so": snnc.get(f"{name}_so"), "snnc_source": snnc.get("source"),
                     f"{name}_weights_for_snnc": base["weights"] if name == "conv" else None})
    r = runner.run(f"{name}_{impl}", spec, worker_env(impl, wheels), cap=args.worker_cap_s)
    if "not_run" in r:
        log(f"  not run: {r['not_run']}")
    return r


def net_rows(results: dict, base: dict, labels) -> dict:
    """A network's section: every implementation's figures, and agreement with the reference
    SpikingJelly (predictions and whole output-rate rows) and accuracy."""
    import numpy as np
    impls = {i: dict(results[i]) for i in NET_IMPLS + HOST_IMPLS if i in results}
    res = {"images": base["images"], "batches": base["batches"], "impls": impls}
    ref = next((i for i in REFERENCE_ORDER if impls.get(i, {}).get("outputs_file")), None)
    res["reference"] = ref
    ref_out = np.load(impls[ref]["outputs_file"]) if ref else None
    for impl, r in impls.items():
        if not r.get("outputs_file") or not Path(r["outputs_file"]).exists():
            continue
        o = np.load(r["outputs_file"])
        p = first_argmax(o)
        r["accuracy"] = round(float((p == labels[:len(p)]).mean()), 4)
        if ref_out is not None and impl != ref:
            k = min(len(o), len(ref_out))
            r["prediction_agreement"] = round(float((p[:k] == first_argmax(ref_out[:k])).mean()), 6)
            if not impl.startswith("ann"):
                r["rate_agreement"] = round(float((o[:k] == ref_out[:k]).all(axis=1).mean()), 6)
    if impls.get("snnc", {}).get("outputs_file") and impls.get("snnc-host", {}).get("outputs_file"):
        a, b = np.load(impls["snnc"]["outputs_file"]), np.load(impls["snnc-host"]["outputs_file"])
        impls["snnc-host"]["identical_to_device_path"] = bool(a.shape == b.shape and (a == b).all())
    if impls.get("snnc-host", {}).get("outputs_file") and impls.get("snnc-o3-host", {}).get("outputs_file"):
        a, b = np.load(impls["snnc-host"]["outputs_file"]), np.load(impls["snnc-o3-host"]["outputs_file"])
        impls["snnc-o3-host"]["identical_to_O2"] = bool(a.shape == b.shape and (a == b).all())
    return res


def snnc_bench_rows(args, runner: Runner, name: str, snnc: dict, wpath: str, images: int, ddir: Path,
                    impl: str = "snnc-host") -> dict:
    """snnc_bench --device=cuda: host arrays in and out (snn_run copies them), at each batch size."""
    so = snnc.get(f"{name}_so")
    res = {"throughput": {}, "commands": []}
    out = OUT / "net" / f"{name}_out_{impl}.npy"
    for i, b in enumerate(NET_BATCHES):
        if runner.left() < 30:
            res["not_run"] = "time budget spent"
            return res
        cmd = [snnc["snnc_bench"], so, "--fmnist", "--device=cuda", f"--batch={b}", f"--limit={images}",
               f"--repeats={3 if args.quick else 5}"]
        if name == "conv":
            cmd.append(f"--weights={wpath}")
        if i == 0:
            cmd += [f"--latency-runs={50 if args.quick else 200}", f"--output={out}"]
        try:
            r = run_cmd(cmd, res["commands"], env={"SNN_DATA_DIR": str(ddir)}, timeout=min(300, runner.left()))
        except subprocess.TimeoutExpired:
            res["not_run"] = "snnc_bench timed out"
            return res
        if r.returncode != 0:
            res["not_run"] = f"snnc_bench failed: {r.stderr.strip()[-400:]}"
            return res
        j = json.loads(r.stdout.strip().splitlines()[-1])
        res["throughput"][str(b)] = {"batch": b, "images_per_s": j["images_per_s"],
                                     "pass_s": j["pass_seconds"], "median_pass_s": j["median_pass_s"],
                                     "snnc_kernel_launches_per_run": j.get("kernel_launches_per_run"),
                                     "snnc_graph_launches_per_run": j.get("graph_launches_per_run")}
        if i == 0:
            res["session_device"] = j.get("device")
            res["latency_b1"] = {"median_ms": j.get("latency_b1_ms"), "runs": j.get("latency_runs")}
            res["b1_kernel_launches_per_run"] = j.get("b1_kernel_launches_per_run")
            res["outputs_file"] = str(out)
    return res


# ------------------------------------------------------------------------------------------------
# goals, table
# ------------------------------------------------------------------------------------------------

def best_sj(impls: dict, value) -> tuple[str | None, float | None]:
    """cupy if it ran, else the best SpikingJelly that ran (value(r) -> figure, higher is better)."""
    r = impls.get("sj014-cupy", {})
    if value(r) is not None:
        return "sj014-cupy", value(r)
    cands = [(i, value(impls.get(i, {}))) for i in REFERENCE_ORDER if value(impls.get(i, {})) is not None]
    return max(cands, key=lambda kv: kv[1]) if cands else (None, None)


def goals(res: dict) -> list[dict]:
    out = []

    def add(goal, ok, detail):
        out.append({"goal": goal, "status": "n/a" if ok is None else ("PASS" if ok else "FAIL"), "detail": detail})

    for row in res.get("lif", {}).get("configs", []):
        if row["dtype"] != "f32" or row["T"] < 8:
            continue
        tag = f"LIF N={pow2(row['N'])} T={row['T']} f32"
        s = row["impls"].get("snnc", {})
        pct = s.get("pct_of_floor")
        add(f"{tag}: snnc >= {GOALS['lif_floor_pct']:.0f}% of the bandwidth floor",
            None if pct is None else pct >= GOALS["lif_floor_pct"],
            f"{pct}% ({s.get('time_basis')})" if pct is not None else s.get("not_run", "no figure"))
        inv = lambda r: (1.0 / r["ms"]) if r.get("ms") else None  # noqa: E731
        who, speed = best_sj(row["impls"], inv)
        if s.get("ms") and speed:
            ratio = (1.0 / s["ms"]) / speed
            add(f"{tag}: snnc >= {GOALS['lif_vs_cupy']:.0f}x SpikingJelly cupy", ratio >= GOALS["lif_vs_cupy"],
                f"{ratio:.2f}x vs {SHORT[who]}" + ("" if who == "sj014-cupy" else " (cupy did not run)"))
        else:
            add(f"{tag}: snnc >= {GOALS['lif_vs_cupy']:.0f}x SpikingJelly cupy", None, "a side did not run")
    conv = res.get("conv", {}).get("impls", {})
    for b in NET_BATCHES:
        tp = lambda r, b=b: (r.get("throughput", {}).get(str(b)) or {}).get("images_per_s")  # noqa: E731
        cands = [(i, tp(conv.get(i, {}))) for i in REFERENCE_ORDER if tp(conv.get(i, {}))]
        who, ref = max(cands, key=lambda kv: kv[1]) if cands else (None, None)
        mine = tp(conv.get("snnc", {}))
        ok = None if not (mine and ref) else mine >= GOALS["conv_vs_sj"] * ref
        add(f"conv b{b}: snnc throughput >= {GOALS['conv_vs_sj']:.0f}x SpikingJelly's fastest", ok,
            f"{mine / ref:.2f}x vs {SHORT[who]}" if ok is not None else "a side did not run")
    for net in ("mlp", "conv"):
        impls = res.get(net, {}).get("impls", {})
        lat = lambda r: (r.get("latency_b1") or {}).get("median_ms")  # noqa: E731
        mine, ann = lat(impls.get("snnc", {})), lat(impls.get("ann", {}))
        add(f"{net} batch-1 latency: snnc <= half the PyTorch ANN's (eager)",
            None if not (mine and ann) else mine <= 0.5 * ann,
            f"{mine:.3f} ms vs {ann:.3f} ms ({mine / ann:.2f}x)" if mine and ann else "a side did not run")
    return out


def fmt_ms(r: dict) -> str:
    if "ms" not in r:
        return "not run"
    pct = f" {r['pct_of_floor']:.0f}%" if r.get("pct_of_floor") is not None else ""
    return f"{r['ms']:.4f}{pct}"


def table_lif(lif: dict) -> list[str]:
    impls = [i for i in LIF_IMPLS if any(i in row["impls"] for row in lif["configs"])]
    rows = [("N", "T", "in", "floor ms", *[SHORT[i] for i in impls], "snnc/best SJ", "snnc spikes = SJ",
             "snnc kernels+copies")]
    for row in lif["configs"]:
        s = row["impls"].get("snnc", {})
        who, speed = best_sj(row["impls"], lambda r: (1.0 / r["ms"]) if r.get("ms") else None)
        ratio = f"{(1.0 / s['ms']) / speed:.2f}x ({SHORT[who]})" if s.get("ms") and speed else ""
        agree = f"{100 * s['spike_agreement']:.4f}%" if s.get("spike_agreement") is not None else ""
        dev = s.get("device") or {}
        work = (f"{dev['kernels_per_call']:g}+{dev.get('memcpy_per_call', 0) + dev.get('memset_per_call', 0):g} "
                f"({dev['kernel_ms_per_call']:.4f} ms in kernels)" if dev.get("kernels_per_call") is not None else "")
        rows.append((pow2(row["N"]), str(row["T"]), row["dtype"],
                     f"{row['floor_ms']:.4f}" if row.get("floor_ms") else "?",
                     *[fmt_ms(row["impls"][i]) if i in row["impls"] else "-" for i in impls], ratio,
                     agree, work))
    return grid(rows, f"LIF forward: device ms per call and % of the bandwidth floor "
                      f"(copy {lif.get('copy_GB_per_s')} GB/s)")


def table_nets(res: dict) -> list[str]:
    rows = [("network", "implementation", "img/s b256", "img/s b1024", "b1 latency ms", "kernels b1/b256",
             "agreement / accuracy")]
    for net in ("mlp", "conv"):
        if net not in res:
            continue
        for impl, r in res[net]["impls"].items():
            if "not_run" in r and not r.get("throughput"):
                rows.append((net, SHORT[impl], "not run", "", "", "", r["not_run"][:60]))
                continue
            tp = [(r.get("throughput", {}).get(str(b)) or {}).get("images_per_s") for b in NET_BATCHES]
            lat = r.get("latency_b1") or {}
            k = r.get("kernels", {})
            kern = "/".join(
                f"{k[str(b)]['kernels_per_call']:g}" if k.get(str(b), {}).get("kernels_per_call") is not None
                else (f"{k[str(b)]['snnc_kernel_launches_per_run']:g}*" if k.get(str(b), {}).get(
                    "snnc_kernel_launches_per_run") is not None else "?") for b in (1, NET_BATCHES[0]))
            if impl in HOST_IMPLS:
                big = (r.get("throughput", {}).get(str(NET_BATCHES[0])) or {}).get("snnc_kernel_launches_per_run")
                kern = f"{r.get('b1_kernel_launches_per_run', '?')}*/{big if big is not None else '?'}*"
            agree = []
            if r.get("prediction_agreement") is not None:
                agree.append(f"pred = SJ {100 * r['prediction_agreement']:.2f}%")
            if r.get("rate_agreement") is not None:
                agree.append(f"rates = SJ {100 * r['rate_agreement']:.2f}%")
            if r.get("accuracy") is not None:
                agree.append(f"acc {r['accuracy']:.4f}")
            if impl == res[net].get("reference"):
                agree.append("(reference)")
            rows.append((net, SHORT[impl], *[f"{x:,.0f}" if x else "-" for x in tp],
                         f"{lat['median_ms']:.3f}" + (f" ({lat['p10_ms']:.3f}-{lat['p90_ms']:.3f})"
                                                      if lat.get("p10_ms") is not None else "")
                         if lat.get("median_ms") else "-", kern, ", ".join(agree)))
    return grid(rows, "Fashion-MNIST networks (kernels: CUDA kernels per forward from torch.profiler; "
                      "* = snnc's own count, snn_session_stats)")


def grid(rows, title) -> list[str]:
    w = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [title] + [" | ".join(c.ljust(w[i]) for i, c in enumerate(r)).rstrip() for r in rows]
    lines.insert(2, "-+-".join("-" * x for x in w))
    return lines


def not_run_lines(res: dict) -> list[str]:
    seen = {}
    for impl, w in res.get("lif", {}).get("workers", {}).items():
        if w.get("not_run"):
            seen.setdefault(f"lif {SHORT[impl]}", w["not_run"])
    for row in res.get("lif", {}).get("configs", []):
        for impl, r in row["impls"].items():
            if r.get("not_run") and r["not_run"] not in seen.values():
                seen.setdefault(f"lif {SHORT[impl]} {row['dtype']}", r["not_run"])
    for net in ("mlp", "conv"):
        for impl, r in res.get(net, {}).get("impls", {}).items():
            if r.get("not_run"):
                seen.setdefault(f"{net} {SHORT[impl]}", r["not_run"])
    return [f"  {k}: not run: {v[:300]}" for k, v in seen.items()]


# ------------------------------------------------------------------------------------------------
# no-GPU checks: --dry-run and --self-test
# ------------------------------------------------------------------------------------------------

def dry_run(args) -> int:
    configs = lif_configs(args.quick)
    log(f"plan ({'quick' if args.quick else 'full'}):")
    log(f"  lif: N in {[pow2(n) for n in sorted({n for n, _ in configs})]}, "
        f"T in {sorted({t for _, t in configs})}, inputs {list(LIF_DTYPES)}; "
        f"implementations {[i for i in LIF_IMPLS if i in args.impls]}")
    log(f"  mlp, conv: batches {list(NET_BATCHES)} and 1; implementations "
        f"{[i for i in NET_IMPLS if i in args.impls]} + snnc-host and snnc-o3-host (snnc_bench --device=cuda)")
    files = write_lif_snn(OUT / "snn", configs)
    snnc = Path(args.build_dir) / "driver" / "snnc"
    failed = 0
    if snnc.exists():
        for (n, t), p in files.items():
            r = run_cmd([str(snnc), "--emit=kernel", str(p)])
            ok = r.returncode == 0 and "kernel LIF_" in r.stdout
            failed += not ok
            log(f"  {rel(p)}: snnc --emit=kernel {'ok' if ok else 'FAILED: ' + r.stderr.strip()[-300:]}")
    else:
        log(f"  {len(files)} .snn files in {rel(OUT / 'snn')} (no snnc in {rel(snnc.parent.parent)} to check them)")
    man = Path(args.prebuilt_dir) / "manifest.json"
    log(f"  prebuilt: {rel(man.parent)} " + (f"made {json.loads(man.read_text()).get('made')}" if man.exists()
                                           else "absent (--prepare makes it)"))
    for g in WHEEL_GROUPS:
        whls = sorted((Path(args.wheels_dir) / g).glob("*.whl"))
        log(f"  wheels {g}: {', '.join(w.name for w in whls) if whls else 'none (bench/gpu/fetch-wheels.sh)'}")
    probe = probe_here()
    here = probe.get("name") if probe.get("cuda") else f"no CUDA device: nothing to measure ({probe.get('why')})"
    log(f"  CUDA here: {here}")
    return 1 if failed else 0


def probe_here() -> dict:
    """The probe worker, run directly (quick, no time budget)."""
    spec = OUT / "specs" / "probe_here.json"
    spec.parent.mkdir(parents=True, exist_ok=True)
    result = OUT / "results" / "probe_here.json"
    result.parent.mkdir(parents=True, exist_ok=True)
    result.unlink(missing_ok=True)
    spec.write_text(json.dumps({"kind": "probe", "result": str(result)}))
    try:
        subprocess.run([sys.executable, str(WORKER), str(spec)], capture_output=True, timeout=300)
    except subprocess.TimeoutExpired:
        return {"cuda": False, "why": "the probe timed out"}
    return json.loads(result.read_text()) if result.exists() else {"cuda": False, "why": "the probe failed"}


def self_test(args) -> int:
    """snnc's side of the suite on the CUDA emulator (tests/cuda_emu: libcuda and NVRTC stand-ins
    that run the kernels on the CPU): the generated .snn files compile, a model.so made with the
    emulator's NVRTC runs through the worker's ctypes binding on a "cuda" session with device
    pointers (snn_run_device) and on host arrays (snn_run), its spikes equal a float32 LIF computed
    here with numpy, the stats count one graph per run, and snnc_bench --device=cuda works."""
    import ctypes
    import numpy as np
    sys.path.insert(0, str(HERE))
    import worker
    build = Path(args.build_dir)
    why = ensure_snnc_built(build, ("snnc", "snnc_bench", "snn_cuemu"), [])
    if why:
        log(f"self-test: cannot build snnc, snnc_bench and snn_cuemu in {rel(build)}: {why}")
        return 1
    snnc, bench = build / "driver" / "snnc", build / "bench" / "snnc_bench"
    emu = build / "tests" / "cuda_emu" / "libsnn_cuemu.so"
    d = OUT / "selftest"
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    passed, failed = [], []

    def check(name, ok, detail=""):
        (passed if ok else failed).append(name)
        show = detail and (not ok or len(detail) < 100)
        log(f"  {'ok  ' if ok else 'FAIL'} {name}{': ' + detail if show else ''}")

    # 1. every generated .snn of the full sweep is accepted
    for (n, t), p in write_lif_snn(d / "snn", [(n, t) for n in LIF_NS for t in LIF_TS]).items():
        r = run_cmd([str(snnc), "--emit=kernel", str(p)])
        check(f"snnc --emit=kernel {p.name}", r.returncode == 0 and "kernel LIF_" in r.stdout,
              r.stderr.strip()[-200:])
    # 2. a small LIF model.so through the emulator
    n, t = 1000, 8
    emu_env = {"SNN_NVRTC": str(emu), "SNN_CACHE_DIR": "off"}
    models = build_models(snnc, d / "so", [(n, t)], "sm_90", None, [], env=emu_env)
    check("model.so built with the emulator's NVRTC", not models["errors"], "; ".join(models["errors"]))
    if models["errors"]:
        return report_selftest(passed, failed)
    os.environ["SNN_CUDA_DRIVER"] = str(emu)  # read by the runtime when the first cuda session opens
    m = worker.SnncModel(models["lif"][f"{n}x{t}"])
    check("model devices", m.devices == "cpu,cuda", m.devices)
    check("input/output info", m.input.numel == n * t and m.output.numel == n * t,
          f"{m.input.numel}, {m.output.numel}")
    x = (np.random.default_rng(7).random((t, n), dtype=np.float32) * np.float32(2.5)).astype(np.float32)
    ref = np.zeros((t, n), np.float32)
    v = np.zeros(n, np.float32)
    for k in range(t):  # SpikingJelly's LIF in float32: H = V + (X - V) / tau, fire H >= 1, reset 0
        v = (v + (x[k] - v) / np.float32(LIF_TAU)).astype(np.float32)
        ref[k] = (v >= 1).astype(np.float32)
        v = np.where(ref[k] != 0, np.float32(0), v).astype(np.float32)
    cu = ctypes.CDLL(str(emu))
    ctx, dev = ctypes.c_void_p(), ctypes.c_int()
    ok = (cu.cuInit(0) == 0 and cu.cuDeviceGet(ctypes.byref(dev), 0) == 0
          and cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0 and cu.cuCtxPushCurrent_v2(ctx) == 0)
    dx, dy = ctypes.c_uint64(), ctypes.c_uint64()
    ok = ok and cu.cuMemAlloc_v2(ctypes.byref(dx), ctypes.c_size_t(x.nbytes)) == 0
    ok = ok and cu.cuMemAlloc_v2(ctypes.byref(dy), ctypes.c_size_t(x.nbytes)) == 0
    cu.cuCtxPopCurrent_v2(ctypes.byref(ctypes.c_void_p()))
    check("emulated device memory", ok)
    ctypes.memmove(dx.value, x.ctypes.data, x.nbytes)  # emulator device pointers are host addresses
    ctypes.memset(dy.value, 0xFF, x.nbytes)  # poison: NaN everywhere
    s = m.session("cuda", 1)
    check("cuda session", s.device == "cuda:0", s.device)
    before = s.stats()
    for _ in range(3):
        s.run_device(0, 1, dx.value, dy.value)
    y = np.ctypeslib.as_array((ctypes.c_float * (n * t)).from_address(dy.value)).reshape(t, n).copy()
    check("snn_run_device spikes = float32 LIF reference", bool((y == ref).all()),
          f"{int((y != ref).sum())} differ, rate {ref.mean():.3f}")
    lp = worker.launches_per_run(before, s.stats())
    check("stats: one graph per run, kernels per run", lp.get("snnc_graph_launches_per_run") == 1.0
          and (lp.get("snnc_kernel_launches_per_run") or 0) >= 1, json.dumps(lp))
    yh = np.full((t, n), np.nan, np.float32)
    s.run_host(0, 1, x, yh)
    check("snn_run on the cuda session (host arrays) = reference", bool((yh == ref).all()))
    try:
        s.run_device(0, 1, x.ctypes.data, yh.ctypes.data)
        check("snn_run_device refuses host pointers", False, "accepted")
    except RuntimeError as e:
        check("snn_run_device refuses host pointers", "snn_run_device" in str(e), str(e)[:120])
    s.close()
    c = m.session("cpu", 1)
    yc = np.full((t, n), np.nan, np.float32)
    c.run_host(0, 1, x, yc)
    check("cpu session = reference", bool((yc == ref).all()))
    c.close()
    # 3. snnc_bench --device=cuda on the emulator, host arrays
    np.save(d / "x.npy", x[None])
    r = run_cmd([str(bench), models["lif"][f"{n}x{t}"], f"--input={d / 'x.npy'}", "--device=cuda",
                 "--batch=1", "--repeats=2", "--latency-runs=2", f"--output={d / 'y.npy'}"],
                env={"SNN_CUDA_DRIVER": str(emu)})
    j = json.loads(r.stdout.strip().splitlines()[-1]) if r.returncode == 0 else {}
    check("snnc_bench --device=cuda", r.returncode == 0 and j.get("device") == "cuda:0"
          and j.get("graph_launches_per_run") == 1.0 and j.get("kernel_launches_per_run", 0) >= 1
          and j.get("b1_graph_launches_per_run") == 1.0, r.stdout.strip()[-300:] + r.stderr.strip()[-300:])
    if r.returncode == 0:
        check("snnc_bench output = reference", bool((np.load(d / "y.npy")[0] == ref).all()))
    # 4. without a driver: the runtime's own message
    r = run_cmd([str(bench), models["lif"][f"{n}x{t}"], f"--input={d / 'x.npy'}", "--device=cuda"],
                env={"SNN_CUDA_DRIVER": str(d / "no-such-libcuda.so")})
    check("snnc_bench --device=cuda without a driver fails with the runtime's message",
          r.returncode == 1 and "CUDA" in r.stderr, r.stderr.strip()[-200:])
    return report_selftest(passed, failed)


def report_selftest(passed, failed) -> int:
    log(f"self-test: {len(passed)} passed, {len(failed)} failed")
    return 1 if failed else 0


# ------------------------------------------------------------------------------------------------

class Parser(argparse.ArgumentParser):
    def error(self, message):  # exit 1, not argparse's 2: 2 means "no CUDA device"
        self.print_usage(sys.stderr)
        self.exit(1, f"{self.prog}: error: {message}\n")


def main() -> int:
    ap = Parser(description=__doc__.split("\n\nWorkloads")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="Exit status: 0 measured (rows may be 'not run'), 2 no CUDA device "
                                        "(nothing measured or written), 1 usage or set-up error.")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="smoke run: N=2^20, T=8,32; 2,048 images; fewer repeats")
    mode.add_argument("--dry-run", action="store_true", help="no measuring: the plan, the .snn files checked "
                      "by snnc --emit=kernel, the carried files; exit 0 (1 if snnc rejects a file)")
    mode.add_argument("--prepare", action="store_true", help="here: build prebuilt/ (model.so files, "
                      "snnc_bench, test set, conv BN statistics) for the GPU machine")
    mode.add_argument("--self-test", action="store_true", help="here: snnc's side on the CUDA emulator")
    ap.add_argument("--only", default="lif,mlp,conv", help="comma list of workloads (lif, mlp, conv)")
    ap.add_argument("--impls", default=",".join(dict.fromkeys(LIF_IMPLS + NET_IMPLS)),
                    help="comma list of implementations to run (default: all): " +
                         ", ".join(dict.fromkeys(LIF_IMPLS + NET_IMPLS)))
    ap.add_argument("--snnc", choices=("auto", "prebuilt", "build", "none"), default="auto",
                    help="where snnc's model.so files come from: prebuilt/ if it has a manifest, else "
                         "built with --build-dir's snnc (auto); or force one; none: no snnc rows")
    ap.add_argument("--build-dir", default=str(ROOT / "build-bench"),
                    help="snnc build directory (configured and built when absent; default build-bench)")
    ap.add_argument("--no-build", action="store_true", help="never run cmake")
    ap.add_argument("--prebuilt-dir", default=str(PREBUILT), help="default bench/gpu/prebuilt")
    ap.add_argument("--wheels-dir", default=str(WHEELS), help="default bench/gpu/wheels (fetch-wheels.sh)")
    ap.add_argument("--cuda-arch", default="sm_90", help="--prepare: snnc --cuda-arch (default sm_90: H100, H200)")
    ap.add_argument("--cpu", default="x86-64-v2", help="--prepare: snnc --cpu for model.so's CPU code "
                    "(default x86-64-v2, so that it loads on any x86-64 host)")
    ap.add_argument("--data-dir", help="Fashion-MNIST IDX files (default $SNN_DATA_DIR, prebuilt/data, "
                    f"{DEFAULT_DATA})")
    ap.add_argument("--conv-weights", choices=("trained", "default", "bn-calibrated"), default="trained",
                    help="conv SNN weights: trained (default: the conv example's, trained by "
                    "SpikingJelly, real firing rates), or bench/cpu/peers.py's default or bn-calibrated")
    ap.add_argument("--tf32", action="store_true", help="allow TF32 in the torch peers (default off: "
                    "snnc computes plain float32)")
    ap.add_argument("--budget-s", type=float, default=540, help="stop starting work after this many "
                    "seconds (default 540, inside the device tool's 600 s)")
    ap.add_argument("--worker-cap-s", type=float, default=240, help="time limit of one worker process")
    ap.add_argument("--keep-outputs", action="store_true", help="keep the packed LIF spikes in out/lif")
    ap.add_argument("--json", type=Path, help="where to write the results (default bench/gpu/peers.json; "
                    "--quick: bench/gpu/out/peers_quick.json); worker logs go beside it as *.workers.log")
    args = ap.parse_args()
    args.impls = [i.strip() for i in args.impls.split(",") if i.strip()]
    unknown = set(args.impls) - set(LIF_IMPLS + NET_IMPLS)
    if unknown:
        ap.error(f"unknown implementations: {', '.join(sorted(unknown))}")
    todo = [w.strip() for w in args.only.split(",") if w.strip()]
    if set(todo) - {"lif", "mlp", "conv"}:
        ap.error("--only takes lif, mlp, conv")
    OUT.mkdir(parents=True, exist_ok=True)
    if args.prepare:
        return prepare(args)
    if args.dry_run:
        return dry_run(args)
    if args.self_test:
        return self_test(args)

    started = datetime.datetime.now(datetime.timezone.utc)
    runner = Runner(args, args.budget_s)
    commands: list[str] = []
    log("probing the device ...")
    probe = runner.run("probe", {"kind": "probe"}, cap=120)
    if not probe.get("cuda"):
        log(f"no CUDA device: nothing to measure ({probe.get('why') or probe.get('not_run')})")
        return 2
    log(f"device: {probe['name']} ({probe['sm']}, {probe['multiprocessors']} SMs, L2 "
        f"{(probe.get('l2_bytes') or 0) / 2**20:.0f} MiB), driver {probe.get('driver')}, "
        f"torch {probe.get('version_torch')} (CUDA {probe.get('torch_cuda')})")
    res = {"date_utc": started.isoformat(timespec="seconds"), "mode": "quick" if args.quick else "full",
           "command": shlex.join(["python3", *[rel(a) if a.startswith(str(ROOT)) else a for a in sys.argv]]),
           "host": {"platform": platform.platform(), "cpus": os.cpu_count()},
           "device": probe, "project": project_info(), "settings": {
               "tf32": args.tf32, "cudnn_benchmark": True, "grad": "disabled (torch.set_grad_enabled(False))",
               "timing": "torch.cuda.synchronize around each timed call or pass, host clock, warm-up, median"},
           "commands": commands}
    path = args.json or (OUT / "peers_quick.json" if args.quick else HERE / "peers.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    log_path = path.with_name(path.stem + ".workers.log")

    def save():  # after every step: a run cut short keeps what it measured
        res["elapsed_s"] = round((datetime.datetime.now(datetime.timezone.utc) - started).total_seconds(), 1)
        path.write_text(json.dumps(res, indent=1, default=str) + "\n")
        runner.combined_log(log_path)

    res["wheels"] = install_wheels(args, commands)
    configs = lif_configs(args.quick)
    res["snnc"] = snnc_artifacts(args, probe, configs, commands) if "snnc" in args.impls else {"not_run": "--impls"}
    if res["snnc"].get("not_run"):
        log(f"snnc: not run: {res['snnc']['not_run']}")
    else:
        log(f"snnc: {res['snnc']['source']}")
    log("copy yardstick ...")
    copy_spec = {"kind": "copy", "bytes": 1 << 30, "repeats": 20}
    res["copy_yardstick"] = runner.run("copy", copy_spec, cap=120)
    copy_gbps = res["copy_yardstick"].get("GB_per_s")
    save()
    ddir = data_dir(args)
    nets = [n for n in ("mlp", "conv") if n in todo]
    bases = {}
    if "lif" in todo:
        bases["lif"] = lif_spec(args, probe)
    if nets and not all((ddir / f).exists() for f in DATA_FILES):
        res["nets_not_run"] = f"Fashion-MNIST test files not found in {ddir} (--data-dir)"
        log(res["nets_not_run"])
        nets = []
    if nets:
        labels = test_labels(ddir)
        weights = {}
        if "conv" in nets:
            man = Path(args.prebuilt_dir) / "manifest.json"
            expected = (json.loads(man.read_text()).get("conv_weights") or {}) if man.exists() else {}
            if not expected.get("default_sha256") and (CPU_BENCH / "peers.json").exists():
                cpu = json.loads((CPU_BENCH / "peers.json").read_text()).get("conv", {})
                if str(cpu.get("weights", "")).startswith("default"):
                    expected["default_sha256"] = cpu.get("weights_sha256")
            weights = conv_weights(args.conv_weights, Path(args.prebuilt_dir), expected)
        for net in nets:
            bases[net] = net_spec(args, net, weights, ddir)
    results: dict[str, dict] = {w: {} for w in bases}

    def sections(final: bool):
        if "lif" in bases:
            res["lif"] = lif_rows(args, bases["lif"], results["lif"], copy_gbps, final)
        for net in nets:
            res[net] = net_rows(results[net], bases[net], labels)
            res[net]["weights"] = ({"path": rel(MLP_WEIGHTS), "sha256": sha256(MLP_WEIGHTS)} if net == "mlp"
                                   else {**weights, "path": rel(weights["path"])})
        save()

    for phase in PHASES:
        for impl in (i for i in phase if i in LIF_IMPLS and i in args.impls):
            if "lif" in bases:
                results["lif"][impl] = run_lif(args, runner, impl, bases["lif"], res["snnc"], res["wheels"])
        for net in nets:
            for impl in (i for i in phase if i in NET_IMPLS + HOST_IMPLS):
                if (impl if impl not in HOST_IMPLS else "snnc") in args.impls:
                    results[net][impl] = run_net(args, runner, impl, bases[net], res["snnc"], res["wheels"])
        sections(final=False)
    sections(final=True)
    log("copy yardstick again ...")
    res["copy_yardstick_end"] = runner.run("copy_end", copy_spec, cap=120)
    res["goals"] = goals(res)
    versions = {k[len("version_"):]: v for k, v in probe.items() if k.startswith("version_")}
    for w in (res.get("lif", {}).get("workers", {}), *(res.get(n, {}).get("impls", {}) for n in ("mlp", "conv"))):
        for impl, r in w.items():
            for k, v in (r.get("peer") or {}).items():
                if k in ("spikingjelly", "cupy"):
                    versions[f"{k} ({impl})"] = v
    res["versions"] = versions
    save()
    print()
    if "lif" in res:
        print("\n".join(table_lif(res["lif"])))
        print()
    if "mlp" in res or "conv" in res:
        print("\n".join(table_nets(res)))
        print()
    print("Goals:")
    for g in res["goals"]:
        print(f"  {g['status']:4}  {g['goal']}: {g['detail']}")
    nr = not_run_lines(res)
    if nr:
        print("Not run:")
        print("\n".join(nr))
    print(f"\n{probe['name']}, driver {probe.get('driver')}, torch {versions.get('torch')} "
          f"(CUDA {probe.get('torch_cuda')}); copy {copy_gbps} GB/s at the start, "
          f"{res['copy_yardstick_end'].get('GB_per_s')} at the end; {res['elapsed_s']} s")
    print(f"wrote {rel(path)} and {rel(log_path)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
