#!/usr/bin/env python3
"""fatbin_archs.py OBJ... - list the GPU code each object's fatbinary holds.

Prints one line per object: the object, then "sm_NN" for each cubin (SASS
for that GPU) and "compute_NN" for each PTX entry, so a test can check
what nvcc built without cuobjdump (which the CUDA toolkit may lack).

The fatbinary (section .nv_fatbin) starts with magic 0xBA55ED50, a 16-bit
version, a 16-bit header size and a 64-bit payload size; each entry starts
with a 16-bit kind (1 PTX, 2 ELF cubin), 16 bits, a 32-bit header size, a
64-bit payload size, and carries the SM version at byte 28. Exits 1 when an
object holds no fatbinary or its entries overrun it.
"""
import struct
import sys

MAGIC = struct.pack("<I", 0xBA55ED50)


def archs(data):
    out = []
    start = 0
    while True:
        i = data.find(MAGIC, start)
        if i < 0:
            return out
        _, _, hsize, fsize = struct.unpack_from("<IHHQ", data, i)
        off, end = i + hsize, i + hsize + fsize
        if end > len(data):
            raise ValueError("fatbinary at %d overruns the file" % i)
        while off < end:
            kind, _, ehs, size = struct.unpack_from("<HHIQ", data, off)
            (arch,) = struct.unpack_from("<I", data, off + 28)
            if ehs < 32 or off + ehs + size > end:
                raise ValueError("entry at %d overruns its fatbinary" % off)
            out.append(("sm_%d" if kind == 2 else "compute_%d") % arch)
            off += ehs + size
        start = end


def main():
    rc = 0
    for path in sys.argv[1:]:
        with open(path, "rb") as f:
            data = f.read()
        try:
            found = archs(data)
        except (ValueError, struct.error) as e:
            print("%s: %s" % (path, e), file=sys.stderr)
            rc = 1
            continue
        if not found:
            print("%s: no fatbinary" % path, file=sys.stderr)
            rc = 1
        print(path, " ".join(sorted(set(found))))
    return rc


if __name__ == "__main__":
    sys.exit(main())
