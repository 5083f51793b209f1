#!/usr/bin/python3
"""make_ref.py - reference boxes from torchvision's RandomResizedCrop.get_params
for tests/unit/test_rrc.c (a two-sample KS test against echofs's rrc_box).

Writes ref_<W>x<H>.txt: one "w h" line per box drawn from a W x H image with
torchvision's default scale (0.08, 1) and ratio (3/4, 4/3), seed 30.
usage: /usr/bin/python3 tests/data/rrc/make_ref.py [N=10000]  (needs
python3-torchvision)"""
import os
import sys

import torch
from PIL import Image
from torchvision.transforms import RandomResizedCrop

SIZES = [(341, 256), (900, 120)]


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10000
    here = os.path.dirname(os.path.abspath(__file__))
    torch.manual_seed(30)
    for w, h in SIZES:
        img = Image.new("RGB", (w, h))
        with open(os.path.join(here, f"ref_{w}x{h}.txt"), "w") as f:
            for _ in range(n):
                _, _, bh, bw = RandomResizedCrop.get_params(
                    img, scale=[0.08, 1.0], ratio=[3 / 4, 4 / 3])
                f.write(f"{bw} {bh}\n")


if __name__ == "__main__":
    main()
