#!/usr/bin/env python3
"""Checks that PNG files (as rsvg-convert renders --plot's SVG) show a figure, with the standard
library alone: each at least MIN_W x MIN_H pixels, white at its corners, and with a share of dark
pixels (axes, text, marks) between 0.2% and 60%; --colour also wants some coloured pixels (bars,
traces, curves). Prints one line per file; exit status 1 at the first that fails.

check_png.py [--colour] FILE.png ..."""
import struct
import sys
import zlib

MIN_W, MIN_H = 600, 400


def pixels(path):
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    pos, idat, w = 8, b"", 0
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", body)
            if depth != 8 or ctype not in (2, 6) or interlace:
                raise ValueError(f"PNG of depth {depth}, colour type {ctype}: not read here")
            bpp = 3 if ctype == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw, stride = zlib.decompress(idat), w * bpp
    rows, prev = [], bytearray(stride)
    for y in range(h):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(line)
        prev = line
    # composited on white, as a viewer shows it
    def px(x, y):
        r = rows[y]
        if bpp == 3:
            return tuple(r[x * 3:x * 3 + 3])
        al = r[x * 4 + 3]
        return tuple((r[x * 4 + k] * al + 255 * (255 - al)) // 255 for k in range(3))
    return w, h, px


ok = True
want_colour = "--colour" in sys.argv
for path in [a for a in sys.argv[1:] if a != "--colour"]:
    w, h, px = pixels(path)
    dark = colour = 0
    for y in range(0, h, 2):
        for x in range(0, w, 2):
            r, g, b = px(x, y)
            dark += max(r, g, b) < 128
            colour += max(r, g, b) - min(r, g, b) > 80
    total = ((h + 1) // 2) * ((w + 1) // 2)
    corners = [px(0, 0), px(w - 1, 0), px(0, h - 1), px(w - 1, h - 1)]
    problems = []
    if w < MIN_W or h < MIN_H:
        problems.append(f"{w}x{h} is under {MIN_W}x{MIN_H}")
    if any(min(c) < 250 for c in corners):
        problems.append("the background is not white")
    if not 0.002 <= dark / total <= 0.6:
        problems.append(f"{100 * dark / total:.2f}% dark pixels")
    if want_colour and colour / total < 0.001:
        problems.append("no colour")
    print(f"{path.rsplit('/', 1)[-1]}: {w}x{h}" + (": " + "; ".join(problems) if problems else " ok"))
    ok = ok and not problems
sys.exit(0 if ok else 1)
