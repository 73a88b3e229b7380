#!/usr/bin/env bash
# seeds.sh DIR [tar|image] - a small seed corpus.
#   tar (the default), for fuzz_tar: ustar, GNU, PAX and compressed tars
#   with WebDataset-style members, and a truncated one.
#   samples, for fuzz_samples: the tar seeds and WebDataset samples with
#   small JPEG and PNG images and labels.
#   image, for fuzz_image: small baseline, progressive, gray, CMYK and
#   truncated JPEGs, and RGB, gray and palette PNGs (made with PIL).
#   checkpoint, for fuzz_checkpoint: shardtrain checkpoints of tiny runs.
#   manifest, for fuzz_manifest: wids shard indexes as shardtool pack and
#   widsindex write them, with and without info, md5sum and filesize.
#   report, for fuzz_report: shardtrain --json run files, whole and
#   minimal.
#   url, for fuzz_url: URLs with credentials, manifest and shard URLs,
#   Content-Range values, times, and nginx JSON listings with files,
#   folders and sizes.
#   s3xml, for fuzz_s3xml: a ListObjectsV2 page with two keys and a
#   continuation token, the last page, a folder with subfolders, S3
#   <Error> bodies and multipart upload results.
#   awsini, for fuzz_awsini: ~/.aws/credentials and config, a NUL
#   between them, with profiles and an "s3 =" block.
#   gcsjson, for fuzz_gcsjson: GCS objects.list pages (one of them of
#   fuzz_gcsjson's folder d/, with subfolders), objects.get metadata,
#   error bodies and OAuth2 token answers.
set -euo pipefail
out=$1
kind=${2:-tar}
mkdir -p "$out"
if [ "$kind" = checkpoint ]; then
	# Real checkpoints of tiny ViTs on synthetic data (--batch 8 --seed 0
	# --image-size 16, what fuzz_checkpoint checks against), AdamW and
	# SGD, and a cut one. shardtrain is $SHARDTRAIN, else a built tree's.
	st=${SHARDTRAIN:-}
	for b in build build-asan build-fuzz; do
		[ -n "$st" ] || [ ! -x "$b/train/shardtrain" ] ||
			st=$b/train/shardtrain
	done
	if [ -z "$st" ] && [ -f build-fuzz/Makefile ]; then
		make -s -C build-fuzz train/shardtrain >/dev/null
		st=build-fuzz/train/shardtrain
	fi
	[ -n "$st" ] || { echo "seeds.sh: no shardtrain: set SHARDTRAIN" >&2; exit 1; }
	work=$(mktemp -d)
	trap 'rm -rf "$work"' EXIT
	for opt in adamw sgd; do
		"$st" --model vit-ti4 --dim 8 --depth 1 --heads 1 --mlp 8 \
			--image-size 16 --batch 8 --seed 0 --steps 1 \
			--optimizer "$opt" --checkpoint-dir "$work/$opt" \
			--ceiling-steps 0 --threads 1 -q >/dev/null
		cp "$work/$opt/step-00000001.ckpt" "$out/$opt.ckpt"
	done
	head -c 300 "$out/adamw.ckpt" >"$out/cut.ckpt"
	exit 0
fi
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
if [ "$kind" = url ]; then
	# URLs with credentials, a manifest and a shard URL to resolve, a
	# Content-Range, and an nginx JSON listing (fuzz_url's three fields).
	printf 'https://u:p@h:8443/a/in.json?X-Amz-Credential=A%%2FB&X-Amz-Signature=ff&x-id=1\nin-000001.tar\n[{"name":"in-000000.tar","type":"file","mtime":"Wed, 25 Nov 2026 04:13:00 GMT","size":20450304},{"name":"sub","type":"directory"}]\n' >"$out/signed"
	printf 'http://127.0.0.1:8080/s/in.json\nbytes 0-8388607/20450304\n[{"name":".hidden","type":"file"},{"name":"a b%%.tar","type":"file","size":1}]\n' >"$out/plain"
	# As nginx writes one: a folder and a file of the same name, a fifo
	# ("other"), and an RFC 3339 time in the second field.
	printf 'https://h/d/\n2009-10-12T17:50:30.000Z\n[\n{ "name":"in-000000.tar", "type":"file", "mtime":"Wed, 25 Nov 2026 16:30:00 GMT", "size":20450304 },\n{ "name":"sub", "type":"directory", "mtime":"Tue, 24 Nov 2026 09:00:00 GMT" },\n{ "name":"sub", "type":"file", "mtime":"Tue, 24 Nov 2026 09:00:01 GMT", "size":0 },\n{ "name":"fifo", "type":"other", "mtime":"Tue, 24 Nov 2026 09:00:02 GMT" }\n]\n' >"$out/nginx"
	printf '/data/in.json\n/abs/in-0.tar\n[]\n' >"$out/local"
	printf 'https://h\nbytes */0\n{"not":"a list"}\n' >"$out/empty"
	exit 0
fi
if [ "$kind" = s3xml ]; then
	# As AWS documents them (ListObjectsV2, Error responses,
	# CreateMultipartUpload, CompleteMultipartUpload).
	x='<?xml version="1.0" encoding="UTF-8"?>'
	ns='xmlns="http://s3.amazonaws.com/doc/2006-03-01/"'
	cat >"$out/list.xml" <<EOF
$x
<ListBucketResult $ns><Name>bucket</Name><Prefix>dir/</Prefix><KeyCount>2</KeyCount><MaxKeys>2</MaxKeys><IsTruncated>true</IsTruncated><NextContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=</NextContinuationToken><Contents><Key>dir/train-000000.tar</Key><LastModified>2026-01-15T10:00:00.000Z</LastModified><ETag>&quot;70ee1738b6b21e2c8a43f3a5ab0eee71&quot;</ETag><Size>20450304</Size><StorageClass>STANDARD</StorageClass></Contents><Contents><Key>dir/train-000001.tar</Key><LastModified>2026-01-15T10:00:01.000Z</LastModified><ETag>&quot;9b2cf535f27731c974343645a3985328-3&quot;</ETag><Size>19922944</Size><StorageClass>STANDARD</StorageClass></Contents></ListBucketResult>
EOF
	# A folder as ListObjectsV2 lists it with a delimiter: its marker,
	# subfolders (one beside an object of its name), names that are not
	# one segment.
	printf '%s\n<ListBucketResult %s><Name>bucket</Name><Prefix>dir/</Prefix><Delimiter>/</Delimiter><KeyCount>6</KeyCount><MaxKeys>1000</MaxKeys><IsTruncated>false</IsTruncated><Contents><Key>dir/</Key><LastModified>2026-01-15T09:59:59.000Z</LastModified><ETag>&quot;d41d8cd98f00b204e9800998ecf8427e&quot;</ETag><Size>0</Size></Contents><Contents><Key>dir/a</Key><LastModified>2026-01-15T10:00:00.000Z</LastModified><ETag>&quot;0cc175b9c0f1b6a831c399e269772661&quot;</ETag><Size>1</Size></Contents><Contents><Key>dir/..</Key><Size>1</Size></Contents><CommonPrefixes><Prefix>dir/a/</Prefix></CommonPrefixes><CommonPrefixes><Prefix>dir/sub/</Prefix></CommonPrefixes><CommonPrefixes><Prefix>dir//</Prefix></CommonPrefixes></ListBucketResult>\n' "$x" "$ns" >"$out/folder.xml"
	printf '%s\n<ListBucketResult %s><Name>bucket</Name><Prefix>dir/</Prefix><KeyCount>2</KeyCount><IsTruncated>false</IsTruncated><ContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=</ContinuationToken><Contents><Key>dir/sub/deep.tar</Key><Size>1</Size></Contents><Contents><Key>dir/val-000000.tar</Key><Size>10240</Size></Contents></ListBucketResult>\n' "$x" "$ns" >"$out/last.xml"
	printf '%s\n<Error><Code>NoSuchKey</Code><Message>The resource you requested does not exist</Message><Resource>/bucket/dir/x.tar</Resource><RequestId>4442587FB7D0A2F9</RequestId></Error>\n' "$x" >"$out/error.xml"
	printf '%s\n<Error><Code>AuthorizationHeaderMalformed</Code><Message>the region %s is wrong; expecting %s</Message><Region>eu-west-1</Region><RequestId>656c76696e6727732072657175657374</RequestId><HostId>Uuag1LuByRx9e6j5Onimru9pO4ZVKnJ2Qz7/C1NPcfTWAtRPfTaOFg==</HostId></Error>\n' "$x" "'us-east-1'" "'eu-west-1'" >"$out/redirect.xml"
	printf '%s\n<InitiateMultipartUploadResult %s><Bucket>bucket</Bucket><Key>dir/train-000000.tar</Key><UploadId>VXBsb2FkIElEIGZvciA2aWWpbmcncyBteS1tb3ZpZS5tMnRzIHVwbG9hZA</UploadId></InitiateMultipartUploadResult>\n' "$x" "$ns" >"$out/initiate.xml"
	printf '%s\n<CompleteMultipartUploadResult %s><Location>https://bucket.s3.eu-west-1.amazonaws.com/dir/train-000000.tar</Location><Bucket>bucket</Bucket><Key>dir/train-000000.tar</Key><ETag>&quot;3858f62230ac3c915f300c664312c11f-9&quot;</ETag></CompleteMultipartUploadResult>\n' "$x" "$ns" >"$out/complete.xml"
	exit 0
fi
if [ "$kind" = awsini ]; then
	# credentials, a NUL, config. The secrets hold wJalrXUtnFEMI, which
	# fuzz_awsini wants in no message.
	{
		printf '[default]\naws_access_key_id = AKIAIOSFODNN7EXAMPLE\n'
		printf 'aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n\n'
		printf '# a comment\n[x]\naws_access_key_id=AKIAX\naws_secret_access_key=wJalrXUtnFEMIxsecret\n'
		printf 'aws_session_token = wJalrXUtnFEMItoken//////////wEaCXVzLWVhc3QtMSJH\n\0'
		printf '[default]\nregion = eu-west-1\n; another comment\n'
		printf '[profile x]\nregion = us-west-2\nendpoint_url = http://127.0.0.1:9000/\n'
		printf 's3 =\n  addressing_style = virtual\n  endpoint_url = http://ignored:1\n'
		printf '[profile dev]\naws_access_key_id = AKIADEV\n'
		printf 'aws_secret_access_key = wJalrXUtnFEMIdev\r\nregion = ap-south-1\r\naddressing_style = path\r\n'
	} >"$out/both.ini"
	printf '[profile dev]\naws_access_key_id = K\naws_secret_access_key wJalrXUtnFEMIbad\n' >"$out/bad.ini"
	printf '[default]\naws_access_key_id = K\naws_secret_access_key = wJalrXUtnFEMI\nendpoint_url = https://s3.example.com:443\ns3 =\n    addressing_style = auto\n' >"$out/same.ini"
	exit 0
fi
if [ "$kind" = gcsjson ]; then
	# As the JSON API and the token endpoints answer.
	cat >"$out/list.json" <<'EOF'
{
  "kind": "storage#objects",
  "nextPageToken": "CiBkaXIvdHJhaW4tMDAwMDAxLnRhcg==",
  "prefixes": ["dir/sub/"],
  "items": [
    {"kind": "storage#object", "id": "bucket/dir/train-000000.tar/1700000000000000", "name": "dir/train-000000.tar", "bucket": "bucket", "generation": "1700000000000000", "metageneration": "1", "contentType": "application/x-tar", "size": "20450304", "md5Hash": "cO4XOLayHiyKQ/OlqxTucQ==", "crc32c": "yZRlqg=="},
    {"kind": "storage#object", "name": "dir/train-000001.tar", "bucket": "bucket", "generation": "1700000000000001", "size": "19922944"}
  ]
}
EOF
	printf '{"kind": "storage#objects", "items": [{"name": "a b%%.tar", "size": "0"}, {"size": "1"}]}\n' >"$out/last.json"
	# The folder fuzz_gcsjson lists, d/: its marker, a subfolder beside an
	# object of its name, and names that are not one segment.
	printf '{"kind": "storage#objects", "prefixes": ["d/a/", "d/sub/", "d//"], "items": [{"name": "d/", "size": "0", "generation": "1700000000000000"}, {"name": "d/a", "size": "7", "generation": "1700000000000001", "updated": "2026-01-15T10:00:00.000Z"}, {"name": "d/b.tar", "size": "20450304", "generation": "1700000000000002", "updated": "2026-01-15T10:00:01.123456Z"}, {"name": "d/..", "size": "1"}, {"name": "d//x", "size": "1"}]}\n' >"$out/folder.json"
	printf '{"kind": "storage#object", "id": "bucket/dir/train-000000.tar/1700000000000000", "selfLink": "https://www.googleapis.com/storage/v1/b/bucket/o/dir%%2Ftrain-000000.tar", "name": "dir/train-000000.tar", "bucket": "bucket", "generation": "1700000000000000", "metageneration": "1", "contentType": "application/x-tar", "storageClass": "STANDARD", "size": "20450304", "md5Hash": "cO4XOLayHiyKQ/OlqxTucQ==", "crc32c": "yZRlqg==", "etag": "CICAgICAgIAD", "timeCreated": "2026-01-15T10:00:00.000Z", "updated": "2026-01-15T10:00:00.000Z"}\n' >"$out/get.json"
	printf '{"error": {"code": 403, "message": "sa@p.iam.gserviceaccount.com does not have storage.objects.get access to the Google Cloud Storage object.", "errors": [{"message": "denied", "domain": "global", "reason": "forbidden"}]}}\n' >"$out/error.json"
	printf '{"access_token": "ya29.c.b0AXv0zTOs3cr3tT0k3nQ-example_token.value", "expires_in": 3599, "token_type": "Bearer"}\n' >"$out/token.json"
	printf '{"error": "invalid_grant", "error_description": "Invalid JWT Signature."}\n' >"$out/refused.json"
	printf '{"error": {"code": 404, "message": "Not found"}, "access_token": "ya29.s3cr3tT0k3n"}\n' >"$out/meta-error.json"
	exit 0
fi
if [ "$kind" = report ]; then
	# A run file as shardtrain --json wrote it (a tiny ViT, 2 steps), a
	# DDP run on shards with epochs and a cost, and the fields the
	# reader needs alone.
	cat >"$out/vit.json" <<'EOF'
{
  "schema": 1,
  "tool": "shardtrain",
  "version": "0.1.0",
  "config": {"model": "vit-ti4", "family": "vit", "arch": {"depth": null, "width": null, "patch": 4, "dim": 32, "layers": 2, "heads": 2, "mlp": 64}, "image_size": 16, "classes": 10, "backend": "cpu", "strategy": "single", "world": 1, "batch_per_rank": 8, "global_batch": 8, "source": "synthetic", "epochs": 1, "steps": 2, "seed": 0, "workers": 2, "threads": 2, "optimizer": {"kind": "adamw", "lr": 3.125e-05, "momentum": 0.9, "nesterov": true, "beta1": 0.9, "beta2": 0.999, "eps": 1e-08, "weight_decay": 0.05, "clip": 1, "warmup": 0, "total": 0, "min_lr": 0}, "label_smoothing": 0.1, "loader": {"io_streams": 2, "prefetch_bytes": 67108864, "shuffle": 0, "crop": "random-resized", "flip": true, "strict": false}, "throttle_images_per_second": null, "price_per_hour_usd": null, "checkpoint_activations": false, "ceiling_steps": 1},
  "result": {"steps": 2, "images": 16, "samples": 0, "skipped": 0, "skipped_by_reason": {"decode": 0, "too_big": 0, "no_image": 0, "no_label": 0, "damaged": 0}, "wall_seconds": 0.002375866999500431, "images_per_second": 6734.383702187155, "wait_share": 0.006800445047445044, "stage_seconds": {"data_wait": 1.6150002920767292e-05, "h2d": 6.000118446536362e-08, "forward": 0.0012608260003617033, "backward": 0.0009992439991037827, "comm": 0, "optimizer": 9.813499855226837e-05, "step": 0.002374845000304049}, "loader_images_per_second": null, "compute_images_per_second": 6780.494079569796, "gemm_share": 0.38542220645255254, "params": 19626, "gflops_per_image": 0.000680832, "peak_param_bytes": 314016, "peak_rss_bytes": 13037568, "cost_per_epoch_usd": null, "first_loss": 2.354004144668579, "last_loss": 2.315761089324951, "verdict": "compute-bound", "bound_stage": null, "reason": "synthetic data, no input to wait for: data wait 0.7% of step time; compute alone 6780 img/s", "hint": "synthetic data costs nothing to load: a bigger --batch, more ranks, or a faster backend; --data to try a real input"},
  "epochs": [{"epoch": 0, "steps": 2, "images": 16, "wall_seconds": 0.0023753460009174887, "images_per_second": 6735.860794099017, "wait_share": 0.006800445047445044, "cost_usd": null, "loss": 2.334882616996765}]
}
EOF
	printf '{"schema": 1, "tool": "shardtrain", "config": {"model": "resnet50", "strategy": "ddp", "world": 4, "source": "gs://bucket/in/train-{000000..000146}.tar?x=1"}, "result": {"images_per_second": 410.5, "wall_seconds": 260.2, "wait_share": 0.62, "cost_per_epoch_usd": 0.034, "verdict": "input-bound", "bound_stage": "decode"}, "epochs": [{"epoch": 0, "wall_seconds": 130.0, "cost_usd": 0.034}, {"epoch": 1, "wall_seconds": 130.2, "cost_usd": 0.034}]}\n' >"$out/ddp.json"
	printf '{"schema": 1, "tool": "shardtrain", "config": {"model": "m", "strategy": "fsdp", "world": 2, "source": "/d/cifar10.json"}, "result": {"images_per_second": 0, "wall_seconds": 0, "wait_share": 0, "cost_per_epoch_usd": null, "verdict": "balanced"}}\n' >"$out/minimal.json"
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
