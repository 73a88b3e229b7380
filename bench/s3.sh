#!/usr/bin/env bash
# bench/s3.sh - s3:// throughput of issue 13, the same objects through the
# same emulated link in front of moto's S3 server (SigV4 checked), in one
# run:
#
#   bench/s3.sh [--runs K] [--mb N] [--rate R] [--total T] [--build DIR]
#
#   pack-s3      shardtool pack imagenet SRC -o s3://bench/p/in-%06d.tar,
#                then shardtool verify of the bucket's manifest: time to a
#                complete, verified dataset in the bucket
#   pack-boto3   shardtool pack to local disk, then boto3 upload_file of
#                every shard and the manifest (its transfer manager,
#                max_concurrency 16), then the same verify
#   io-sl        shardload bench s3://bench/p/in.json --no-decode
#                --io-streams 4 --parts 4 --remainder keep (I/O only)
#   io-sl-direct the same straight to moto, no link: the server's ceiling
#   io-boto3     boto3 download_fileobj of every shard into a null sink,
#                the objects 4 at a time, its default TransferConfig
#   io-boto3-16  the same, TransferConfig(max_concurrency=16,
#                multipart_chunksize=8 MiB)
#   io-s3tc      s3torchconnector S3IterableDataset.from_objects over the
#                same URIs, each object read to its end, in one process
#   io-s3tc-4    the same through torch's DataLoader with 4 workers
#                (enable_sharding=True, each worker reads its own objects),
#                as a training job reads it
#
# The link: tests/proxy/linkproxy with --ttfb 30, --conn-rate R (default
# 20M) and --total-rate T (default 100M), below what moto serves on
# loopback here (io-sl-direct shows how far), so the link is the
# bottleneck. MB/s = shard bytes / seconds, medians of K runs (default 3):
# wall seconds with start-up for shardtool and shardload; a Python peer
# times itself from after its imports (torch's start-up is not charged to
# it) and must have read every shard's bytes.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=$top/build runs=3 mb=200 rate=20M total=100M
while [ $# -gt 0 ]; do
	case $1 in
	--runs) runs=$2; shift 2 ;;
	--mb) mb=$2; shift 2 ;;
	--rate) rate=$2; shift 2 ;;
	--total) total=$2; shift 2 ;;
	--build) build=$2; shift 2 ;;
	*) echo "usage: bench/s3.sh [--runs K] [--mb N] [--rate R] [--total T] [--build DIR]" >&2
	   exit 2 ;;
	esac
done
W=$(mktemp -d /tmp/shardkit-bench-s3.XXXXXX)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null; rm -rf "$W"' EXIT
st=$build/shardtool/shardtool sl=$build/loader/shardload
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

P=$(port)
INITIAL_NO_AUTH_ACTION_COUNT=3 python3 "$top/tests/py/moto_server.py" \
    -H 127.0.0.1 -p "$P" >"$W/moto.log" 2>&1 &
pids+=($!)
# A connect, not a request: moto counts requests against the three
# unchecked ones.
for _ in $(seq 100); do
	python3 -c 'import socket, sys
socket.create_connection(("127.0.0.1", int(sys.argv[1])), 1).close()' "$P" \
	    2>/dev/null && break
	sleep 0.2
done
export AWS_REGION=us-east-1 AWS_DEFAULT_REGION=us-east-1 AWS_ENDPOINT_URL_S3=http://127.0.0.1:$P
export AWS_CONFIG_FILE=$W/none AWS_SHARED_CREDENTIALS_FILE=$W/none
read -r AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY < <(python3 - <<'EOF'
import json, os, boto3
iam = boto3.client("iam", endpoint_url=os.environ["AWS_ENDPOINT_URL_S3"],
                   aws_access_key_id="x", aws_secret_access_key="y")
iam.create_user(UserName="b")
iam.put_user_policy(UserName="b", PolicyName="all", PolicyDocument=json.dumps(
    {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*",
                                             "Resource": "*"}]}))
k = iam.create_access_key(UserName="b")["AccessKey"]
print(k["AccessKeyId"], k["SecretAccessKey"])
EOF
)
export AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY
python3 -c 'import boto3; boto3.client("s3").create_bucket(Bucket="bench")'
"$build/tests/proxy/linkproxy" --upstream "127.0.0.1:$P" --ttfb 30 \
    --conn-rate "$rate" --total-rate "$total" >"$W/proxy.port" 2>"$W/proxy.err" &
pids+=($!)
for _ in $(seq 50); do grep -q port "$W/proxy.port" 2>/dev/null && break; sleep 0.1; done
LINK=http://127.0.0.1:$(sed -n 's/^port //p' "$W/proxy.port")

# About mb MB of ImageNet-like JPEGs (~110 KB each), shards of ~25 MB.
per=$((mb * 1000 / 110 / 10))
"$st" synth imagenet "$W/src" --classes 10 --per-class "$per" --val 10 -q
# Wall seconds of a command; nothing (and its error logged) when it fails.
t() {
	if /usr/bin/time -f %e -o "$W/t" "$@" >/dev/null 2>>"$W/err.log"; then
		tail -n 1 "$W/t"
	else
		echo "failed: $*" >>"$W/err.log"
	fi
}
# Seconds a Python peer timed itself from after its imports (the
# interpreter's and torch's start-up are not charged to it); its last line
# of output is "BYTES SECONDS", and BYTES must be every shard's.
tpy() {
	local out
	if out=$("$@" 2>>"$W/err.log" | tail -n 1) &&
	    [ "${out% *}" = "$bytes" ]; then
		echo "${out#* }"
	else
		echo "failed or short ($out, want $bytes bytes): $*" >>"$W/err.log"
	fi
}

declare -A R
for ((r = 1; r <= runs; r++)); do
	# pack: straight into the bucket, or local and then boto3
	R[pack-s3]+=" $(AWS_ENDPOINT_URL_S3=$LINK t bash -c "
	    '$st' pack imagenet '$W/src' -o 's3://bench/p$r/in-%06d.tar' \
	    --max-size 25M -q && '$st' verify -q 's3://bench/p$r/in.json'")"
	rm -rf "$W/local"
	R[pack-boto3]+=" $(AWS_ENDPOINT_URL_S3=$LINK t bash -c "
	    '$st' pack imagenet '$W/src' -o '$W/local/in-%06d.tar' --max-size 25M -q &&
	    python3 - '$W/local' b$r <<'EOF'
import boto3, os, sys
from boto3.s3.transfer import TransferConfig
d, pre = sys.argv[1], sys.argv[2]
s3 = boto3.client('s3')
cfg = TransferConfig(max_concurrency=16)
for n in sorted(os.listdir(d)):
    s3.upload_file(os.path.join(d, n), 'bench', pre + '/' + n, Config=cfg)
EOF
	    '$st' verify -q 's3://bench/b$r/in.json'")"
	bytes=$(du -cb "$W"/local/*.tar | tail -n 1 | cut -f1)
	keys=$(cd "$W/local" && ls *.tar)
	R[io-sl]+=" $(AWS_ENDPOINT_URL_S3=$LINK t "$sl" bench "s3://bench/p$r/in.json" \
	    --no-decode --io-streams 4 --parts 4 --remainder keep -q)"
	# moto alone, no link: what the server can give, above the link's cap
	R[io-sl-direct]+=" $(t "$sl" bench "s3://bench/p$r/in.json" \
	    --no-decode --io-streams 4 --parts 4 --remainder keep -q)"
	for cfg in default tuned; do
		k=io-boto3; [ "$cfg" = default ] || k=io-boto3-tuned
		R[$k]+=" $(AWS_ENDPOINT_URL_S3=$LINK tpy python3 - "$cfg" p$r $keys <<'EOF'
import boto3, sys, time
from concurrent.futures import ThreadPoolExecutor
from boto3.s3.transfer import TransferConfig
cfg, pre, keys = sys.argv[1], sys.argv[2], sys.argv[3:]
t0 = time.monotonic()
tc = TransferConfig() if cfg == "default" else TransferConfig(
    max_concurrency=16, multipart_chunksize=8 << 20)
s3 = boto3.client("s3")
class Null:
    n = 0
    def write(self, b): self.n += len(b); return len(b)
def one(k):
    f = Null(); s3.download_fileobj("bench", pre + "/" + k, f, Config=tc); return f.n
with ThreadPoolExecutor(4) as ex:
    n = sum(ex.map(one, keys))
print(n, "%.3f" % (time.monotonic() - t0))
EOF
)"
	done
	for w in 0 4; do
		k=io-s3tc; [ "$w" = 0 ] || k=io-s3tc-$w
		R[$k]+=" $(AWS_ENDPOINT_URL_S3=$LINK tpy python3 - "$w" p$r $keys <<'EOF'
import os, sys, time
from s3torchconnector import S3IterableDataset, S3ClientConfig
from torch.utils.data import DataLoader
workers, pre, keys = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
t0 = time.monotonic()
def size(obj):
    return len(obj.read())
ds = S3IterableDataset.from_objects(
    ["s3://bench/%s/%s" % (pre, k) for k in keys], region="us-east-1",
    endpoint=os.environ["AWS_ENDPOINT_URL_S3"], transform=size,
    s3client_config=S3ClientConfig(force_path_style=True),
    enable_sharding=workers > 0)
if workers:
    ds = DataLoader(ds, batch_size=None, num_workers=workers)
n = sum(int(n) for n in ds)
print(n, "%.3f" % (time.monotonic() - t0))
EOF
)"
	done
done
med() { tr ' ' '\n' | { grep . || true; } | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
echo "bench/s3.sh $(date -u +%F) runs=$runs link: ttfb 30 ms, $rate/conn, $total total; data $((bytes / 1000000)) MB"
for k in pack-s3 pack-boto3 io-sl-direct io-sl io-boto3 io-boto3-tuned io-s3tc io-s3tc-4; do
	s=$(echo "${R[$k]:-}" | med)
	[ -n "$s" ] || { echo "$k: failed (see $W/err.log)"; continue; }
	printf '%-15s median %6.2f s  %7.1f MB/s  runs:%s\n' "$k" "$s" \
	    "$(echo "$bytes / $s / 1000000" | bc -l)" "${R[$k]}"
done
[ -s "$W/err.log" ] && { echo "errors:"; tail -n 20 "$W/err.log"; }
exit 0
