#!/usr/bin/env bash
# seeds.sh DIR [tar|image] - a small seed corpus.
#   tar (the default), for fuzz_tar: ustar, GNU, PAX and compressed tars
#   with WebDataset-style members, and a truncated one.
#   samples, for fuzz_samples: the tar seeds and WebDataset samples with
#   small JPEG and PNG images and labels.
#   image, for fuzz_image: small baseline, progressive, gray, CMYK and
#   truncated JPEGs, and RGB, gray and palette PNGs (made with PIL).
#   manifest, for fuzz_manifest: wids shard indexes as shardtool pack and
#   widsindex write them, with and without info, md5sum and filesize.
set -euo pipefail
out=$1
kind=${2:-tar}
mkdir -p "$out"
if [ "$kind" = manifest ]; then
	k='"__kind__": "wids-shard-index-v1", "wids_version": 1'
	m=0123456789abcdef0123456789abcdef
	cat >"$out/pack.json" <<EOF
{
  $k,
  "shardlist": [
    {"url": "cifar10-train-000000.tar", "nsamples": 100, "filesize": 378880, "md5sum": "$m"},
    {"url": "cifar10-train-000001.tar", "nsamples": 20, "filesize": 76800, "md5sum": "$m"}
  ],
  "info": {"classes": ["airplane", "automobile", "bird"], "class_counts": [40, 40, 40], "source": "cifar10"}
}
EOF
	printf '{%s, "name": "val", "shardlist": [{"url": "https://h/val-000000.tar", "nsamples": 340, "filesize": 40960000}, {"url": "val-000001.tar", "nsamples": 12, "filesize": 1474560}]}\n' "$k" >"$out/wids.json"
	printf '{%s, "shardlist": [{"url": "s.tar.gz", "nsamples": 9}, {"url": "t.tar", "nsamples": 0, "filesize": 1024, "md5sum": ""}]}\n' "$k" >"$out/minimal.json"
	printf '{%s, "shardlist": []}\n' "$k" >"$out/empty.json"
	exit 0
fi
if [ "$kind" = image ]; then
	exec "${PYTHON:-python3}" - "$out" <<'PY'
import io, sys
from PIL import Image
out = sys.argv[1]
def img(mode, w, h):
    im = Image.new("RGB", (w, h))
    im.putdata([((x * 9) % 256, (y * 7) % 256, ((x ^ y) * 3) % 256)
                for y in range(h) for x in range(w)])
    return im.convert(mode)
def save(name, im, fmt, **kw):
    b = io.BytesIO()
    im.save(b, fmt, **kw)
    open(f"{out}/{name}", "wb").write(b.getvalue())
    return b.getvalue()
save("rgb.jpg", img("RGB", 37, 23), "JPEG", quality=80)
save("prog.jpg", img("RGB", 40, 30), "JPEG", quality=70, progressive=True)
save("gray.jpg", img("L", 33, 17), "JPEG")
save("cmyk.jpg", img("CMYK", 16, 16), "JPEG")
save("420.jpg", img("RGB", 64, 48), "JPEG", subsampling=2)
d = save("big.jpg", img("RGB", 160, 120), "JPEG", quality=60)
open(f"{out}/cut.jpg", "wb").write(d[: len(d) // 2])
save("rgb.png", img("RGB", 20, 12), "PNG")
save("gray.png", img("L", 9, 31), "PNG")
save("pal.png", img("P", 12, 12), "PNG")
save("rgba.png", img("RGBA", 7, 5), "PNG")
PY
fi
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
if command -v zstd >/dev/null 2>&1; then
	tar --format=ustar --zstd -cf "$out/ustar.tar.zst" a.cls a.txt
fi
head -c 1300 "$out/ustar.tar" > "$out/truncated.tar"
if [ "$kind" = samples ]; then
	"${PYTHON:-python3}" - <<'PY'
import io
from PIL import Image
for i, fmt in enumerate(("JPEG", "PNG", "JPEG")):
    b = io.BytesIO()
    Image.new("RGB", (9 + i, 7), (40 * i, 90, 200)).save(b, fmt)
    ext = "jpg" if fmt == "JPEG" else "png"
    open(f"s{i}.{ext}", "wb").write(b.getvalue())
    open(f"s{i}.cls", "w").write(str(i))
PY
	tar --format=ustar -cf "$out/samples.tar" s0.cls s0.jpg s1.cls s1.png s2.jpg
	tar --format=pax -cf "$out/samples-pax.tar" s0.jpg s0.cls a.txt s1.png s1.cls
fi
