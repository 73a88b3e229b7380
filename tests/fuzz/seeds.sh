#!/usr/bin/env bash
# seeds.sh DIR - a small seed corpus for fuzz_tar: ustar, GNU, PAX and
# compressed tars with WebDataset-style members, and a truncated one.
set -euo pipefail
out=$1
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
printf '0' > a.cls
printf 'hello' > a.txt
printf '1' > b.cls
head -c 700 /dev/urandom > b.bin
long=$(printf 'k%.0s' $(seq 1 120))
printf 'x' > "$long.cls"
tar --format=ustar -cf "$out/ustar.tar" a.cls a.txt b.cls b.bin
tar --format=gnu -cf "$out/gnu.tar" a.cls "$long.cls"
tar --format=pax -cf "$out/pax.tar" a.cls b.bin "$long.cls"
tar --format=ustar -czf "$out/ustar.tar.gz" a.cls a.txt
head -c 1300 "$out/ustar.tar" > "$out/truncated.tar"
