#!/usr/bin/env python3
"""Generate the small PCB-defect demo dataset in dataset/ beside this file.

Synthetic 64x64 RGB images of a circuit board (green solder mask, copper traces,
pads) with three kinds of defects, and YOLO label files (`class cx cy w h`,
normalised). Uses only the Python standard library (zlib + struct for PNG), and a
fixed seed, so the output is the same on every run:

    python3 examples/pcb/generate.py

Classes: 0 short (solder bridge between two pads), 1 open (a break in a trace),
2 scratch (a bright diagonal line). A few boards have no defect: their label files
are empty, which Ultralytics treats as background images.
"""

import os
import random
import shutil
import struct
import zlib

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "dataset")
SIZE = 64
SPLITS = {"train": 36, "val": 12}
BACKGROUND_EVERY = 9  # every 9th board has no defect
NAMES = ["short", "open", "scratch"]

MASK = (22, 92, 48)
MASK_DARK = (16, 70, 36)
COPPER = (196, 140, 60)
PAD = (214, 214, 200)
SOLDER = (236, 236, 228)
SCRATCH = (170, 200, 170)


def png(pixels):
    """Encode rows of (r, g, b) tuples as an 8-bit RGB PNG."""
    raw = b"".join(b"\x00" + bytes(c for px in row for c in px) for row in pixels)

    def chunk(kind, data):
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body) & 0xFFFFFFFF)

    height, width = len(pixels), len(pixels[0])
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(raw, 9))
        + chunk(b"IEND", b"")
    )


def rect(img, x0, y0, x1, y1, color):
    for y in range(max(0, y0), min(SIZE, y1)):
        for x in range(max(0, x0), min(SIZE, x1)):
            img[y][x] = color


def board(rng):
    """A board with horizontal traces ending in pads; returns the image and traces."""
    img = [[MASK if (x // 8 + y // 8) % 2 else MASK_DARK for x in range(SIZE)] for y in range(SIZE)]
    traces = []
    y = rng.randrange(6, 12)
    while y < SIZE - 8:
        x0, x1 = rng.randrange(2, 14), rng.randrange(40, 60)
        rect(img, x0, y, x1, y + 2, COPPER)
        rect(img, x0 - 2, y - 2, x0 + 3, y + 4, PAD)
        rect(img, x1 - 3, y - 2, x1 + 2, y + 4, PAD)
        traces.append((x0, x1, y))
        y += rng.randrange(9, 14)
    return img, traces


def box(x0, y0, x1, y1):
    """Pixel box → normalised (cx, cy, w, h), clipped to the image."""
    x0, y0, x1, y1 = max(0, x0), max(0, y0), min(SIZE, x1), min(SIZE, y1)
    return ((x0 + x1) / 2 / SIZE, (y0 + y1) / 2 / SIZE, (x1 - x0) / SIZE, (y1 - y0) / SIZE)


def add_short(img, rng, traces):
    """Solder bridging two neighbouring traces' pads."""
    i = rng.randrange(len(traces) - 1)
    (_, xa, ya), (_, xb, yb) = traces[i], traces[i + 1]
    x = min(xa, xb) - 2
    rect(img, x, ya, x + 3, yb + 2, SOLDER)
    return box(x - 1, ya - 1, x + 4, yb + 3)


def add_open(img, rng, traces):
    """A gap cut into a trace."""
    x0, x1, y = rng.choice(traces)
    x = rng.randrange(x0 + 6, x1 - 8)
    rect(img, x, y, x + 3, y + 2, MASK)
    return box(x - 1, y - 2, x + 4, y + 4)


def add_scratch(img, rng, _traces):
    """A bright diagonal line."""
    length = rng.randrange(10, 20)
    x0, y0 = rng.randrange(2, SIZE - length - 2), rng.randrange(2, SIZE - length - 2)
    for i in range(length):
        rect(img, x0 + i, y0 + i, x0 + i + 1, y0 + i + 1, SCRATCH)
    return box(x0 - 1, y0 - 1, x0 + length + 1, y0 + length + 1)


DEFECTS = [add_short, add_open, add_scratch]


def main():
    rng = random.Random(20240611)
    for sub in ("images", "labels"):
        shutil.rmtree(os.path.join(OUT, sub), ignore_errors=True)
    n = 0
    for split, count in SPLITS.items():
        os.makedirs(os.path.join(OUT, "images", split))
        os.makedirs(os.path.join(OUT, "labels", split))
        for i in range(count):
            n += 1
            img, traces = board(rng)
            lines = []
            if n % BACKGROUND_EVERY:
                for _ in range(rng.randrange(1, 3)):
                    cls = rng.randrange(len(DEFECTS))
                    cx, cy, w, h = DEFECTS[cls](img, rng, traces)
                    lines.append(f"{cls} {cx:.6f} {cy:.6f} {w:.6f} {h:.6f}")
            name = f"board_{split}_{i:03d}"
            with open(os.path.join(OUT, "images", split, name + ".png"), "wb") as f:
                f.write(png(img))
            with open(os.path.join(OUT, "labels", split, name + ".txt"), "w") as f:
                f.write("".join(line + "\n" for line in lines))


if __name__ == "__main__":
    main()
