#!/usr/bin/env bash
# train-resume-hostile.sh - shardtrain resumes only what it may: a
# checkpoint written under another global batch, --seed, loader option or
# data source is refused naming the file and the setting; a flipped byte,
# a truncated file and counts the file cannot hold are refused before
# anything is applied; under mpirun rank 0 alone decides where to resume,
# so node-local folders never leave the ranks disagreeing (or hung); and a
# symlink planted at a writer's old temporary name is never written
# through.
set -eu
. "$top_srcdir/tests/cli/lib.sh"
. "$top_srcdir/tests/cli/train-lib.sh"

# The header (train/ckpt_file.h): "SKCKPT2\n", model[32] at 8, nflat at 40,
# nbuf at 48, nstate at 56, settings_len at 60, step at 64; settings at 96.
# poke FILE FORMAT OFFSET VALUE: overwrite one field in place.
poke() {
	python3 - "$@" <<'PY' || fail "poke $*"
import struct, sys
path, fmt, off, val = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
with open(path, "r+b") as f:
    f.seek(off)
    f.write(struct.pack("<" + fmt, val))
PY
}
# flip_param FILE: flip one bit of the first parameter.
flip_param() {
	python3 - "$1" <<'PY' || fail "flip_param $1"
import struct, sys
with open(sys.argv[1], "r+b") as f:
    b = bytearray(f.read())
    (slen,) = struct.unpack_from("<I", b, 60)
    b[96 + slen + 1] ^= 0x10
    f.seek(0)
    f.write(b)
PY
}

packed_cifar "$T/c" 300
M=$T/c/shards/cifar10-train.json
# the same images in other shards: another manifest, other MD5
mkdir -p "$T/d"
st pack2 pack cifar10 "$T/c/src" -o "$T/d/cifar10-train-%06d.tar" \
    --max-count 60
[ -f "$T/d/cifar10-train.json" ] || fail "the second pack wrote no manifest"

common=("${TINY_VIT[@]}" --batch 8 --seed 0 --ceiling-steps 0 --threads 1 -q)
data=(--data "$M" --workers 2 --shuffle 50)
CK=$T/ck/step-00000004.ckpt

say "a checkpoint at step 4 of a run on the manifest"
trn base "${common[@]}" "${data[@]}" --steps 4 --checkpoint-dir "$T/ck"
[ -f "$CK" ] || fail "no checkpoint at step 4"
no_partial "$T/ck"
cp "$CK" "$T/good.ckpt"

# refused TAG SETTING ARGS...: --resume with ARGS exits 1, naming the file
# and SETTING, and writes nothing.
refused() {
	local tag=$1 setting=$2
	shift 2
	trn_rc 1 "$tag" "$@" --steps 6 --checkpoint-dir "$T/ck" --resume \
	    --losses "$T/$tag.loss"
	has "$tag.err" "checkpoint $CK was written with"
	has "$tag.err" "$setting"
	[ ! -e "$T/$tag.loss" ] || fail "$tag: a refused resume wrote its losses"
	[ "$(ls "$T/ck")" = step-00000004.ckpt ] ||
	    fail "$tag: a refused resume wrote a checkpoint: $(ls "$T/ck")"
}

say "(a) a resume under other settings is refused, naming the setting"
refused batch "--global-batch 8, this run has --global-batch 16" \
    "${common[@]}" "${data[@]}" --batch 16
refused seed "--seed 0, this run has --seed 7" \
    "${common[@]}" "${data[@]}" --seed 7
refused shuffle "--shuffle 50, this run has --shuffle 20" \
    "${common[@]}" "${data[@]}" --shuffle 20
refused crop "--crop random-resized, this run has --crop center" \
    "${common[@]}" "${data[@]}" --crop center
refused flip "--flip 1, this run has --flip 0" \
    "${common[@]}" "${data[@]}" --no-flip
refused scale "--scale " "${common[@]}" "${data[@]}" --scale 0.5,1
refused manifest "--data a manifest with MD5 " \
    "${common[@]}" "${data[@]}" --data "$T/d/cifar10-train.json"
has manifest.err "this run has --data a manifest with MD5 "
refused synthetic "this run has --data synthetic" \
    "${common[@]}" --data synthetic
refused pattern "this run has --data $T/c/shards/cifar10-train-{000000..000002}.tar" \
    "${common[@]}" "${data[@]}" \
    --data "$T/c/shards/cifar10-train-{000000..000002}.tar" --classes 10
say "the same settings resume (from step 4 to 6)"
trn same "${common[@]}" "${data[@]}" --steps 6 --checkpoint-dir "$T/ck" \
    --resume --losses "$T/same.loss"
[ "$(cut -d' ' -f1 "$T/same.loss" | tr '\n' ' ')" = "4 5 " ] ||
    fail "the resume did not start at step 4: $(cat "$T/same.loss")"
rm -f "$T/ck/step-00000006.ckpt"

# damaged TAG TEXT: the resume from this damaged checkpoint exits 1 with
# TEXT and the file's name, before anything is applied or written.
damaged() {
	local tag=$1 text=$2
	trn_rc 1 "$tag" "${common[@]}" "${data[@]}" --steps 6 \
	    --checkpoint-dir "$T/ck" --resume --losses "$T/$tag.loss"
	has "$tag.err" "$CK"
	has "$tag.err" "$text"
	[ ! -e "$T/$tag.loss" ] || fail "$tag: a refused resume wrote its losses"
	[ "$(ls "$T/ck")" = step-00000004.ckpt ] ||
	    fail "$tag: a refused resume wrote a checkpoint: $(ls "$T/ck")"
	cp "$T/good.ckpt" "$CK"
}

say "(b) a flipped byte in the parameters is refused before it is applied"
flip_param "$CK"
damaged flipped "checksum mismatch"

say "(c) truncated files and counts the file cannot hold fail cleanly"
truncate -s 1000 "$CK"
damaged trunc1000 "truncated"
truncate -s $(($(file_size "$CK") - 1)) "$CK"
damaged trunc1 "damaged"
truncate -s 60 "$CK"
damaged trunc60 "truncated"
: >"$CK"
damaged empty "not a shardtrain checkpoint"
poke "$CK" Q 40 $((1 << 62))
damaged nflat "truncated or damaged"
poke "$CK" q 48 -1
damaged nbuf "truncated or damaged"
poke "$CK" I 56 $(((1 << 32) - 1))
damaged nstate "optimizer states"
poke "$CK" I 60 $(((1 << 32) - 1))
damaged settings "bytes of settings"
poke "$CK" I 60 0
damaged settings0 "damaged"
poke "$CK" q 64 -5
damaged step "damaged"
printf 'SKCKPT1\n' | dd of="$CK" conv=notrunc status=none
damaged old "older shardtrain"

say "(c) a FIFO named like the newest checkpoint is refused, not waited on"
mkdir -p "$T/ckf"
cp "$T/good.ckpt" "$T/ckf/step-00000004.ckpt"
mkfifo "$T/ckf/step-00000009.ckpt"
run_rc 1 fifo timeout -k 5 60 "$SHARDTRAIN" "${common[@]}" "${data[@]}" \
    --steps 6 --checkpoint-dir "$T/ckf" --resume
has fifo.err "step-00000009.ckpt"
rm -f "$T/ckf/step-00000009.ckpt"

say "(e) a symlink at a writer's old temporary name is not written through"
printf 'precious\n' >"$T/victim"
mkdir -p "$T/ck2"
ln -s "$T/victim" "$T/ck2/step-00000002.ckpt.part"
ln -s "$T/victim" "$T/params.bin.part"
trn planted "${common[@]}" --steps 2 --checkpoint-dir "$T/ck2" \
    --dump-params "$T/params.bin"
[ "$(cat "$T/victim")" = precious ] ||
    fail "a planted symlink was written through"
[ -f "$T/ck2/step-00000002.ckpt" ] && [ ! -L "$T/ck2/step-00000002.ckpt" ] ||
    fail "no checkpoint at step 2"
[ -f "$T/params.bin" ] && [ ! -L "$T/params.bin" ] || fail "no --dump-params"
[ "$(find "$T/ck2" "$T" -maxdepth 1 -name '.*.part' | wc -l)" -eq 0 ] ||
    fail "temporary files left behind"

say "(d) mpirun -np 2, node-local checkpoint folders: rank 0 decides"
if ! mpi_launcher; then
	say "skipped: $MPI_WHY"
	echo "PASS: train-resume-hostile"
	exit 0
fi
# Each rank runs in its own folder, so "--checkpoint-dir ck" (the same
# option on every rank) names a folder of its own on each.
mkdir -p "$T/node0" "$T/node1"
# shellcheck disable=SC2016
pernode=(sh -c 'cd "$T/node${OMPI_COMM_WORLD_RANK:-${PMIX_RANK:-0}}" &&
    exec "$0" "$@"' "$SHARDTRAIN")
export T
ddp=("${TINY_VIT[@]}" --global-batch 8 --seed 0 --ceiling-steps 0 --threads 1 -q
    --strategy ddp --steps 6)
# mrun WANT TAG ARGS...: shardtrain on 2 ranks, each in its node folder,
# killed after 120 s: a hang fails the test.
mrun() {
	local want=$1 tag=$2
	shift 2
	run_rc "$want" "$tag" timeout -k 10 120 "${MPI[@]}" -np 2 \
	    "${pernode[@]}" "$@"
	no_sanitizer_report "$tag"
}
mrun 0 whole "${ddp[@]}" --losses "$T/whole.loss"
mrun 0 first "${ddp[@]}" --checkpoint-dir ck --checkpoint-every 3
[ -f "$T/node0/ck/step-00000003.ckpt" ] || fail "rank 0 wrote no checkpoint"
[ ! -e "$T/node1/ck" ] || fail "rank 1 wrote checkpoints"
rm "$T/node0/ck/step-00000006.ckpt"
say "only rank 0 has one: both ranks resume from it, as one run"
mrun 0 resume0 "${ddp[@]}" --checkpoint-dir ck --resume \
    --losses "$T/resume0.loss"
sed -n '4,6p' "$T/whole.loss" >"$T/tail.loss"
cmp -s "$T/tail.loss" "$T/resume0.loss" || {
	diff "$T/tail.loss" "$T/resume0.loss" >&2 || true
	fail "the 2-rank resume differs from the uninterrupted run"
}
say "only rank 1 has one: rank 0 decides there is none, both start over"
mkdir -p "$T/node1/ck"
mv "$T/node0/ck/step-00000003.ckpt" "$T/node1/ck/"
rm -f "$T/node0/ck/"*
mrun 0 resume1 "${ddp[@]}" --checkpoint-dir ck --resume \
    --losses "$T/resume1.loss"
cmp -s "$T/whole.loss" "$T/resume1.loss" ||
    fail "a checkpoint only rank 1 sees changed the run"
say "rank 0 refuses its checkpoint: every rank fails, none hangs"
mv "$T/node1/ck/step-00000003.ckpt" "$T/node0/ck/"
rm -f "$T/node0/ck/step-00000006.ckpt"
mrun 1 refused2 "${ddp[@]}" --seed 7 --checkpoint-dir ck --resume
has refused2.err "was written with --seed 0, this run has --seed 7"
has refused2.err "rank 1: rank 0 refused the checkpoint"

say "a 1-rank checkpoint on 2 ranks: --batch is per rank, --global-batch keeps it"
one=("${TINY_VIT[@]}" --seed 0 --ceiling-steps 0 --threads 1 -q --steps 6
    --checkpoint-dir "$T/one")
trn one1 "${one[@]}" --batch 8 --checkpoint-every 3
rm "$T/one/step-00000006.ckpt"
mrun 1 perrank "${one[@]}" --batch 8 --resume
has perrank.err "was written with --global-batch 8, this run has --global-batch 16"
has perrank.err "resume with --global-batch 8 (--batch is per rank"
mrun 0 global "${one[@]}" --global-batch 8 --resume --losses "$T/global.loss"
[ "$(wc -l <"$T/global.loss")" -eq 3 ] ||
    fail "the resume on 2 ranks did not go on from step 3"
echo "PASS: train-resume-hostile"
