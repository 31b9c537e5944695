#!/usr/bin/env python3
"""Print the description (snnk_meta) a model.so or its object (--emit=obj) carries.

model_meta.py FILE [--images]
With --images, also check every cuda_image record against snnk_cuda_images: a cubin is an ELF for
NVIDIA GPUs (e_machine 190) built for the record's sm_NN, PTX is text with one NUL, at its end,
and a `.target` line; prints "image FORMAT ARCH: ok" for each, and the size of the images."""
import re
import struct
import sys


def symbols(data):
    """name -> (file offset, size) of the defined symbols of an ELF64 little-endian file"""
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    secs = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    out = {}
    for sec in secs:
        if sec[1] != 2:  # SHT_SYMTAB
            continue
        strtab = secs[sec[6]]
        for off in range(sec[4], sec[4] + sec[5], 24):
            name_off, info, other, shndx, value, size = struct.unpack_from("<IBBHQQ", data, off)
            if shndx == 0 or shndx >= len(secs):
                continue
            s = data[strtab[4] + name_off:data.index(b"\0", strtab[4] + name_off)].decode()
            target = secs[shndx]
            out[s] = (target[4] + value - target[3], size)
    return out


data = open(sys.argv[1], "rb").read()
syms = symbols(data)
off, _ = syms["snnk_meta"]
meta = data[off:data.index(b"\0", off)].decode()
sys.stdout.write(meta)
if "--images" in sys.argv[2:]:
    if "snnk_cuda_images" not in syms or "snnk_cuda_images_size" not in syms:
        sys.exit("no snnk_cuda_images / snnk_cuda_images_size")
    base, _ = syms["snnk_cuda_images"]
    total, = struct.unpack_from("<Q", data, syms["snnk_cuda_images_size"][0])
    print("images: %d bytes" % total)
    for fmt, arch, ioff, isize in re.findall(r"^cuda_image (\w+) (\w+) (\d+) (\d+)$", meta, re.M):
        ioff, isize = int(ioff), int(isize)
        if ioff + isize > total:
            sys.exit("image %s %s: [%d, +%d) beyond %d bytes" % (fmt, arch, ioff, isize, total))
        img = data[base + ioff:base + ioff + isize]
        if fmt == "cubin":
            flags, = struct.unpack_from("<I", img, 48)
            ok = (img[:4] == b"\x7fELF" and struct.unpack_from("<H", img, 18)[0] == 190
                  and (flags >> 8) & 0xFF == int(re.sub(r"\D", "", arch)))
        else:
            ok = (img.index(b"\0") == isize - 1
                  and re.search(rb"^\.target sm_\d+", img, re.M) is not None)
        print("image %s %s: %s" % (fmt, arch, "ok" if ok else "BAD"))
