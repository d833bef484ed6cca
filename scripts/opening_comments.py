#!/usr/bin/env python3
"""opening_comments.py [DIR...]: the length in lines of each .c/.h/.cu file's opening comment
(from line 1 to the first line of code), longest first; default src tools include. The house
style wants about a dozen lines at most: what the file does and its invariants, the rest in docs/
(public headers' manuals, include/hptrain.h, and engine.c's residency diagram are longer)."""
import os
import sys


def opening(path):
    last, in_block = 0, False
    with open(path, errors="replace") as f:
        for i, line in enumerate(f):
            s = line.strip()
            if in_block:
                last = i + 1
                in_block = "*/" not in s
            elif s == "":
                continue
            elif s.startswith("//"):
                last = i + 1
            elif s.startswith("/*"):
                last = i + 1
                in_block = "*/" not in s[2:]
            else:
                break
    return last


rows = []
for root in sys.argv[1:] or ["src", "tools", "include"]:
    for dp, _, names in os.walk(root):
        rows += [(opening(os.path.join(dp, n)), os.path.join(dp, n))
                 for n in names if n.endswith((".c", ".h", ".cu"))]
for n, p in sorted(rows, reverse=True):
    print(n, p)
