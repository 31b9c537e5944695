#!/usr/bin/env python3
"""Run a model.so through its C ABI (runtime/snn.h) with ctypes, as a program using it would.

run_so.py MODEL.so DEVICE IN.npy OUT.npy
One input, one output, f32 .npy files ([N, ...] sample-major); one batch of N samples from sample
0. Prints the model's devices, the session's device and its spike counts (after that batch, after
the same samples again in two batches, after a reset, after one more run); errors are
snn_last_error(). The output file holds the last run's outputs."""
import ctypes
import struct
import sys

so, device, inp, out = sys.argv[1:5]
lib = ctypes.CDLL(so)
for name, res in (("snn_model_get", ctypes.c_void_p), ("snn_model_devices", ctypes.c_char_p),
                  ("snn_last_error", ctypes.c_char_p), ("snn_session_device", ctypes.c_char_p)):
    getattr(lib, name).restype = res
lib.snn_model_devices.argtypes = [ctypes.c_void_p]
lib.snn_session_device.argtypes = [ctypes.c_void_p]
lib.snn_session_create.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_int,
                                   ctypes.POINTER(ctypes.c_void_p)]
lib.snn_run.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int,
                        ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_void_p)]
lib.snn_session_destroy.argtypes = [ctypes.c_void_p]


class Info(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("dtype", ctypes.c_int), ("per_step", ctypes.c_int),
                ("rank", ctypes.c_int), ("dims", ctypes.c_int64 * 8), ("numel", ctypes.c_int64)]


def check(status):
    if status != 0:
        sys.exit("run_so.py: %s" % lib.snn_last_error().decode())


raw = open(inp, "rb").read()
hlen, = struct.unpack_from("<H", raw, 8)
header = raw[10:10 + hlen].decode()
n = int(header.split("'shape': (")[1].split(",")[0].split(")")[0])
xs = (ctypes.c_float * ((len(raw) - 10 - hlen) // 4)).from_buffer_copy(raw[10 + hlen:])

m = lib.snn_model_get()
if not m:
    sys.exit("run_so.py: %s" % lib.snn_last_error().decode())
print("model devices:", lib.snn_model_devices(m).decode())
info = Info()
check(lib.snn_model_output(ctypes.c_void_p(m), 0, ctypes.byref(info)))
ys = (ctypes.c_float * (n * info.numel))()
s = ctypes.c_void_p()
check(lib.snn_session_create(m, device.encode(), n, 1, ctypes.byref(s)))
print("session device:", lib.snn_session_device(s).decode())
ins = (ctypes.c_void_p * 1)(ctypes.cast(xs, ctypes.c_void_p))
outs = (ctypes.c_void_p * 1)(ctypes.cast(ys, ctypes.c_void_p))
check(lib.snn_run(s, 0, n, ins, outs))
# spike counts: after the run; after the same samples again in two batches (they add up, whichever
# way the samples are split); after a reset and one more run (only that run)
nl = lib.snn_model_num_layers(ctypes.c_void_p(m))
counts = (ctypes.c_double * max(nl, 1))()
lib.snn_session_spike_counts.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]


def show(what):
    check(lib.snn_session_spike_counts(s, counts, nl))
    print("spike counts %s:" % what, " ".join("%.0f" % counts[i] for i in range(nl)))


show("after one run")
half = n // 2
if half:
    check(lib.snn_run(s, 0, half, ins, outs))
    rest_in = (ctypes.c_void_p * 1)(ctypes.addressof(xs) + 4 * half * (len(xs) // n))
    rest_out = (ctypes.c_void_p * 1)(ctypes.addressof(ys) + 4 * half * info.numel)
    check(lib.snn_run(s, half, n - half, rest_in, rest_out))
show("after the samples again in two batches")
check(lib.snn_session_reset_stats(s))
show("after a reset")
check(lib.snn_run(s, 0, n, ins, outs))
show("after one more run")
lib.snn_session_destroy(s)
lib.snn_model_timesteps.argtypes = [ctypes.c_void_p]
dims = [n] + ([lib.snn_model_timesteps(m)] if info.per_step else [])
dims += [info.dims[i] for i in range(info.rank)]
shape = "(%s,)" % ", ".join(str(d) for d in dims)
head = "{'descr': '<f4', 'fortran_order': False, 'shape': %s, }" % shape
head += " " * ((64 - (10 + len(head) + 1) % 64) % 64) + "\n"
with open(out, "wb") as f:
    f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(head)) + head.encode() + bytes(ys))
