#!/usr/bin/env python3
"""gen_seeds.py: writes the committed seed corpora in tests/fuzz/seeds/<target>/, a few small valid and
invalid inputs per parser (each under 4 KiB); fuzz_snn's seeds are copies of the examples and lit tests.
fuzz_meta's seeds are not made here: they are the descriptions of model.so files snnc built (read with
tests/lit/cuda/Inputs/model_meta.py, cuda_image records pointed into the target's 4 KiB blob) and an
input the fuzzer found (overflow-dims.txt), committed as they are.
Standard library only, deterministic output, so rerunning it reproduces the committed files byte for
byte. It must not touch anything outside seeds/."""
import glob
import gzip
import io
import json
import os
import struct
import zipfile
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
SEEDS = os.path.join(HERE, "seeds")


def put(target, name, data):
    d = os.path.join(SEEDS, target)
    os.makedirs(d, exist_ok=True)
    assert len(data) < 4096, (target, name, len(data))
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# ---- safetensors ----

def st(header, data=b"", raw=None):
    h = raw if raw is not None else json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + data


def st_entries(specs):
    """specs: [(name, dtype, shape, bytes)] laid out back to back"""
    hdr, data = {}, b""
    for name, dt, shape, b in specs:
        hdr[name] = {"dtype": dt, "shape": shape, "data_offsets": [len(data), len(data) + len(b)]}
        data += b
    return hdr, data


def gen_safetensors():
    t = "fuzz_safetensors"
    hdr, data = st_entries([("fc1.bias", "F32", [3], struct.pack("<3f", 0.5, -1, 2)),
                            ("fc1.weight", "F32", [3, 2], struct.pack("<6f", *range(6)))])
    put(t, "valid_f32", st(hdr, data))
    hdr, data = st_entries([
        ("a", "F16", [2], struct.pack("<2H", 0x3C00, 0x7C00)),
        ("b", "BF16", [1], struct.pack("<H", 0x3F80)),
        ("c", "F64", [], struct.pack("<d", -2.5)),
        ("d", "U8", [2, 1], b"\x00\xff"),
        ("e", "I8", [1], b"\x80"),
        ("f", "I32", [1], struct.pack("<i", -7)),
        ("g", "I64", [1], struct.pack("<q", 1 << 40)),
        ("h", "BOOL", [3], b"\x00\x01\x02"),
        ("z", "F32", [0, 4], b""),
    ])
    put(t, "valid_all_dtypes", st(hdr, data))
    hdr, data = st_entries([("\u00e9l\u00e8ve/\U0001F600", "F32", [1], struct.pack("<f", 1))])
    hdr = {"__metadata__": {"format": "pt", "note": "tab\there \"quoted\""}, **hdr}
    put(t, "valid_metadata_unicode", st(hdr, data))
    put(t, "valid_escapes", st(None, struct.pack("<f", 3),
                               raw=b' {"a\\u00e9\\ud83d\\ude00\\n\\/" : {"dtype" : "F32",'
                                   b' "shape" : [ 1 ], "data_offsets" : [0, 4]}}'))
    put(t, "valid_empty", st({}))
    put(t, "invalid_truncated_length", b"\x10\x00\x00")
    put(t, "invalid_header_beyond_file", struct.pack("<Q", 1000) + b"{}")
    put(t, "invalid_bad_json", st(None, raw=b'{"a":{"dtype":"F32",,}}'))
    put(t, "invalid_float", st(None, b"\0" * 4,
                               raw=b'{"a":{"dtype":"F32","shape":[1.0],"data_offsets":[0,4]}}'))
    put(t, "invalid_true", st(None, raw=b'{"a":{"dtype":true}}'))
    put(t, "invalid_missing_offsets", st({"a": {"dtype": "F32", "shape": [1]}}, b"\0" * 4))
    put(t, "invalid_unknown_dtype",
        st({"a": {"dtype": "Q7", "shape": [1], "data_offsets": [0, 1]}}, b"\0"))
    put(t, "invalid_out_of_range",
        st({"w": {"dtype": "F32", "shape": [1000], "data_offsets": [0, 4000]}}, b"\0" * 300))
    put(t, "invalid_overlap",
        st({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
            "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}, b"\0" * 12))
    put(t, "invalid_size_mismatch",
        st({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, b"\0" * 8))
    put(t, "invalid_rank9",
        st({"a": {"dtype": "U8", "shape": [1] * 9, "data_offsets": [0, 1]}}, b"\0"))
    put(t, "invalid_negative_dim",
        st({"a": {"dtype": "U8", "shape": [-1, -1], "data_offsets": [0, 1]}}, b"\0"))
    put(t, "invalid_huge_dims",
        st({"a": {"dtype": "F32", "shape": [1 << 32, 1 << 32], "data_offsets": [0, 4]}}, b"\0" * 4))
    put(t, "invalid_duplicate", st(None, b"\0" * 2,
                                   raw=b'{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},'
                                       b'"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}'))
    put(t, "invalid_surrogate", st(None, raw=b'{"\\ud800":{}}'))


# ---- npy ----

def npy(descr, shape, data, version=(1, 0), fortran=False, dict_text=None):
    h = dict_text if dict_text is not None else "{'descr': %r, 'fortran_order': %s, 'shape': %r, }" % (
        descr, fortran, tuple(shape))
    h = h.encode("latin1")
    pre = 10 if version[0] == 1 else 12
    h += b" " * (63 - (pre + len(h)) % 64) + b"\n"
    size = struct.pack("<H", len(h)) if version[0] == 1 else struct.pack("<I", len(h))
    return b"\x93NUMPY" + bytes(version) + size + h + data


def gen_npy():
    t = "fuzz_npy"
    put(t, "valid_f4_2x3", npy("<f4", (2, 3), struct.pack("<6f", *range(6))))
    put(t, "valid_f8_scalar", npy("<f8", (), struct.pack("<d", 3.25)))
    put(t, "valid_f2", npy("<f2", (2,), struct.pack("<2H", 0x3C00, 0xFC00)))
    put(t, "valid_u1", npy("|u1", (4,), b"\x00\x01\x80\xff"))
    put(t, "valid_i1", npy("|i1", (2, 1), b"\x80\x7f"))
    put(t, "valid_b1", npy("|b1", (3,), b"\x00\x01\x01"))
    put(t, "valid_i4", npy("<i4", (1, 1, 2), struct.pack("<2i", -1, 1 << 30)))
    put(t, "valid_i8", npy("<i8", (1,), struct.pack("<q", -(1 << 62))))
    put(t, "valid_v2", npy("<f4", (1,), struct.pack("<f", 1), version=(2, 0)))
    put(t, "valid_v3", npy("|u1", (1,), b"\x07", version=(3, 0)))
    put(t, "valid_py2_long", npy(None, None, struct.pack("<2f", 1, 2),
                                 dict_text="{'descr': '<f4', 'fortran_order': False, 'shape': (2L,), }"))
    put(t, "valid_empty", npy("<f4", (0, 5), b""))
    put(t, "invalid_magic", b"\x93NUMPX\x01\x00\x10\x00{}")
    put(t, "invalid_version", npy("<f4", (1,), b"\0" * 4, version=(4, 0)))
    put(t, "invalid_fortran", npy("<f4", (2, 2), b"\0" * 16, fortran=True))
    put(t, "invalid_big_endian", npy(">f4", (1,), b"\0" * 4))
    put(t, "invalid_complex", npy("<c8", (1,), b"\0" * 8))
    put(t, "invalid_short_data", npy("<f4", (2, 3), b"\0" * 20))
    put(t, "invalid_header", npy(None, None, b"", dict_text="{'descr': '<f4' 'shape': (1,)}"))
    put(t, "invalid_structured",
        npy(None, None, b"\0" * 4,
            dict_text="{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }"))
    put(t, "invalid_huge_shape", npy("|u1", (1 << 40, 1 << 40), b"\0"))


# ---- idx ----

def idx(dims, data, typ=0x08):
    return bytes([0, 0, typ, len(dims)]) + b"".join(struct.pack(">I", d) for d in dims) + data


def gz(data):
    # mtime 0 keeps the output deterministic
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0) as f:
        f.write(data)
    return buf.getvalue()


def gen_idx():
    t = "fuzz_idx"
    img = idx((2, 4, 4), bytes(range(0, 256, 8)))
    lbl = idx((5,), bytes([9, 0, 0, 3, 0]))
    put(t, "valid_idx3", img)
    put(t, "valid_idx1", lbl)
    put(t, "valid_idx3_gz", gz(img))
    put(t, "valid_two_members_gz", gz(lbl[:6]) + gz(lbl[6:]))
    put(t, "valid_empty", idx((0, 28, 28), b""))
    put(t, "invalid_float_type", idx((2,), struct.pack(">2f", 1, 2), typ=0x0D))
    put(t, "invalid_magic", b"\x01\x02\x08\x01\x00\x00\x00\x01\x00")
    put(t, "invalid_truncated", img[:-3])
    put(t, "invalid_trailing", lbl + b"\x00")
    put(t, "invalid_huge_dims", idx((0xFFFFFFFF, 0xFFFFFFFF), b"\0" * 8))
    put(t, "invalid_rank9", idx((1,) * 9, b"\0"))
    bad = bytearray(gz(img))
    bad[-6] ^= 0xFF
    put(t, "invalid_gz_crc", bytes(bad))
    put(t, "invalid_gz_truncated", gz(img)[:-12])


# ---- npz ----

def npz(members, compress=False, force_zip64=True):
    buf = io.BytesIO()
    method = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    with zipfile.ZipFile(buf, "w", compression=method) as z:
        for name, data in members:
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = method
            # numpy.savez opens members with force_zip64=True: zip64 extras in the local headers
            with z.open(info, "w", force_zip64=force_zip64) as f:
                f.write(data)
    return buf.getvalue()


def gen_npz():
    t = "fuzz_npz"
    a = npy("<f4", (2, 3), struct.pack("<6f", *range(6)))
    b = npy("|u1", (4,), b"\x00\x01\x80\xff")
    c = npy("<i8", (), struct.pack("<q", 5))
    put(t, "valid_stored", npz([("w.npy", a), ("lbl.npy", b)]))
    put(t, "valid_deflate", npz([("w.npy", a), ("s.npy", c)], compress=True))
    put(t, "valid_plain_zip", npz([("x.npy", b)], force_zip64=False))
    put(t, "valid_empty", npz([]))
    bad = bytearray(npz([("w.npy", a)]))
    bad[bad.index(b"\x93NUMPY") + 140] ^= 1  # inside the array data
    put(t, "invalid_crc", bytes(bad))
    put(t, "invalid_member_name", npz([("w.txt", b"hello")]))
    put(t, "invalid_member_npy", npz([("w.npy", a[:-4])]))
    put(t, "invalid_duplicate", npz([("w.npy", a), ("w.npy", a)]))
    put(t, "invalid_truncated", npz([("w.npy", a)])[:-30])
    put(t, "invalid_not_zip", b"PK\x05\x06" + b"\0" * 10)


# ---- the .snn language: a snapshot of small examples and lit tests ----

def gen_snn():
    root = os.path.dirname(os.path.dirname(HERE))
    picks = [("example_", sorted(glob.glob(os.path.join(root, "examples", "*.snn")))),
             ("lang_", sorted(glob.glob(os.path.join(root, "tests", "lit", "lang", "*.snn")))[:10]),
             ("error_", sorted(glob.glob(os.path.join(root, "tests", "lit", "errors", "*.snn")))[:10])]
    for prefix, paths in picks:
        for p in paths:
            with open(p, "rb") as f:
                data = f.read()
            if len(data) < 4096:
                put("fuzz_snn", prefix + os.path.basename(p), data)


# ---- NIR graphs as nir_tree_parse text (first byte: the import options, fuzz_nir.c) ----

NIR_HEAD = "node/type s - NIRGraph\nversion s - 1.0.8\n"
NIR_MLP = ("node/nodes/x/type s - Input\nnode/nodes/x/shape i 1 4\n"
           "node/nodes/fc/type s - Affine\nnode/nodes/fc/weight f 3x4 1 0 0 0 0 1 0 0 0 0 1 0\n"
           "node/nodes/fc/bias f 3 0.5 0 -0.5\n"
           "node/nodes/lif/type s - LIF\nnode/nodes/lif/tau f 3 1e-3 1e-3 1e-3\n"
           "node/nodes/lif/r f 3 10 10 10\nnode/nodes/lif/v_leak f 3 0 0 0\n"
           "node/nodes/lif/v_threshold f 3 1 1 1\nnode/nodes/lif/v_reset f 3 0 0 0\n"
           "node/nodes/out/type s - Output\nnode/edges s 3x2 x fc fc lif lif out\n")
NIR_REC = ("node/nodes/in/type s - Input\nnode/nodes/in/shape i 1 3\n"
           "node/nodes/0/type s - Affine\nnode/nodes/0/weight f 3x3 1 0 0 0 1 0 0 0 1\n"
           "node/nodes/0/bias f 3 0 0 0\nnode/nodes/r.lif/type s - CubaLIF\n"
           "node/nodes/r.lif/tau_syn f - 5e-4\nnode/nodes/r.lif/tau_mem f - 1e-3\n"
           "node/nodes/r.lif/r f - 10\nnode/nodes/r.lif/v_leak f - 0\nnode/nodes/r.lif/w_in f - 5\n"
           "node/nodes/r.lif/v_threshold f - 1\n"
           "node/nodes/r.w/type s - Linear\nnode/nodes/r.w/weight f 3x3 0 1 0 0 0 1 1 0 0\n"
           "node/nodes/s/type s - NIRGraph\nnode/nodes/s/nodes/i/type s - Input\n"
           "node/nodes/s/nodes/li/type s - LI\nnode/nodes/s/nodes/li/tau f - 2e-4\n"
           "node/nodes/s/nodes/li/r f - 1\nnode/nodes/s/nodes/li/v_leak f - 0\n"
           "node/nodes/s/nodes/o/type s - Output\nnode/nodes/s/edges s 2x2 i li li o\n"
           "node/nodes/out/type s - Output\n"
           "node/edges s 6x2 in 0 0 r.lif r.lif r.w r.w r.lif r.lif s s out\n")
NIR_CONV = ("node/nodes/x/type s - Input\nnode/nodes/x/shape i 3 2 4 4\n"
            "node/nodes/c/type s - Conv2d\nnode/nodes/c/weight f 2x1x3x3 "
            "1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1\nnode/nodes/c/bias f 2 0 1\n"
            "node/nodes/c/groups i - 2\nnode/nodes/c/padding s - same\n"
            "node/nodes/p/type s - AvgPool2d\nnode/nodes/p/kernel_size i 2 2 2\n"
            "node/nodes/q/type s - SumPool2d\nnode/nodes/q/kernel_size i - 2\n"
            "node/nodes/q/stride i - 1\nnode/nodes/f/type s - Flatten\n"
            "node/nodes/k/type s - Scale\nnode/nodes/k/scale f 2 3 3\n"
            "node/nodes/d/type s - Delay\nnode/nodes/d/delay f - 3e-4\n"
            "node/nodes/th/type s - Threshold\nnode/nodes/th/threshold f - 0.5\n"
            "node/nodes/i/type s - I\nnode/nodes/i/r f - 2\n"
            "node/nodes/if/type s - IF\nnode/nodes/if/r f - 10000\n"
            "node/nodes/if/v_threshold f - 1\nnode/nodes/cl/type s - CubaLI\n"
            "node/nodes/cl/tau_syn f - 5e-4\nnode/nodes/cl/tau_mem f - 1e-3\n"
            "node/nodes/cl/r f - 10\nnode/nodes/cl/v_leak f - 0\nnode/nodes/cl/w_in f - 5\n"
            "node/nodes/o1/type s - Output\nnode/nodes/o2/type s - Output\n"
            "node/nodes/o3/type s - Output\nnode/nodes/o4/type s - Output\n"
            "node/edges s 14x2 x c c p p q q f f k k d d th th o1 f i i o2 f if if o3 f cl cl o4\n")


def gen_nir():
    t = "fuzz_nir"
    for opt in (0, 0x07, 0x1a):
        put(t, f"mlp_{opt:02x}", bytes([opt]) + (NIR_HEAD + NIR_MLP).encode())
    put(t, "recurrent", b"\x05" + (NIR_HEAD + NIR_REC).encode())
    put(t, "conv_all_nodes", b"\x00" + (NIR_HEAD + NIR_CONV).encode())
    put(t, "invalid_shape", b"\x00" + (NIR_HEAD + NIR_MLP.replace("3x4 1 0 0 0", "3x5 1 0 0 0 0"))
        .encode())
    put(t, "invalid_edge", b"\x00" + (NIR_HEAD + NIR_MLP.replace("lif out\n", "lif nope\n"))
        .encode())


# ---- the file readers: a format byte (fuzz_read.c), then a seed of that format's parser ----

def gen_read():
    for fmt, target in enumerate(("fuzz_npy", "fuzz_safetensors", "fuzz_idx", "fuzz_npz")):
        d = os.path.join(SEEDS, target)
        for name in sorted(os.listdir(d))[:8]:
            with open(os.path.join(d, name), "rb") as f:
                blob = f.read()
            for flags in (0, 0x04 | 0x08, 0x10):  # no limit; rows 3; 64 bytes
                if len(blob) + 1 < 4096:
                    put("fuzz_read", "%s_%s_%02x" % (target[5:], name, flags), bytes([fmt | flags]) + blob)


if __name__ == "__main__":
    import warnings
    warnings.simplefilter("ignore")  # zipfile warns about the deliberate duplicate member
    gen_safetensors()
    gen_npy()
    gen_idx()
    gen_npz()
    gen_snn()
    gen_nir()
    gen_read()
    for target in sorted(os.listdir(SEEDS)):
        print(target, len(os.listdir(os.path.join(SEEDS, target))), "seeds")
