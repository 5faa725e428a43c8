"""The sandbox executor: a warm zygote that forks one fresh, isolated child per test.

This file is a standalone script that imports only the standard library, so the same file runs
on the host (`python3 executor.py` inside `unshare`, see backends.py) and inside the docker
sandbox image (mounted read-only at /opt/rlrun/executor.py). The judge (judge.py) drives it over
its stdin/stdout with length-prefixed JSON frames: a 4-byte big-endian length, then UTF-8 JSON.

Requests and their replies:

- `{"op": "init", "uid", "gid", "isolate_fs", "work_root", "fs_label", "seccomp", "nproc",
  "nofile", "fsize_mb", "tmpfs_mb", "output_limit_bytes"}` -> `{"ok", "pid1", "uid", "fs",
  "seccomp", "python"}`. Sets up the slot once. With `isolate_fs` (root inside a fresh mount
  namespace) it builds a minimal read-only root (system directories and the Python prefix
  only; the host's data, home and repo directories are not visible), mounts a fresh /proc and
  a size-capped tmpfs for work directories, and chroots into it; otherwise work directories go
  under `work_root`. It then loads the zygote-wide seccomp deny-list.
- `{"op": "run", "tests": [test...], "stop_on_abnormal"}` with `"lang": "python"` and `"code"`,
  or `"lang": "binary"` and `"binary"` (a hash stored by "compile" or "put_binary") ->
  `{"ok", "results": [result...]}`, one result per test, run one after another (with
  `stop_on_abnormal`, up to the first test that did not exit with status 0), or
  `{"ok": false, "missing_binary"}`. A test is `{"mode": "stdio"|"call"|"harness", "stdin",
  "args", "fn_name", "harness", "entry_point", "call_check", "time_limit_s",
  "memory_limit_mb"}`. A result carries `exit_code`/`signal`, `wall_s`, `cpu_s`, `maxrss_kb`,
  the capped `stdout` and the tail of `stderr`, `timed_out`, `output_exceeded`, `ready` (the
  child got through our setup), the child's result `frames`, `frame_error`, and `completed`
  (the harness returned normally, proven by the per-run nonce).
- `{"op": "compile", "hash", "source", "argv", "time_limit_s", "memory_limit_mb",
  "return_binary"}` -> `{"ok", "compiled", "stderr", "timed_out", "binary_b64"}`: runs the
  compiler in a child under the same isolation and keeps the binary (a memfd) under `hash`.
- `{"op": "put_binary", "hash", "binary_b64"}` -> `{"ok"}`.
- `{"op": "ping"}` -> `{"ok", "pid1"}`.

The executor never receives expected outputs: stdout, return values and harness check values
go back to the judge, which compares them. Everything a child can forge (its stdout, its result
frames) can only make its own verdict worse unless it also knows the expected values.

The child, per test: new session and process group; stdin from a memfd holding the input;
stdout/stderr/result pipes read by the zygote with caps; all other descriptors closed (in
particular the zygote's request and reply pipes); a private work directory; a non-root uid;
rlimits (CPU, AS, NPROC, FSIZE, NOFILE); a per-test seccomp filter on top; then `exec` of the
compiled program (Python, in the forked interpreter: no interpreter start) or `execve` of the
binary. No supplementary groups, CORE=0 and argv it inherits from the zygote, which sets them
once at init. The zygote kills the whole process group at the wall-clock limit and, when it is
PID 1 of its own PID namespace, every process left in it after each test.

What a test costs is mostly the fork: copying the page tables of the zygote's memory, then a
copy-on-write fault for every page the zygote or the child writes afterwards. So the zygote is
kept small (the process backend runs it from cached bytecode) and does little between forks,
and a child does little before the program runs.
"""

import _random
import base64
import builtins
import ctypes
import errno
import functools
import gc
import io
import json
import os
import resource
import select
import signal
import struct
import sys
import time
import traceback

# Modules solutions and harnesses commonly import, loaded once here so a child does not pay
# for them; each one also makes every fork a little dearer, so the list stays short.
PRELOAD = (
    "array", "bisect", "collections", "copy", "functools", "heapq", "itertools", "math",
    "operator", "random", "re", "string", "typing",
)

WORK = "/sandbox"  # work directories inside the minimal root (isolate_fs)
RESULT_FD = 3  # the child's pipe for result frames (return values, harness checks, done)
EXEC_FD = 4  # a binary child's memfd of the program, close-on-exec
NONCE_FD = 4  # the child's pipe holding the per-run nonce, read only after the harness returned
MAX_FRAME = 1 << 30
# Written by a child's setup code just before the program starts (see run_one).
READY_FRAME = struct.pack(">I", len(b'{"k":"ready"}')) + b'{"k":"ready"}'

SAFE_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
            "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "0"}


# ---------------------------------------------------------------------------------------------
# Plain-data encoding shared with the judge (which imports these two functions from here).

class NotPlainData(TypeError):
    """A value that is not built from exact built-in plain types."""


def encode_plain(value, depth=0):
    """JSON-ready tree of `value`; exact types only, so a subclass or custom object is refused."""
    if depth > 100:
        raise NotPlainData("nesting deeper than 100")
    t = type(value)
    if value is None or t is bool or t is int or t is float or t is str:
        return value
    if t is list:
        return [encode_plain(v, depth + 1) for v in value]
    if t is tuple:
        return {"t": [encode_plain(v, depth + 1) for v in value]}
    if t is dict:
        return {"d": [[encode_plain(k, depth + 1), encode_plain(v, depth + 1)]
                      for k, v in value.items()]}
    if t is set or t is frozenset:
        return {"s" if t is set else "f": [encode_plain(v, depth + 1) for v in value]}
    if t is bytes:
        return {"b": value.hex()}
    raise NotPlainData(f"a value of type {t.__name__} is not plain data")


def decode_plain(tree):
    """Inverse of `encode_plain`: fresh objects of exact built-in types."""
    t = type(tree)
    if tree is None or t is bool or t is int or t is float or t is str:
        return tree
    if t is list:
        return [decode_plain(v) for v in tree]
    if t is dict and len(tree) == 1:
        (tag, body), = tree.items()
        if tag == "t":
            return tuple(decode_plain(v) for v in body)
        if tag == "d":
            return {decode_plain(k): decode_plain(v) for k, v in body}
        if tag == "s":
            return {decode_plain(v) for v in body}
        if tag == "f":
            return frozenset(decode_plain(v) for v in body)
        if tag == "b":
            return bytes.fromhex(body)
    raise NotPlainData(f"malformed plain-data tree: {str(tree)[:80]}")


# ---------------------------------------------------------------------------------------------
# Framing.

# The C encoder and scanner behind json.dumps and json.loads, built once here: a forked child's
# first json.dumps builds an encoder in Python and so writes to (and copies) dozens of the
# zygote's pages, a good part of what a short test costs; calling these directly touches few.
_ENCODE = json.encoder.c_make_encoder(None, None, json.encoder.encode_basestring_ascii, None,
                                      ":", ",", False, False, True)
_SCAN = json.scanner.c_make_scanner(json.JSONDecoder())


def dump_json(obj):
    """`json.dumps(obj, separators=(",", ":"))` for acyclic plain data."""
    return "".join(_ENCODE(obj, 0))


def load_json(text):
    """`json.loads(text)` for text that is one JSON value; ValueError otherwise."""
    try:
        value, end = _SCAN(text, 0)
    except StopIteration:
        raise ValueError("not a JSON value") from None
    if end != len(text):
        raise ValueError("data after the JSON value")
    return value


def read_exact(fd, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = os.read(fd, n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def send_frame(fd, obj):
    data = dump_json(obj).encode("utf-8", "surrogateescape")
    write_all(fd, struct.pack(">I", len(data)) + data)


def recv_frame(fd):
    head = read_exact(fd, 4)
    if head is None:
        return None
    (n,) = struct.unpack(">I", head)
    if n > MAX_FRAME:
        raise ValueError(f"frame of {n} bytes is over the limit")
    body = read_exact(fd, n)
    if body is None:
        return None
    return load_json(body.decode("utf-8", "surrogateescape"))


def parse_frames(data):
    """Result frames a child wrote; malformed data is the child's fault, reported as such."""
    frames, pos = [], 0
    while pos + 4 <= len(data):
        (n,) = struct.unpack(">I", data[pos:pos + 4])
        if pos + 4 + n > len(data):
            return frames, "truncated result frame"
        try:
            frames.append(load_json(data[pos + 4:pos + 4 + n].decode("utf-8", "surrogateescape")))
        except ValueError:
            return frames, "malformed result frame"
        pos += 4 + n
    return frames, ("trailing bytes on the result pipe" if pos != len(data) else "")


# ---------------------------------------------------------------------------------------------
# Kernel facilities through ctypes.

LIBC = ctypes.CDLL(None, use_errno=True)
PR_SET_NO_NEW_PRIVS = 38
PR_SET_DUMPABLE = 4
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18

# x86_64 syscall numbers neither the zygote (after init) nor a test needs, and an attacker
# would want. The zygote loads this list once; every child inherits it.
X86_64_DENY = {
    "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "mount": 165,
    "umount2": 166, "pivot_root": 155, "chroot": 161, "unshare": 272, "setns": 308,
    "swapon": 167, "swapoff": 168, "reboot": 169, "sethostname": 170, "setdomainname": 171,
    "init_module": 175, "finit_module": 313, "delete_module": 176, "kexec_load": 246,
    "kexec_file_load": 320, "acct": 163, "quotactl": 179, "settimeofday": 164,
    "clock_settime": 227, "adjtimex": 159, "bpf": 321, "perf_event_open": 298,
    "userfaultfd": 323, "keyctl": 250, "add_key": 248, "request_key": 249,
    "io_uring_setup": 425, "open_by_handle_at": 304, "name_to_handle_at": 303,
    "fsopen": 430, "fsmount": 432, "move_mount": 429, "open_tree": 428, "mount_setattr": 442,
    "personality": 135, "lookup_dcookie": 212, "iopl": 172, "ioperm": 173, "syslog": 103,
    "vhangup": 153, "nfsservctl": 180,
}
# Denied to tests: leaving the process group would let a process dodge the group kill. As PID 1
# the zygote adds these to its own filter (it never needs them after init); otherwise each
# child adds them after making its own session, with execve for Python tests.
X86_64_CHILD_DENY = {"setsid": 112, "setpgid": 109}
X86_64_EXEC = {"execve": 59, "execveat": 322}
X86_64_SOCKET = 41
AUDIT_ARCH_X86_64 = 0xC000003E
SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_RET_ERRNO = 0x00050000
SECCOMP_RET_KILL_PROCESS = 0x80000000


class SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte),
                ("k", ctypes.c_uint)]


class SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(SockFilter))]


def build_seccomp(denied, sockets):
    """A BPF deny-list: EPERM for `denied` syscalls and x32 calls; with `sockets`, also EPERM
    for socket() of any family but AF_UNIX (the network namespace already has no route)."""
    ld_w, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06
    denied = sorted(set(denied))
    n = len(denied)
    # Index: 0-2 arch check, 3 load nr, 4 x32 check, 5-7 socket(AF_UNIX only), 8.. deny list,
    # 8+n allow, 9+n EPERM. A jump offset counts from the next instruction.
    prog = [
        (ld_w, 0, 0, 4),
        (jeq, 1, 0, AUDIT_ARCH_X86_64),
        (ret, 0, 0, SECCOMP_RET_KILL_PROCESS),
        (ld_w, 0, 0, 0),
        (jge, n + 4, 0, 0x40000000),
        (jeq, 0, 2, X86_64_SOCKET if sockets else 0xFFFFFFFF),
        (ld_w, 0, 0, 16),
        (jeq, n, n + 1, 1),
    ]
    prog += [(jeq, n - i, 0, nr) for i, nr in enumerate(denied)]
    prog += [(ret, 0, 0, SECCOMP_RET_ALLOW), (ret, 0, 0, SECCOMP_RET_ERRNO | errno.EPERM)]
    arr = (SockFilter * len(prog))(*[SockFilter(*op) for op in prog])
    return arr, SockFprog(len(prog), arr)


def load_seccomp(fprog):
    if LIBC.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
    if LIBC.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP)")


def mount(source, target, fstype, flags, data=None):
    rc = LIBC.mount(source.encode() if source else None, target.encode(),
                    fstype.encode() if fstype else None, ctypes.c_ulong(flags),
                    data.encode() if data else None)
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {source} on {target}: {os.strerror(err)}")


# ---------------------------------------------------------------------------------------------
# Slot setup.

class Slot:
    def __init__(self, reseed_random):
        self.reseed_random = reseed_random  # called before every fork, see preload()
        self.uid = None
        self.gid = None
        self.pid1 = os.getpid() == 1
        self.work_root = None
        self.sweep = []
        self.keep = set()  # paths the sweep spares (a compile's directory while it runs)
        # Compiled binaries as close-on-exec memfds: no path a test could list, read or
        # overwrite, and nothing on the work tmpfs.
        self.binaries = {}
        self.seccomp_py = None
        self.seccomp_bin = None
        self.seccomp_state = "off"
        self.nproc = 64
        self.nofile = 64
        self.fsize = 64 << 20
        self.output_limit = 8 << 20
        self.counter = 0
        self.base_vm = 0
        self.pristine_builtins = tuple(builtins.__dict__.items())
        self.codes = {}
        # A child's std streams, built once: they wrap fds 0-2, which a child points at its
        # test's pipes before first use, so the zygote's own copies are never touched.
        self.streams = (
            io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)),
                             encoding="utf-8", errors="replace"),
            io.TextIOWrapper(io.BufferedWriter(io.FileIO(1, "w", closefd=False), 1 << 16),
                             encoding="utf-8", errors="surrogateescape", write_through=False),
            io.TextIOWrapper(io.BufferedWriter(io.FileIO(2, "w", closefd=False), 1 << 12),
                             encoding="utf-8", errors="replace", write_through=False),
        )

    def init(self, req):
        self.uid = req.get("uid")
        self.gid = req.get("gid", self.uid)
        self.nproc = int(req.get("nproc", 64))
        self.nofile = int(req.get("nofile", 64))
        self.fsize = int(req.get("fsize_mb", 64)) << 20
        self.output_limit = int(req.get("output_limit_bytes", 8 << 20))
        fs = "shared host filesystem (no mount namespace)"
        if req.get("isolate_fs"):
            build_root(int(req.get("tmpfs_mb", 256)))
            self.work_root = WORK
            fs = "minimal read-only root, private tmpfs work directories"
        else:
            self.work_root = req.get("work_root") or "/work"
            fs = req.get("fs_label") or fs
        # Emptied after every test: whatever a test left where it could write. Shared scratch
        # directories only count when this slot owns them (PID 1 of its own namespace). In the
        # minimal root a test can write to its own work directory only (the tmpfs above it is
        # root's, mode 0711), which is removed after each test anyway.
        self.sweep = []
        if not req.get("isolate_fs"):
            self.sweep.append(self.work_root)
            if self.pid1:
                self.sweep += [d for d in ("/dev/shm", "/tmp", "/var/tmp")
                               if os.path.isdir(d) and os.access(d, os.W_OK)]
        if req.get("seccomp", True):
            if os.uname().machine == "x86_64":
                if self.pid1:
                    # `kill(-1)` as PID 1 already reaches every process a test starts, so a
                    # child needs no session of its own and one filter loaded here, before
                    # any fork, covers all tests at no per-test cost.
                    load_seccomp(build_seccomp([*X86_64_DENY.values(),
                                                *X86_64_CHILD_DENY.values()], sockets=True)[1])
                else:
                    load_seccomp(build_seccomp(X86_64_DENY.values(), sockets=True)[1])
                    self.seccomp_py = build_seccomp([*X86_64_CHILD_DENY.values(),
                                                     *X86_64_EXEC.values()], sockets=False)
                    self.seccomp_bin = build_seccomp(X86_64_CHILD_DENY.values(), sockets=False)
                self.seccomp_state = "deny-list"
            else:
                self.seccomp_state = f"unavailable: no syscall table for {os.uname().machine}"
        os.environ.clear()
        os.environ.update(SAFE_ENV, HOME=".", TMPDIR=".")
        with open("/proc/self/statm") as f:
            self.base_vm = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        if self.uid is not None and os.getuid() != 0:
            self.uid = None
        # Set once here for every child: no supplementary groups (root's would survive the
        # switch to the test uid), no core dumps, and the argv a program sees.
        if self.uid is not None:
            os.setgroups([])
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        sys.argv = ["main.py"]
        return {"ok": True, "pid1": self.pid1, "uid": self.uid, "fs": fs,
                "seccomp": self.seccomp_state, "python": sys.version.split()[0]}


def build_root(tmpfs_mb):
    """Chroot into a minimal root: system dirs and the Python prefix read-only, tmpfs /work."""
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755")
    root = "/tmp/root"
    os.makedirs(root)
    # The interpreter's standard library is all a child can still import; this script and a
    # virtualenv (sys.prefix) are loaded already and need not be visible.
    binds = ["/usr", "/etc", sys.base_prefix]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            os.symlink(os.readlink(top), root + top)
        elif os.path.isdir(top):
            binds.append(top)
    done = []
    for src in binds:
        src = os.path.realpath(src)
        if any(src == d or src.startswith(d + "/") for d in done) or not os.path.isdir(src):
            continue
        dst = root + src
        os.makedirs(dst, exist_ok=True)
        mount(src, dst, None, MS_BIND | MS_REC)
        mount(None, dst, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
        done.append(src)
    os.makedirs(root + "/dev")
    for dev in ("null", "zero", "random", "urandom"):
        open(root + "/dev/" + dev, "w").close()
        mount("/dev/" + dev, root + "/dev/" + dev, None, MS_BIND)
    os.makedirs(root + "/proc")
    mount("proc", root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    os.makedirs(root + WORK)
    mount("tmpfs", root + WORK, "tmpfs", MS_NOSUID | MS_NODEV,
          f"size={tmpfs_mb}m,mode=0711")
    os.chmod(root, 0o755)
    os.chroot(root)
    os.chdir("/")


# ---------------------------------------------------------------------------------------------
# The child.

def set_limits(slot, cpu_s, as_bytes, nproc):
    soft = max(1, int(cpu_s + 0.999))
    resource.setrlimit(resource.RLIMIT_CPU, (soft, soft + 1))
    if as_bytes:
        resource.setrlimit(resource.RLIMIT_AS, (as_bytes, as_bytes))
    resource.setrlimit(resource.RLIMIT_FSIZE, (slot.fsize, slot.fsize))
    resource.setrlimit(resource.RLIMIT_NOFILE, (slot.nofile, slot.nofile))
    if nproc > 0:
        resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))


def drop_privileges(slot, workdir):
    os.chdir(workdir)
    if slot.uid is not None:
        os.setgid(slot.gid)
        os.setuid(slot.uid)


def plain_copy(value):
    """A fresh plain-data copy of `value`, so harness comparisons never call program code."""
    if type(value) is type and value.__module__ == "builtins":
        return value
    return decode_plain(encode_plain(value))


def emit(obj, dumps=dump_json, pack=struct.pack, write=os.write):
    """Send one result frame from a Python child. The functions are bound here, in the zygote,
    so a program that replaces dump_json or os.write cannot change what is sent."""
    data = dumps(obj).encode("utf-8", "surrogateescape")
    view = memoryview(pack(">I", len(data)) + data)
    while view:
        view = view[write(RESULT_FD, view):]


def child_python(slot, code, test, workdir, fds):
    """Runs in the forked child; never returns."""
    # Bound before the program runs, which may replace these names where they are defined.
    exit_now, send = os._exit, emit
    status = 1
    out = err = None
    try:
        if not slot.pid1:
            os.setsid()
        stdin_fd, out_w, err_w, res_w, nonce_r = fds
        os.dup2(stdin_fd, 0)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        os.dup2(res_w, RESULT_FD)
        last = RESULT_FD
        if nonce_r is not None:
            os.dup2(nonce_r, NONCE_FD)
            last = NONCE_FD
        os.closerange(last + 1, 1 << 16)
        drop_privileges(slot, workdir)
        mem = int(test.get("memory_limit_mb", 512)) << 20
        set_limits(slot, float(test.get("time_limit_s", 2.0)), slot.base_vm + mem, slot.nproc)
        if slot.seccomp_py is not None:
            load_seccomp(slot.seccomp_py[1])
        sys.stdin, out, err = slot.streams
        sys.stdout, sys.stderr = out, err
        sys.setrecursionlimit(100000)
        os.write(RESULT_FD, READY_FRAME)
        status = run_python(slot, code, test, send)
    except SystemExit as e:
        status = 0 if e.code in (None, 0) else (e.code if isinstance(e.code, int) else 1)
        if test.get("mode") != "stdio":
            status = status or 1
    except BaseException as e:  # noqa: B036 - everything the program raises is its outcome
        status = 1
        try:
            send({"k": "exc", "t": type(e).__name__})
            traceback.print_exc(limit=8, file=err or sys.__stderr__)
        except BaseException:  # noqa: B036
            pass
    for stream in (out, err, sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except BaseException:  # noqa: B036 - a broken stream must not change the exit path
            pass
    exit_now(status & 0xFF if isinstance(status, int) else 1)


def run_python(slot, code, test, emit):
    mode = test.get("mode", "stdio")
    g = {"__name__": "__main__" if mode == "stdio" else "solution", "__builtins__": builtins}
    exec(code if not isinstance(code, str) else compile(code, "main.py", "exec"), g)
    if mode == "stdio":
        return 0
    if mode == "call":
        fn_name = test["fn_name"]
        fn = g.get(fn_name)
        if fn is None and "Solution" in g:
            fn = getattr(g["Solution"](), fn_name)
        if fn is None:
            raise NameError(f"the program defines no function {fn_name!r}")
        args = decode_plain(test.get("args", []))
        result = fn(*args)
        try:
            value = encode_plain(result)
        except NotPlainData as e:
            emit({"k": "notplain", "m": str(e)})
            return 0
        emit({"k": "ret", "v": value})
        return 0
    return run_harness(slot, g, test, emit)


def run_harness(slot, g, test, emit):
    pristine = dict(slot.pristine_builtins)
    h = {k: v for k, v in g.items() if k not in pristine and not k.startswith("__rlrun")}

    def site(i, value):
        try:
            emit({"k": "site", "i": i, "v": encode_plain(value)})
        except NotPlainData as e:
            emit({"k": "site", "i": i, "np": str(e)})

    def plain(value):
        return plain_copy(value)

    h.update(__builtins__=pristine, __name__="__main__", __rlrun_site=site, __rlrun_plain=plain)
    harness = test["harness_code"]
    exec(harness if not isinstance(harness, str) else compile(harness, "<harness>", "exec"), h)
    entry = test.get("entry_point")
    if test.get("call_check"):
        candidate = g.get(entry)
        if candidate is None:
            raise NameError(f"the program defines no function {entry!r}")
        h["check"](candidate)
    nonce = os.read(NONCE_FD, 64)
    emit({"k": "done", "n": nonce.decode("ascii", "replace")})
    return 0


def child_exec(slot, program, argv, workdir, fds, limits, use_seccomp):
    """Runs in the forked child: setup, then execve of `program` (a path or a memfd)."""
    try:
        if not slot.pid1:
            os.setsid()
        stdin_fd, out_w, err_w, res_w, nonce_r = fds
        os.dup2(stdin_fd, 0)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        # The result pipe is close-on-exec: the started program cannot write frames.
        os.dup2(res_w, RESULT_FD, inheritable=False)
        if isinstance(program, int):
            os.dup2(program, EXEC_FD, inheritable=False)
            program = EXEC_FD
        os.closerange(EXEC_FD + 1, 1 << 16)
        drop_privileges(slot, workdir)
        set_limits(slot, *limits)
        if use_seccomp and slot.seccomp_bin is not None:
            load_seccomp(slot.seccomp_bin[1])
        env = dict(SAFE_ENV, HOME=workdir, TMPDIR=workdir)
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.write(RESULT_FD, READY_FRAME)
        os.execve(program, argv, env)
    except BaseException as e:  # noqa: B036
        try:
            send_frame(RESULT_FD, {"k": "execfail", "m": f"{type(e).__name__}: {e}"})
        finally:
            os._exit(127)


# ---------------------------------------------------------------------------------------------
# The zygote side of one test.

def run_one(slot, start_child, stdin_data, wall_s, frames=False, nonce=False):
    """Fork one child for one test and supervise it (`frames`: see supervise); with `nonce`, the
    child gets a pipe (fd 4) holding a per-run secret that the harness sends back to prove it
    completed."""
    slot.counter += 1
    workdir = f"{slot.work_root}/t{slot.counter}"
    os.mkdir(workdir, 0o700)
    if slot.uid is not None:
        os.chown(workdir, slot.uid, slot.gid)
    stdin_fd = os.memfd_create("stdin", os.MFD_CLOEXEC)
    if stdin_data:
        write_all(stdin_fd, stdin_data)
        os.lseek(stdin_fd, 0, os.SEEK_SET)
    out_r, out_w = os.pipe2(os.O_CLOEXEC)
    err_r, err_w = os.pipe2(os.O_CLOEXEC)
    res_r, res_w = os.pipe2(os.O_CLOEXEC)
    nonce_r, nonce_w = os.pipe2(os.O_CLOEXEC) if nonce else (None, None)
    slot.reseed_random()
    t0 = time.monotonic()
    pid = os.fork()
    if pid == 0:
        try:
            start_child(workdir, (stdin_fd, out_w, err_w, res_w, nonce_r))
        finally:
            os._exit(127)
    for fd in (stdin_fd, out_w, err_w, res_w):
        os.close(fd)
    secret = ""
    if nonce:
        # The nonce exists only after the fork, so no copy of it is in the child's memory; the
        # read end stays open here until it is written, so a child that exited cannot break it.
        secret = os.urandom(16).hex()
        os.write(nonce_w, secret.encode())
        os.close(nonce_r)
    try:
        result = supervise(slot, pid, (out_r, err_r, res_r), t0, wall_s, frames)
    finally:
        for fd in (out_r, err_r, res_r):
            os.close(fd)
        if nonce:
            os.close(nonce_w)
        cleanup_dir(workdir)
        for d in slot.sweep:
            sweep_dir(d, slot.keep)
    res = result.pop("res")
    # The setup code writes "ready" before any program code runs, so a child without it died
    # in our code (a sandbox fault) and one with it cannot pretend otherwise.
    result["ready"] = res.startswith(READY_FRAME)
    frames, bad = parse_frames(res[len(READY_FRAME):] if result["ready"] else res)
    result["start_error"] = next((fr.get("m", "") for fr in frames[:1]
                                  if isinstance(fr, dict) and fr.get("k") == "execfail"), "")
    done = [fr for fr in frames if isinstance(fr, dict) and fr.get("k") == "done"]
    result["frames"] = [fr for fr in frames if not (isinstance(fr, dict) and fr.get("k") == "done")]
    result["frame_error"] = bad
    result["completed"] = nonce and len(done) == 1 and done[0].get("n") == secret
    return result


def supervise(slot, pid, fds, t0, wall_s, frames):
    """Read the child's pipes (capped) until it exits and they close, or a limit is hit; then
    kill everything the test started and reap it.

    Without `frames` (a stdio or binary test) the result pipe carries only our few-byte setup
    frames, so it is read once everything is dead instead of waking the zygote while the test
    runs; whatever more a program writes there can only stall the program itself."""
    out_r, err_r, res_r = fds
    bufs = {out_r: bytearray(), err_r: bytearray(), res_r: bytearray()}
    caps = {out_r: slot.output_limit, err_r: 1 << 16, res_r: slot.output_limit}
    pidfd = os.pidfd_open(pid)
    poller = select.poll()
    watched = (out_r, err_r, res_r) if frames else (out_r, err_r)
    for fd in (*watched, pidfd):
        poller.register(fd, select.POLLIN)
    open_pipes = len(watched)
    # Until the child exits, the wall-clock limit; after, a short grace for its pipes to close
    # (everything else the test started is killed at that moment).
    until = t0 + wall_s
    timed_out = exceeded = exited = False
    try:
        while (open_pipes or not exited) and not exceeded:
            left = until - time.monotonic()
            if left <= 0:
                timed_out = not exited
                break
            # Pipes are blocking: poll only reports one with data or at EOF, so a read returns.
            for fd, _ in poller.poll(int(left * 1000) + 1):
                if fd == pidfd:
                    poller.unregister(pidfd)
                    exited = True
                    kill_rest(slot, pid)
                    until = time.monotonic() + 0.2
                    continue
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    poller.unregister(fd)
                    open_pipes -= 1
                    continue
                buf = bufs[fd]
                room = caps[fd] - len(buf)
                if len(chunk) > room:
                    buf += chunk[:room]
                    exceeded = exceeded or fd != err_r
                else:
                    buf += chunk
    finally:
        os.close(pidfd)
        if not exited:
            kill_rest(slot, pid)
    _, status, ru = os.wait4(pid, 0)
    wall = time.monotonic() - t0
    reap_orphans()
    if not frames:
        # Everything the test started is dead or dying: take what the pipe holds, never wait.
        os.set_blocking(res_r, False)
        res = bufs[res_r]
        try:
            while chunk := os.read(res_r, 1 << 16):
                res += chunk
        except BlockingIOError:
            pass
        exceeded = exceeded or len(res) > caps[res_r]
        del res[caps[res_r]:]
    result = {"wall_s": wall, "cpu_s": ru.ru_utime + ru.ru_stime, "maxrss_kb": ru.ru_maxrss,
              "timed_out": timed_out, "output_exceeded": exceeded,
              "stdout": bufs[out_r].decode("utf-8", "surrogateescape"),
              "stderr": bufs[err_r][-4096:].decode("utf-8", "replace"), "res": bytes(bufs[res_r])}
    if os.WIFSIGNALED(status):
        result["signal"] = os.WTERMSIG(status)
        result["exit_code"] = None
    else:
        result["signal"] = None
        result["exit_code"] = os.WEXITSTATUS(status)
    return result


def kill_rest(slot, pid):
    """Kill every process the test started: as PID 1 of the namespace, every other process;
    otherwise the child and its session, which it made first and no process of it can leave."""
    try:
        if slot.pid1:
            os.kill(-1, signal.SIGKILL)
        else:
            os.kill(pid, signal.SIGKILL)
            os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass


def reap_orphans(wait_s=2.0):
    """Reap every killed leftover (as PID 1 they are all ours), so none outlives the test."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            if time.monotonic() > deadline:
                return
            time.sleep(0.001)


def sweep_dir(path, keep):
    try:
        entries = os.listdir(path)
    except OSError:
        return
    for name in entries:
        p = os.path.join(path, name)
        if p in keep:
            continue
        if os.path.isdir(p) and not os.path.islink(p):
            cleanup_dir(p)
        else:
            try:
                os.unlink(p)
            except OSError:
                pass


def cleanup_dir(path):
    try:
        os.rmdir(path)
        return
    except OSError:
        pass
    for root, dirs, files in os.walk(path, topdown=False):
        for name in files:
            try:
                os.unlink(os.path.join(root, name))
            except OSError:
                pass
        for name in dirs:
            p = os.path.join(root, name)
            try:
                if os.path.islink(p):
                    os.unlink(p)
                else:
                    os.rmdir(p)
            except OSError:
                pass
    try:
        os.rmdir(path)
    except OSError:
        pass


# ---------------------------------------------------------------------------------------------
# Requests.

def cached_compile(slot, source, filename):
    """The code object of `source`, compiled once while the slot runs this program; the source
    itself when it does not compile (or is very large), so the child compiles it and reports the
    error as its own."""
    code = slot.codes.get((filename, source))
    if code is not None:
        return code
    if len(source) > 1 << 20:
        return source
    try:
        code = compile(source, filename, "exec")
    except (SyntaxError, ValueError, OverflowError, RecursionError, MemoryError):
        return source
    if len(slot.codes) >= 64:
        slot.codes.clear()
    slot.codes[(filename, source)] = code
    return code


def op_run(slot, req):
    lang = req.get("lang", "python")
    results = []
    if lang == "python":
        # A child can reach every object the zygote holds: keep only this program's code, so no
        # program can find (and run) another submission's.
        if ("main.py", req["code"]) not in slot.codes:
            slot.codes.clear()
        code = cached_compile(slot, req["code"], "main.py")
        for test in req["tests"]:
            mode = test.get("mode", "stdio")
            harness = mode == "harness"
            if harness:
                test = dict(test, harness_code=cached_compile(slot, test["harness"], "<harness>"))

            def start(workdir, fds, test=test):
                child_python(slot, code, test, workdir, fds)
            r = run_one(slot, start, test.get("stdin", "").encode("utf-8", "surrogateescape"),
                        float(test.get("time_limit_s", 2.0)), frames=mode != "stdio", nonce=harness)
            results.append(r)
            if req.get("stop_on_abnormal") and abnormal(r):
                break
        return {"ok": True, "results": results}
    binary = slot.binaries.get(req["binary"])
    if binary is None:
        return {"ok": False, "missing_binary": req["binary"]}
    for test in req["tests"]:
        limit = float(test.get("time_limit_s", 2.0))
        mem = (int(test.get("memory_limit_mb", 512)) + 32) << 20

        def start(workdir, fds, limit=limit, mem=mem):
            child_exec(slot, binary, ["main"], workdir, fds, (limit, mem, slot.nproc), True)
        r = run_one(slot, start, test.get("stdin", "").encode("utf-8", "surrogateescape"), limit)
        results.append(r)
        if req.get("stop_on_abnormal") and abnormal(r):
            break
    return {"ok": True, "results": results}


def abnormal(r):
    """A test that did not end with exit status 0: whatever the judge compares, it failed."""
    return r["timed_out"] or r["output_exceeded"] or r["signal"] is not None \
        or r["exit_code"] != 0 or not r["ready"]


def op_compile(slot, req):
    key = req["hash"]
    slot.counter += 1
    src_dir = os.path.join(slot.work_root, f"c{slot.counter}")
    os.mkdir(src_dir, 0o700)
    if slot.uid is not None:
        os.chown(src_dir, slot.uid, slot.gid)
    src = os.path.join(src_dir, "main.cpp")
    with open(src, "w", encoding="utf-8", errors="surrogateescape") as f:
        f.write(req["source"])
    argv = [a.replace("{src}", "main.cpp").replace("{out}", "prog") for a in req["argv"]]
    limit = float(req.get("time_limit_s", 30.0))
    mem = int(req.get("memory_limit_mb", 2048)) << 20
    compiler = argv[0] if os.path.isabs(argv[0]) else resolve(argv[0])

    def start(_workdir, fds):
        child_exec(slot, compiler, argv, src_dir, fds, (limit, mem, 0), False)

    slot.keep.add(src_dir)
    try:
        r = run_one(slot, start, b"", limit)
    finally:
        slot.keep.discard(src_dir)
    if not r["ready"]:
        cleanup_dir(src_dir)
        return {"ok": False, "error": f"the compiler's process died in sandbox setup: "
                                      f"{r['stderr'][-500:]}"}
    binary = os.path.join(src_dir, "prog")
    if r["exit_code"] == 0 and not r["timed_out"] and not os.path.exists(binary):
        cleanup_dir(src_dir)
        return {"ok": False, "error": "the compiler exited with status 0 but wrote no binary"}
    ok = r["exit_code"] == 0 and not r["timed_out"] and os.path.exists(binary)
    reply = {"ok": True, "compiled": ok, "stderr": r["stderr"][-4000:], "wall_s": r["wall_s"],
             "start_error": r["start_error"],
             "timed_out": r["timed_out"], "signal": r["signal"], "exit_code": r["exit_code"]}
    if ok:
        with open(binary, "rb") as f:
            data = f.read()
        store_binary(slot, key, data)
        if req.get("return_binary"):
            reply["binary_b64"] = base64.b64encode(data).decode()
    cleanup_dir(src_dir)
    return reply


def resolve(name):
    for d in SAFE_ENV["PATH"].split(":"):
        p = os.path.join(d, name)
        if os.path.exists(p):
            return p
    return name


def store_binary(slot, key, data):
    fd = os.memfd_create("bin-" + key, os.MFD_CLOEXEC)
    write_all(fd, data)
    old = slot.binaries.pop(key, None)
    if old is not None:
        os.close(old)
    slot.binaries[key] = fd
    while len(slot.binaries) > 64:
        os.close(slot.binaries.pop(next(iter(slot.binaries))))


def serve(rfd, wfd, reseed_random):
    slot = Slot(reseed_random)
    while True:
        try:
            req = recv_frame(rfd)
        except (OSError, ValueError) as e:
            sys.stderr.write(f"executor: broken request stream: {e}\n")
            return 2
        if req is None:
            return 0
        op = req.get("op")
        try:
            if op == "init":
                reply = slot.init(req)
            elif op == "run":
                reply = op_run(slot, req)
            elif op == "compile":
                reply = op_compile(slot, req)
            elif op == "put_binary":
                store_binary(slot, req["hash"], base64.b64decode(req["binary_b64"]))
                reply = {"ok": True}
            elif op == "ping":
                reply = {"ok": True, "pid1": slot.pid1}
            else:
                reply = {"ok": False, "error": f"unknown op {op!r}"}
        except Exception as e:
            reply = {"ok": False, "error": f"{type(e).__name__}: {e}",
                     "trace": traceback.format_exc()[-2000:]}
        send_frame(wfd, reply)
        # The next request's children must not find this reply (another program's output).
        reply = req = None


def preload():
    """Import PRELOAD; return the function that gives random's generator fresh entropy.

    Importing random registers a hook that re-seeds its generator, in Python, in every forked
    child: some twenty pages of memory copied per test. The hook is left out here and the zygote
    calls the returned function before each fork instead, so every test still starts from fresh
    entropy, as in a new interpreter."""
    register = os.register_at_fork
    os.register_at_fork = lambda **_: None
    try:
        import random
    finally:
        os.register_at_fork = register
    for name in PRELOAD:
        __import__(name)
    return functools.partial(_random.Random.seed, random._inst)


def main():
    reseed_random = preload()
    # Protocol pipes move off 0/1 so a child that inherits nothing but 0-4 never sees them.
    rfd, wfd = os.dup(0), os.dup(1)
    os.set_inheritable(rfd, False)
    os.set_inheritable(wfd, False)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    # As PID 1 the zygote only receives signals it handles: with no handlers at all, a test
    # running under the same uid (docker) cannot interrupt it (Python's SIGINT handler would
    # raise KeyboardInterrupt). Not dumpable: no same-uid access to /proc/1/mem or ptrace.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    LIBC.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    gc.collect()
    gc.freeze()
    return serve(rfd, wfd, reseed_random)


if __name__ == "__main__":
    sys.exit(main())
