"""shardkit.Loader against shardload, and its guarantees."""

import contextlib
import gc
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import warnings

import numpy as np
import pytest

import shardkit
from conftest import batch_lines, env, loader_lines, shardload_keys

# Ctrl-C is KeyboardInterrupt here whatever the launcher did: a job put in
# the background by a non-interactive shell starts with SIGINT ignored,
# and Python then keeps ignoring it (the Ctrl-C tests would wait out
# their stall timeouts instead).
signal.signal(signal.SIGINT, signal.default_int_handler)
CHILD_SIGINT = ("import signal\n"
                "signal.signal(signal.SIGINT, signal.default_int_handler)\n")

torch = pytest.importorskip("torch")

BASE = dict(batch_size=6, image_size=32, shuffle=16, seed=11)


# -- the same batches as shardload ------------------------------------------

@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("rank", [None, 0, 1])
@pytest.mark.parametrize("kind", ["manifest", "pattern"])
def test_local_batches_equal_shardload(kind, rank, workers, manifest,
                                       pattern):
    src = manifest if kind == "manifest" else pattern
    opts = dict(BASE, epochs=2, workers=workers)
    if rank is not None:
        opts.update(rank=rank, world=2)
    want = shardload_keys(src, **opts)
    assert len(want) > 0
    assert loader_lines(src, **opts) == want


@pytest.mark.parametrize("rank", [0, 1])
@pytest.mark.parametrize("workers", [1, 2])
def test_http_batches_equal_shardload(rank, workers):
    url = env("SK_HTTP_URL") + "/s/in.json"
    opts = dict(BASE, workers=workers, rank=rank, world=2)
    want = shardload_keys(url, **opts)
    assert loader_lines(url, **opts) == want
    # and the same as from local disk
    assert want == shardload_keys(os.path.join(env("SK_DATA"), "in.json"),
                                  **opts)


def test_https_batches_equal_shardload():
    url = env("SK_HTTPS_URL") + "/s/in.json"
    ca = env("SK_CA_FILE")
    opts = dict(BASE, workers=2)
    want = shardload_keys(url, extra=["--ca-file", ca], **opts)
    assert loader_lines(url, ca_file=ca, **opts) == want
    assert want == shardload_keys(os.path.join(env("SK_DATA"), "in.json"),
                                  **opts)


def test_manifest_names_only_its_own_origin(tmp_path):
    """An http manifest naming a shard on another origin (the https port)
    is refused unless allow_cross_origin; the engine's setting is the
    process's, so the test puts it back."""
    http, https = env("SK_HTTP_URL"), env("SK_HTTPS_URL")
    ca = env("SK_CA_FILE")
    with open(os.path.join(env("SK_DATA"), "in.json")) as f:
        m = json.load(f)
    m["shardlist"] = m["shardlist"][:1]
    m["shardlist"][0]["url"] = https + "/s/" + m["shardlist"][0]["url"]
    name = "cross-%d.json" % os.getpid()
    path = os.path.join(env("SK_DATA"), name)
    with open(path, "w") as f:
        json.dump(m, f)
    try:
        url = http + "/s/" + name
        with pytest.raises(PermissionError, match="not on its own origin"):
            for _ in shardkit.Loader(url, batch_size=2, ca_file=ca,
                                     allow_cross_origin=False):
                pass
        n = 0
        for b in shardkit.Loader(url, batch_size=2, ca_file=ca,
                                 allow_cross_origin=True):
            n += len(b.keys)
        assert n > 0
    finally:
        shardkit.Loader(os.path.join(env("SK_DATA"), "in.json"),
                        batch_size=2, allow_cross_origin=False)
        os.unlink(path)


def test_read_ahead_is_shardloads():
    """Remote shards: ahead fixes the read-ahead, io_streams given alone
    fixes it at one (as shardload's --io-streams does), and by default it
    is found within max_inflight; the batches stay the same."""
    url = env("SK_HTTP_URL") + "/s/in.json"
    want = shardload_keys(url, **BASE)
    for kw, cap in ((dict(ahead=3), 3), (dict(io_streams=2), 1),
                    (dict(parts=2), 1), ({}, None)):
        opts = dict(BASE, dtype="uint8", layout="NHWC", **kw)
        lines = []
        with shardkit.Loader(url, **opts) as lo:
            for b in lo:
                lines += batch_lines(*b, b.epoch, b.index)
            r = lo.stats()["remote"]
        assert lines == want, kw
        if cap is not None:
            assert r["ahead_cap"] == cap and r["ahead_peak"] <= cap, kw
        else:
            assert 1 <= r["ahead_peak"] <= r["ahead_cap"] <= 16


@pytest.mark.parametrize("rank", [0, 1])
@pytest.mark.parametrize("workers", [1, 2])
def test_bucket_batches_equal_shardload(rank, workers):
    url = env("SK_GS_MANIFEST")
    opts = dict(BASE, workers=workers, rank=rank, world=2)
    want = shardload_keys(url, **opts)
    assert loader_lines(url, **opts) == want
    assert want == shardload_keys(os.path.join(env("SK_DATA"), "in.json"),
                                  **opts)


def test_float_nchw_equal_shardload(manifest):
    opts = dict(BASE, dtype="float32", layout="NCHW", workers=2)
    assert loader_lines(manifest, **opts) == shardload_keys(manifest, **opts)


def test_torch_gets_the_batch_as_it_is(manifest):
    with shardkit.Loader(manifest, **BASE, workers=2) as lo:
        b = next(iter(lo))
        x = torch.from_dlpack(b.images)
        y = torch.from_dlpack(b.labels)
        assert x.shape == (6, 3, 32, 32) and x.dtype == torch.float32
        assert y.dtype == torch.int32 and y.shape == (6,)
        assert b.images.shape == (6, 3, 32, 32)
        assert b.images.dtype == "float32" and b.images.device == "cpu"
        assert np.array_equal(np.from_dlpack(b.images), x.numpy())


def test_epochs_len_and_iteration(manifest):
    with shardkit.Loader(manifest, **BASE, epochs=3) as lo:
        assert len(lo) == 8          # 48 samples in batches of 6
        seen = []
        for _ in range(3):
            seen.append([(b.epoch, b.index) for b in lo])
        assert seen == [[(e, i) for i in range(8)] for e in range(3)]
        assert list(lo) == []        # all epochs done
        assert lo.stats()["batches"] == 24


def test_a_new_loop_after_a_break_starts_the_next_epoch(manifest):
    with shardkit.Loader(manifest, **BASE, epochs=2) as lo:
        for b in lo:
            if b.index == 2:
                break
        assert [(b.epoch, b.index) for b in lo] == [(1, i) for i in range(8)]


def test_drop_last_false_keeps_every_sample(data):
    src = os.path.join(data, "in.json")
    with shardkit.Loader(src, batch_size=7, image_size=16,
                         drop_last=False, dtype="uint8") as lo:
        n = sum(len(b.keys) for b in lo)
    assert n == 48
    with shardkit.Loader(src, batch_size=7, image_size=16) as lo:
        assert sum(len(b.keys) for b in lo) == 42
        assert lo.stats()["dropped"] == 6


def test_a_folder_with_a_manifest_says_which_it_read(data, manifest):
    """The note shardload prints: the folder's .tar files were read, and
    it also holds in.json. Given once as a warning; none for a manifest."""
    with pytest.warns(UserWarning, match="also holds in.json") as w:
        lo = shardkit.Loader(data, batch_size=7, image_size=16)
    with lo:
        assert len(w) == 1
        assert lo.note is not None and ".tar files" in lo.note
        assert sum(len(b.keys) for b in lo) == 42
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with shardkit.Loader(manifest, batch_size=7, image_size=16) as lo:
            assert lo.note is None


def test_rank_and_world_come_from_torchrun(manifest, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    want = shardload_keys(manifest, **BASE, rank=1, world=2)
    assert loader_lines(manifest, **BASE) == want
    monkeypatch.setenv("RANK", "x")
    with pytest.raises(ValueError, match="RANK='x' in the environment"):
        shardkit.Loader(manifest, **BASE)


# -- zero copy ---------------------------------------------------------------

def test_tensors_share_the_loader_slots(manifest):
    ptrs = set()
    with shardkit.Loader(manifest, **BASE, epochs=3, workers=2) as lo:
        ring = lo.ring
        for _ in range(3):
            for b in lo:
                x = torch.from_dlpack(b.images)
                n = np.from_dlpack(b.images)
                assert x.data_ptr() == b.images.data_ptr == n.ctypes.data
                y = torch.from_dlpack(b.labels)
                assert y.data_ptr() == b.labels.data_ptr
                # one memory: a write through torch shows in NumPy
                x.view(-1)[0] = 7.0
                assert n.flat[0] == 7.0
                ptrs.add(b.images.data_ptr)
        assert lo.stats()["kept"] == 0
    # 24 batches, all from the ring's slots
    assert 1 <= len(ptrs) <= ring


ALLOC_PROBE = textwrap.dedent("""
    import os, sys, torch, shardkit
    src, copy = sys.argv[1], sys.argv[2] == "copy"
    lo = shardkit.Loader(src, batch_size=6, image_size=96, epochs=40,
                         workers=2, dtype="float32")
    n = 0
    for e in range(40):
        for b in lo:
            x = torch.from_dlpack(b.images)
            if copy:
                x = x.clone()
            x.sum()
            n += 1
            if n == 16:
                os.write(2, b"STEADY\\n")
    os.write(2, b"DONE\\n")
    lo.close()
""")


def _batch_mmaps(manifest, mode):
    """Maps of one batch's size (its bytes rounded up to pages) made
    between the warm-up and the end of the loop."""
    batch_bytes = 6 * 3 * 96 * 96 * 4
    page = os.sysconf("SC_PAGE_SIZE")
    # A fixed mmap threshold: glibc then maps every block of 128 KiB or
    # more, where it would otherwise learn to reuse the heap.
    e = dict(os.environ, MALLOC_MMAP_THRESHOLD_="131072")
    log = subprocess.run(
        ["strace", "-f", "-e", "trace=mmap,write", "-o", "/dev/stderr",
         sys.executable, "-c", ALLOC_PROBE, manifest, mode],
        capture_output=True, text=True, timeout=300, env=e)
    assert log.returncode == 0, log.stderr[-2000:]
    lines = log.stderr.splitlines()
    start = next(i for i, ln in enumerate(lines) if "STEADY" in ln)
    end = next(i for i, ln in enumerate(lines) if "DONE" in ln)
    n = 0
    for ln in lines[start:end]:
        if "mmap(" not in ln or "MAP_ANONYMOUS" not in ln:
            continue
        size = int(ln.split("mmap(", 1)[1].split(",")[1])
        if batch_bytes <= size <= batch_bytes + 2 * page:
            n += 1
    return n


def test_no_allocation_of_a_batch_per_batch(manifest):
    if subprocess.run(["strace", "-V"], capture_output=True).returncode:
        pytest.skip("no strace")
    # 40 epochs of 8 batches: 304 batches after the warm-up
    assert _batch_mmaps(manifest, "view") == 0
    # the measure sees a copy per batch when there is one
    assert _batch_mmaps(manifest, "copy") >= 300


# -- back-pressure -----------------------------------------------------------

def test_holding_every_batch_neither_blocks_nor_corrupts(manifest):
    opts = dict(BASE, epochs=2, workers=2, ring=3, dtype="uint8",
                layout="NHWC")
    want = shardload_keys(manifest, **opts)
    held = []
    with shardkit.Loader(manifest, **opts) as lo:
        assert lo.ring == 3
        for _ in range(2):
            for b in lo:
                # as a training loop would keep them: tensors, not Arrays
                held.append((torch.from_dlpack(b.images),
                             torch.from_dlpack(b.labels), b.keys, b.epoch,
                             b.index))
        assert lo.stats()["kept"] >= 16 - 3
    got = []
    for x, y, keys, e, i in held:
        got += batch_lines(x, y, keys, e, i)
    assert got == want


def test_batches_outlive_their_loader(manifest):
    lo = shardkit.Loader(manifest, **BASE, ring=3, dtype="uint8",
                         layout="NHWC")
    b = next(iter(lo))
    before = batch_lines(*b, 0, 0)
    lo.close()
    del lo
    gc.collect()
    assert batch_lines(*b, 0, 0) == before


# -- resume ------------------------------------------------------------------

@pytest.mark.parametrize("stop", [3, 8, 11])
def test_state_dict_resumes_exactly(manifest, stop):
    opts = dict(BASE, epochs=2, workers=2, dtype="uint8", layout="NHWC")
    want = shardload_keys(manifest, **opts)
    got = []
    with shardkit.Loader(manifest, **opts) as lo:
        n = 0
        for _ in range(2):
            for b in lo:
                got += batch_lines(*b, b.epoch, b.index)
                n += 1
                if n == stop:
                    break
            if n == stop:
                break
        state = json.loads(json.dumps(lo.state_dict()))
    with shardkit.Loader(manifest, **opts) as lo:
        lo.load_state_dict(state)
        while True:
            batches = list(lo)
            if not batches:
                break
            for b in batches:
                got += batch_lines(*b, b.epoch, b.index)
            del batches
    assert got == want


def test_state_dict_of_another_run_is_refused(manifest):
    with shardkit.Loader(manifest, **BASE) as lo:
        st = lo.state_dict()
    st["seed"] = 12
    with shardkit.Loader(manifest, **BASE) as lo:
        with pytest.raises(ValueError, match="seed 12"):
            lo.load_state_dict(st)


# -- stats -------------------------------------------------------------------

def _keys(d, prefix=""):
    out = set()
    for k, v in d.items():
        out.add(prefix + k)
        if isinstance(v, dict):
            out |= _keys(v, prefix + k + ".")
    return out


def test_stats_are_shardload_bench_result(manifest):
    out = subprocess.run([env("SHARDLOAD"), "bench", manifest, "--batch", "6",
                          "--image-size", "32", "--json", "-"],
                         check=True, capture_output=True, text=True)
    result = json.loads(out.stdout)["result"]
    with shardkit.Loader(manifest, batch_size=6, image_size=32) as lo:
        n = sum(len(b.keys) for b in lo)
        st = lo.stats()
    assert _keys(st) - {"kept"} == _keys(result)
    for k in ("samples", "batches", "bytes", "sample_bytes", "skipped",
              "dropped", "batches_per_epoch", "unplanned",
              "mismatched_shards"):
        assert st[k] == result[k], k
    assert st["samples"] == n == 48
    assert st["bound"] in ("io", "decode", "consumer")
    assert st["memory_bound_bytes"] > 0 and st["wall_seconds"] > 0


# -- errors ------------------------------------------------------------------

def test_missing_shard_is_file_not_found(data):
    with pytest.raises(FileNotFoundError, match="no-such"):
        with shardkit.Loader(os.path.join(data, "no-such-{0..1}.tar"),
                             **BASE) as lo:
            list(lo)
    with pytest.raises(FileNotFoundError, match="nothing.json"):
        shardkit.Loader(os.path.join(data, "nothing.json"), **BASE)


def test_refusal_is_permission_error():
    url = env("SK_HTTP_URL") + "/private/in-{000000..000001}.tar"
    with pytest.raises(PermissionError, match="403"):
        with shardkit.Loader(url, **BASE) as lo:
            list(lo)


@pytest.mark.parametrize("kw,exc,msg", [
    (dict(batch_size=0), ValueError,
     "batch_size=0: not a whole number from 1 to 1048576"),
    (dict(batch_size="8"), TypeError, "batch_size='8'"),
    (dict(crop="big"), ValueError,
     "crop='big': not one of random-resized, center or none"),
    (dict(dtype="int8"), ValueError, "dtype='int8'"),
    (dict(layout="CHW"), ValueError, "layout='CHW'"),
    (dict(scale=(0.5, 0.1)), ValueError, "need 0 < A <= B <= 1"),
    (dict(rank=2, world=2), ValueError, "rank=2 is not below world=2"),
    (dict(ring=2), ValueError, "ring=2: not a whole number from 3 to 4096"),
    (dict(std=(1, 0, 1)), ValueError, "std: a component is 0"),
    (dict(crop="center", resize=10), ValueError,
     "resize=10 is smaller than image_size=32"),
    (dict(stall_timeout=0.5), ValueError, "stall_timeout=0.5"),
    (dict(device="tpu"), ValueError, "device='tpu'"),
    (dict(ahead=17), ValueError, "ahead=17: not a whole number from 0 to 16"),
    (dict(max_inflight=4096), ValueError, "max_inflight=4096"),
])
def test_bad_options(manifest, kw, exc, msg):
    opts = dict(BASE)
    opts.update(kw)
    with pytest.raises(exc, match=msg.replace("(", r"\(").replace(")",
                                                                  r"\)")):
        shardkit.Loader(manifest, **opts)


def test_strict_damage_is_format_error(tmp_path, data):
    # the first shard cut in the middle of a member
    src = os.path.join(data, "in-000000.tar")
    cut = tmp_path / "cut-000000.tar"
    with open(src, "rb") as f:
        cut.write_bytes(f.read()[: os.path.getsize(src) // 2 + 100])
    opts = dict(BASE, batch_size=2)
    with pytest.raises(shardkit.FormatError, match="cut-000000.tar"):
        with shardkit.Loader(str(cut), **opts, strict=True) as lo:
            list(lo)
    # without strict, the damage is skipped and counted
    with shardkit.Loader(str(cut), **opts) as lo:
        n = sum(len(b.keys) for b in lo)
        st = lo.stats()
    assert st["skipped_by_reason"]["damaged"] > 0 or n < 10


def test_network_give_up_is_connection_error():
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()           # nothing listens there now
    url = "http://127.0.0.1:%d/in-{000000..000001}.tar" % port
    t0 = time.monotonic()
    with pytest.raises(ConnectionError, match="127.0.0.1:%d" % port):
        with shardkit.Loader(url, **BASE, retry_time=1, attempts=2,
                             connect_timeout=1) as lo:
            list(lo)
    assert time.monotonic() - t0 < 30


def test_device_without_a_gpu_is_a_clear_error(manifest):
    try:
        lo = shardkit.Loader(manifest, **BASE, device="cuda:0")
    except shardkit.Error as e:
        assert "CUDA" in str(e)
    else:       # a machine with a GPU: the images live there
        with lo:
            b = next(iter(lo))
            assert b.images.device == "cuda:0"
            x = torch.from_dlpack(b.images)
            assert x.is_cuda and x.data_ptr() == b.images.data_ptr


# -- Ctrl-C, threads, fork ---------------------------------------------------

STALL_CHILD = textwrap.dedent("""
    import os, sys, time, shardkit
    tasks = lambda: len(os.listdir("/proc/self/task"))
    base = tasks()
    lo = shardkit.Loader(sys.argv[1], batch_size=6, image_size=32,
                         stall_timeout=600, retry_time=600)
    print("waiting", flush=True)
    try:
        for b in lo:
            pass
    except KeyboardInterrupt:
        t = time.monotonic()
        lo.close()
        # what is left: this thread and the fetch engine's
        print("interrupted", tasks() - base, "%.3f" % (time.monotonic() - t),
              flush=True)
        sys.exit(3)
""")


@contextlib.contextmanager
def _stalling_server(manifest_bytes):
    """An http server on 127.0.0.1 (its URL) that serves /in.json and never
    answers for a shard."""
    import socket
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    conns = []

    def serve(c):
        req = b""
        while b"\r\n\r\n" not in req:
            d = c.recv(4096)
            if not d:
                return
            req += d
        if b".json" in req.split(b"\r\n", 1)[0]:
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json"
                      b"\r\nContent-Length: %d\r\n\r\n"
                      % len(manifest_bytes) + manifest_bytes)
        # a shard: silence

    def accept():
        while True:
            try:
                c, _ = srv.accept()
            except OSError:
                return
            conns.append(c)
            threading.Thread(target=serve, args=(c,), daemon=True).start()
    threading.Thread(target=accept, daemon=True).start()
    try:
        yield "http://127.0.0.1:%d" % srv.getsockname()[1]
    finally:
        srv.close()
        for c in conns:
            c.close()


def _interrupt(code, arg, when):
    """Run code in a child, SIGINT it once it printed "waiting" and when
    seconds passed; (seconds to exit, stdout, stderr, exit status)."""
    p = subprocess.Popen([sys.executable, "-c", CHILD_SIGINT + code, arg],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    try:
        ready = [None]

        def read():
            ready[0] = p.stdout.readline()
        th = threading.Thread(target=read, daemon=True)
        th.start()
        th.join(60)
        assert ready[0] == "waiting\n", "the child did not start: %r" % (
            ready[0],)
        time.sleep(when)
        assert p.poll() is None, p.stderr.read()
        t0 = time.monotonic()
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=30)
        return time.monotonic() - t0, out, err, p.returncode
    finally:
        p.kill()
        p.wait()


def test_ctrl_c_in_a_wait_ends_at_once_with_no_thread_left(manifest):
    with open(manifest, "rb") as f:
        data = f.read()
    with _stalling_server(data) as base:
        took, out, err, rc = _interrupt(STALL_CHILD, base + "/in.json",
                                        1.0)
    assert rc == 3, err
    assert took < 1.0, "took %.2f s" % took
    word, left, _ = out.split()
    assert word == "interrupted"
    assert int(left) <= 1, "threads left: %s" % left


OPEN_CHILD = textwrap.dedent("""
    import sys, shardkit
    print("waiting", flush=True)
    try:
        shardkit.Loader(sys.argv[1], batch_size=6, stall_timeout=600,
                        retry_time=600)
    except KeyboardInterrupt:
        sys.exit(3)
""")


def test_ctrl_c_while_the_manifest_stalls():
    with _stalling_server(b"") as base:
        took, out, err, rc = _interrupt(OPEN_CHILD, base + "/x/in.tar",
                                        1.0)
    assert rc == 3, err
    assert took < 1.0, "took %.2f s" % took


def test_gil_is_released_while_waiting(manifest):
    # next() waits on a server that never answers; another thread counts
    # meanwhile, then interrupts the wait as Ctrl-C would
    with open(manifest, "rb") as f:
        data = f.read()
    count = [0]

    def spin():
        t = time.monotonic() + 0.5
        while time.monotonic() < t:
            count[0] += 1
        os.kill(os.getpid(), signal.SIGINT)
    with _stalling_server(data) as base, \
            shardkit.Loader(base + "/in.json", **BASE,
                            stall_timeout=600) as lo:
        th = threading.Thread(target=spin)
        th.start()
        with pytest.raises(KeyboardInterrupt):
            next(iter(lo))
        th.join()
    assert count[0] > 10000, count[0]


def test_one_thread_at_a_time(manifest):
    with open(manifest, "rb") as f:
        data = f.read()
    with _stalling_server(data) as base, \
            shardkit.Loader(base + "/in.json", **BASE,
                            stall_timeout=60) as lo:
        errors, seen = [], []

        def other():
            time.sleep(0.3)             # the main thread waits in next()
            try:
                for call in (lambda: next(iter(lo)), lo.close):
                    try:
                        call()
                    except RuntimeError as e:
                        errors.append(str(e))
                seen.append(lo.stats()["batches"])  # stats: any time
            finally:
                os.kill(os.getpid(), signal.SIGINT)
        th = threading.Thread(target=other)
        th.start()
        with pytest.raises(KeyboardInterrupt):
            next(iter(lo))
        th.join()
    assert len(errors) == 2 and all("another thread" in e for e in errors)
    assert seen == [0]


FORK_CHILD = textwrap.dedent("""
    import os, sys, shardkit
    lo = shardkit.Loader(sys.argv[1], batch_size=6, image_size=32)
    next(iter(lo))
    pid = os.fork()
    if pid == 0:
        try:
            next(iter(lo))
        except shardkit.Error as e:
            ok = "fork()" in str(e)
            os._exit(0 if ok else 5)
        os._exit(6)
    _, status = os.waitpid(pid, 0)
    print(os.WEXITSTATUS(status))
""")


def test_a_loader_used_after_fork_is_refused(manifest):
    out = subprocess.run([sys.executable, "-c", FORK_CHILD, manifest],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "0"


FORK_REMOTE_CHILD = textwrap.dedent("""
    import os, sys, shardkit
    with shardkit.Loader(sys.argv[1], batch_size=6, image_size=32) as lo:
        next(iter(lo))
    pid = os.fork()
    if pid == 0:
        try:
            with shardkit.Loader(sys.argv[1], batch_size=6,
                                 image_size=32) as lo:
                next(iter(lo))
        except shardkit.Error as e:
            os._exit(0 if "fork()" in str(e) else 5)
        os._exit(6)
    _, status = os.waitpid(pid, 0)
    print(os.WEXITSTATUS(status))
""")


def test_remote_reads_in_a_forked_child_fail_clearly():
    url = env("SK_HTTP_URL") + "/s/in.json"
    out = subprocess.run([sys.executable, "-c", FORK_REMOTE_CHILD, url],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "0"


# -- memory ------------------------------------------------------------------

def _rss():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def test_memory_stays_within_the_bound_over_a_long_run(manifest):
    # torch's own threads and buffers come first, outside the measure
    torch.ones(6, 3, 128, 128).sum()
    gc.collect()
    base = _rss()
    peak = base
    at = {}
    with shardkit.Loader(manifest, batch_size=6, image_size=128, epochs=40,
                         shuffle=32, workers=2) as lo:
        for e in range(40):
            for b in lo:
                torch.from_dlpack(b.images).sum()
                peak = max(peak, _rss())
            at[e] = _rss()
        bound = lo.stats()["memory_bound_bytes"]
        assert lo.stats()["batches"] == 320
    # The bound leaves out thread stacks, the decoders' state and the
    # allocator's overhead (shardkit(3), MEMORY): 16 MiB for those.
    assert peak - base <= bound + (16 << 20), (peak - base, bound)
    # The read-ahead fills within the first epochs (64 MiB of prefetch
    # over a 12 MB data set); after that nothing grows.
    assert at[39] - at[19] <= 4 << 20, (at[19], at[39])


# -- the verdict -------------------------------------------------------------

def test_verdict_follows_shardtrains_rule():
    v = shardkit.verdict(3.0, 10.0, 1000, loader_ips=80, compute_ips=100)
    assert v.verdict == "input-bound"
    assert "data wait 30.0% of step time" in v.reason
    assert "loader alone 80.0 img/s < compute alone 100 img/s" in v.reason
    v = shardkit.verdict(0.1, 10.0, 1000, loader_ips=500, compute_ips=100)
    assert v.verdict == "compute-bound" and v.images_per_second == 100
    v = shardkit.verdict(1.0, 10.0, 1000)
    assert v.verdict == "balanced" and "ceilings not measured" in v.reason
    with pytest.raises(ValueError):
        shardkit.verdict(2.0, 1.0, 10)


def test_meter_times_a_loop(manifest):
    with shardkit.Loader(manifest, **BASE, epochs=1) as lo:
        m = shardkit.Meter(warmup=1)
        for b in m.iterate(lo):
            time.sleep(0.02)        # a "step" the loader easily outruns
        v = m.verdict(loader_ips=shardkit.measure_loader(
            manifest, **BASE, batches=4), compute_ips=6 / 0.02)
    assert m.steps == 7
    assert v.verdict == "compute-bound", str(v)
    assert v.wait_share < 0.05
