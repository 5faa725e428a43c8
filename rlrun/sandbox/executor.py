"""The sandbox executor: a warm zygote that forks fresh, isolated children for each test.

This file is a standalone script that imports only the standard library, so the same file runs
on the host (`python3 executor.py` inside `unshare`, see backends.py) and inside the docker
sandbox image (mounted read-only at /opt/rlrun/executor.py). The judge (judge.py) drives it over
its stdin/stdout with length-prefixed JSON frames: a 4-byte big-endian length, then UTF-8 JSON;
the stdouts of a reply's results follow it as raw bytes (see send_reply).

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
  "args", "fn_name", "harness", "entry_point", "call_check", "names", "time_limit_s",
  "memory_limit_mb"}`. A result carries `exit_code`/`signal`, `wall_s`, `cpu_s`, `maxrss_kb`,
  the capped `stdout` (bytes, sent after the reply's frame) and `stderr` (its ends),
  `timed_out`, `output_exceeded`, `killed` (the zygote killed it), `ready` (the child got
  through our setup), the child's result `frames` and `frame_error`. A harness test runs two
  children, the program's and the harness's (see run_harness): its result is the program's,
  with the harness child's under `"harness"`.
- `{"op": "compile", "hash", "source", "argv", "time_limit_s", "memory_limit_mb",
  "return_binary"}` -> `{"ok", "compiled", "stderr", "timed_out", "binary_hex"}`: runs the
  compiler in a child under the same isolation and keeps the binary (a memfd) under `hash`.
- `{"op": "put_binary", "hash", "binary_hex"}` -> `{"ok"}`. Binaries travel as hex, which needs
  no module (base64 would map two more shared libraries into every fork).
- `{"op": "ping"}` -> `{"ok", "pid1"}`.

The executor never receives expected outputs: stdout, return values and harness check values
go back to the judge, which compares them. Everything a program can forge (its stdout, its
result frames) can only make its own verdict worse unless it also knows the expected values;
the checks of a harness are reported by a child that never runs program code.

A child, per test: new session and process group; stdin from a memfd holding the input;
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
import builtins
import ctypes
import errno
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
import types

# Modules solutions and harnesses commonly import, loaded once here so a child does not pay
# for them; each one also makes every fork a little dearer, so the list stays short.
PRELOAD = (
    "array", "bisect", "collections", "copy", "functools", "heapq", "itertools", "math",
    "operator", "random", "re", "string", "typing",
)

WORK = "/sandbox"  # work directories inside the minimal root (isolate_fs)
RESULT_FD = 3  # the child's pipe for result frames (return values, harness checks, done)
EXEC_FD = 4  # a binary child's memfd of the program, close-on-exec
# A harness test's two processes talk over two pipes: each reads the other's frames on
# PEER_IN_FD and writes its own on PEER_OUT_FD (see run_harness).
PEER_IN_FD = 4
PEER_OUT_FD = 5
MAX_FRAME = 1 << 30
# Deeper than any result frame our code writes (encode_plain stops at 100 levels, at most three
# JSON levels each) and shallow enough that the judge can decode a reply that carries one.
MAX_FRAME_DEPTH = 320
# Written by a child's setup code just before the program starts (see supervise).
READY_FRAME = struct.pack(">I", len(b'{"k":"ready"}')) + b'{"k":"ready"}'
# Compiled binaries a slot keeps, in memfds that hold their memory while kept: a program with
# a large initialised array compiles to tens of MB.
MAX_BINARIES = 64
MAX_BINARY_BYTES = 256 << 20
# How long the zygote waits for a one-process test to end before it reads its pipes (see
# fork_child).
QUIET_S = 0.005

SAFE_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
            "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "0"}


# ---------------------------------------------------------------------------------------------
# Plain-data encoding shared with the judge (which imports these two functions from here).

class NotPlainData(TypeError):
    """A value that is not built from exact built-in plain types."""


def encode_plain(value, depth=0, opaque=None):
    """JSON-ready tree of `value`; exact types only, so a subclass or custom object is refused,
    or, with `opaque`, stands in the tree as whatever `opaque(obj)` returns (a handle)."""
    if depth > 100:
        raise NotPlainData("nesting deeper than 100")
    t = type(value)
    if value is None or t is bool or t is int or t is float or t is str:
        return value
    if t is list:
        return [encode_plain(v, depth + 1, opaque) for v in value]
    if t is tuple:
        return {"t": [encode_plain(v, depth + 1, opaque) for v in value]}
    if t is dict:
        return {"d": [[encode_plain(k, depth + 1, opaque), encode_plain(v, depth + 1, opaque)]
                      for k, v in value.items()]}
    if t is set or t is frozenset:
        return {"s" if t is set else "f": [encode_plain(v, depth + 1, opaque) for v in value]}
    if t is bytes:
        return {"b": value.hex()}
    if opaque is not None:
        return opaque(value)
    raise NotPlainData(f"a value of type {t.__name__} is not plain data")


def decode_plain(tree, opaque=None):
    """Inverse of `encode_plain`: fresh objects of exact built-in types, and `opaque(node)` for
    a handle node `{"h": ...}` when `opaque` is given (otherwise a handle is malformed)."""
    t = type(tree)
    if tree is None or t is bool or t is int or t is float or t is str:
        return tree
    if t is list:
        return [decode_plain(v, opaque) for v in tree]
    if t is dict and opaque is not None and "h" in tree:
        return opaque(tree)
    if t is dict and len(tree) == 1:
        (tag, body), = tree.items()
        if tag == "t":
            return tuple(decode_plain(v, opaque) for v in body)
        if tag == "d":
            return {decode_plain(k, opaque): decode_plain(v, opaque) for k, v in body}
        if tag == "s":
            return {decode_plain(v, opaque) for v in body}
        if tag == "f":
            return frozenset(decode_plain(v, opaque) for v in body)
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
    except RecursionError:  # whoever wrote it, data is what is wrong, not the reader
        raise ValueError("JSON nested too deeply") from None
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


def send_reply(fd, reply):
    """Send `reply` as a frame whose results' stdouts follow it as raw bytes, their sizes
    under "stdout_bytes" (see stdout_holders for the order). A program's stdout is any bytes up
    to the output limit, and as JSON text every control byte and every byte outside ASCII would
    take six: 16 tests' worth was 1.7 GB in the zygote and again in the judge."""
    outs = [holder.pop("stdout") for holder in stdout_holders(reply)]
    if outs:
        reply["stdout_bytes"] = [len(out) for out in outs]
    data = dump_json(reply).encode("utf-8", "surrogateescape")
    write_all(fd, b"".join([struct.pack(">I", len(data)), data, *outs]))


def stdout_holders(reply):
    """The results in a reply that carry a stdout, in the order it travels: each test's, and
    after a harness test's the harness process's."""
    holders = []
    for r in reply.get("results", ()):
        holders.append(r)
        if "harness" in r:
            holders.append(r["harness"])
    return holders


class FrameTooLarge(ValueError):
    """A frame longer than the reader accepts."""


def recv_frame(fd, limit=MAX_FRAME):
    head = read_exact(fd, 4)
    if head is None:
        return None
    (n,) = struct.unpack(">I", head)
    if n > limit:
        raise FrameTooLarge(f"frame of {n} bytes is over the limit")
    body = read_exact(fd, n)
    if body is None:
        return None
    return load_json(body.decode("utf-8", "surrogateescape"))


def parse_frames(data):
    """Result frames a child wrote; malformed data is the child's fault, reported as such. A
    program can write anything on its result pipe, so nothing it writes may make this raise:
    the test would end as a sandbox error, which is not scored, instead of as its failure."""
    frames, pos = [], 0
    while pos + 4 <= len(data):
        (n,) = struct.unpack(">I", data[pos:pos + 4])
        if pos + 4 + n > len(data):
            return frames, "truncated result frame"
        body = data[pos + 4:pos + 4 + n]
        try:
            frame = load_json(body.decode("utf-8", "surrogateescape"))
        except ValueError:
            return frames, "malformed result frame"
        if body.count(b"[") + body.count(b"{") > MAX_FRAME_DEPTH and too_deep(frame):
            return frames, "result frame nested too deeply"
        frames.append(frame)
        pos += 4 + n
    return frames, ("trailing bytes on the result pipe" if pos != len(data) else "")


def too_deep(value):
    """Whether lists and dicts nest in `value` deeper than MAX_FRAME_DEPTH (without recursion)."""
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if type(node) is dict:
            node = node.values()
        elif type(node) is not list:
            continue
        if depth > MAX_FRAME_DEPTH:
            return True
        stack.extend((child, depth + 1) for child in node)
    return False


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
        # Taken before any program runs: a program's process may change its builtins.
        self.builtin_names = frozenset(builtins.__dict__)
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

def confine(slot, workdir, cpu_s, as_bytes, nproc):
    """Enter the work directory, become the slot's uid and take the test's limits."""
    os.chdir(workdir)
    if slot.uid is not None:
        os.setgid(slot.gid)
        os.setuid(slot.uid)
    soft = max(1, int(cpu_s + 0.999))
    resource.setrlimit(resource.RLIMIT_CPU, (soft, soft + 1))
    if as_bytes:
        resource.setrlimit(resource.RLIMIT_AS, (as_bytes, as_bytes))
    resource.setrlimit(resource.RLIMIT_FSIZE, (slot.fsize, slot.fsize))
    resource.setrlimit(resource.RLIMIT_NOFILE, (slot.nofile, slot.nofile))
    if nproc > 0:
        resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))


def emit(obj, dumps=dump_json, pack=struct.pack, write=os.write):
    """Send one result frame from a Python child. The functions are bound here, in the zygote,
    so a program that replaces dump_json or os.write cannot change what is sent."""
    data = dumps(obj).encode("utf-8", "surrogateescape")
    view = memoryview(pack(">I", len(data)) + data)
    while view:
        view = view[write(RESULT_FD, view):]


def child_python(slot, run, args, test, workdir, fds):
    """Runs in the forked child: our setup, then `run(*args, emit)` (the program, or a harness
    that calls into a program process); never returns."""
    # Bound before the program runs, which may replace these names where they are defined.
    exit_now, send = os._exit, emit
    status = 1
    out = err = None
    try:
        if not slot.pid1:
            os.setsid()
        stdin_fd, out_w, err_w, res_w, peer = fds
        os.dup2(stdin_fd, 0)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        os.dup2(res_w, RESULT_FD)
        last = RESULT_FD
        if peer is not None:
            os.dup2(peer[0], PEER_IN_FD)
            os.dup2(peer[1], PEER_OUT_FD)
            last = PEER_OUT_FD
        os.closerange(last + 1, 1 << 16)
        mem = int(test.get("memory_limit_mb", 512)) << 20
        confine(slot, workdir, float(test.get("time_limit_s", 2.0)), slot.base_vm + mem,
                slot.nproc)
        if slot.seccomp_py is not None:
            load_seccomp(slot.seccomp_py[1])
        sys.stdin, out, err = slot.streams
        sys.stdout, sys.stderr = out, err
        os.write(RESULT_FD, READY_FRAME)
        status = run(*args, send)
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
    """The program's process: run the program, then do what the test asks of it."""
    mode = test.get("mode", "stdio")
    request = None
    if mode == "harness":
        # No program code runs before the harness process has finished its setup, which it
        # says by sending its first request: by then it is unreadable to this process.
        request = recv_frame(PEER_IN_FD)
        if request is None:
            return 0
    sys.setrecursionlimit(100000)
    g = {"__name__": "__main__" if mode == "stdio" else "solution", "__builtins__": builtins}
    exec(code if not isinstance(code, str) else compile(code, "main.py", "exec"), g)
    if mode == "stdio":
        return 0
    if mode == "harness":
        return serve_harness(slot, g, request)
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


# ---------------------------------------------------------------------------------------------
# Harness tests: the program and the harness in two processes.
#
# A harness (HumanEval's `check(candidate)`, MBPP's asserts) runs in a process that never runs
# program code, so nothing the program does to its own process (replacing our functions,
# walking frames, ctypes) can touch a check's verdict or see what the harness computes. The
# program runs in a second process and answers, over a pair of pipes, what the harness does
# with the program's objects: look up a global it names, call a function, read an attribute.
# Arguments and answers cross as plain data (fresh objects on the other side); an object that
# is not plain data (a function, a class, an instance, a generator) stays in the program's
# process and the harness holds a handle to it. So the program only ever sees the arguments
# of its own calls and can only choose its own answers, which is what it is judged on.

class ProgramGone(BaseException):
    """The program process stopped answering the harness, or answered out of protocol. A
    BaseException, so a harness's `except Exception` does not carry on without it."""


class ProgramObject:
    """An object of the program in the harness process: calling it or reading an attribute asks
    the program process; using it as data (truth, comparison, hashing, iteration, arithmetic)
    is refused, because only plain data counts as an answer."""

    __slots__ = ("_rlrun_channel", "_rlrun_handle", "_rlrun_type")

    def __init__(self, channel, handle, type_name):
        self._rlrun_channel = channel
        self._rlrun_handle = handle
        self._rlrun_type = type_name

    def __call__(self, *args, **kwargs):
        return self._rlrun_channel.call(self, args, kwargs)

    def __getattr__(self, name):
        # Dunder lookups (copy's __deepcopy__, pickling...) never reach the program.
        if name[:2] == "__" == name[-2:]:
            raise AttributeError(name)
        return self._rlrun_channel.attr(self, name)

    def __repr__(self):
        return f"<the program's {self._rlrun_type}>"

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self


def _refuse_as_data(self, *_):
    raise self._rlrun_channel.not_plain(f"{self!r} is not plain data")


for _name in ("__bool__", "__len__", "__iter__", "__contains__", "__getitem__", "__hash__",
              "__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__int__", "__float__",
              "__index__", "__neg__", "__abs__", "__add__", "__radd__", "__sub__", "__rsub__",
              "__mul__", "__rmul__", "__truediv__", "__rtruediv__", "__floordiv__",
              "__rfloordiv__", "__mod__", "__rmod__", "__pow__", "__rpow__"):
    setattr(ProgramObject, _name, _refuse_as_data)


def not_plain(value):
    """`encode_plain`'s `opaque` for harness values: refuse `value`, naming what it is."""
    what = repr(value) if type(value) is ProgramObject \
        else f"a value of type {type(value).__name__}"
    raise NotPlainData(f"{what} is not plain data")


def plain_copy(value):
    """A fresh plain-data copy of `value`, so harness comparisons never call program code."""
    if type(value) is type and value.__module__ == "builtins":
        return value
    return decode_plain(encode_plain(value, opaque=not_plain))


def update_in_place(old, new):
    """Make `old` equal to `new`, mutating it where both are the same mutable type, so that what
    the harness still holds of a call's arguments sees what the call did to them (an in-place
    sort, an appended item); returns the object that now stands for `new`."""
    t = type(old)
    if t is not type(new):
        return new
    if t is list:
        if len(old) == len(new):
            for i, item in enumerate(new):
                old[i] = update_in_place(old[i], item)
        else:
            old[:] = new
        return old
    if t is dict:
        if old.keys() == new.keys():
            for key, item in new.items():
                old[key] = update_in_place(old[key], item)
        else:
            old.clear()
            old.update(new)
        return old
    if t is set:
        if old != new:
            old.clear()
            old.update(new)
        return old
    if t is tuple and len(old) == len(new):
        # A tuple cannot change, but the lists inside it can.
        items = [update_in_place(a, b) for a, b in zip(old, new, strict=True)]
        return old if all(a is b for a, b in zip(old, items, strict=True)) else tuple(items)
    return new


class Channel:
    """The harness process's end of the pipes to the program process. Every answer is decoded
    into fresh plain data or handles (ProgramObject), so no object and no code of the program
    ever exists in this process; an answer out of protocol ends the harness (ProgramGone)."""

    def __init__(self, emit, limit):
        self.emit = emit
        self.limit = limit  # bytes of one answer, the cap on a test's output
        self.objects = {}
        self.builtins = builtins.__dict__

    def ask(self, request):
        try:
            send_frame(PEER_OUT_FD, request)
            reply = recv_frame(PEER_IN_FD, self.limit)
        except FrameTooLarge:
            raise self.gone("the program's answer is over the output limit",
                            "output_limit") from None
        except OSError:  # the program closed its end
            reply = None
        except (ValueError, RecursionError):
            raise self.gone("the program's answer to the harness is malformed") from None
        if reply is None:
            raise self.gone("the program stopped answering the harness (it exited or closed "
                            "its pipes)")
        if type(reply) is not dict:
            raise self.gone("the program's answer to the harness is malformed")
        return reply

    def gone(self, why, status="wrong_answer"):
        self.emit({"k": "gone", "m": why, "s": status})
        return ProgramGone(why)

    def not_plain(self, what):
        self.emit({"k": "np", "m": what})
        return NotPlainData(what)

    def value(self, tree):
        try:
            return decode_plain(tree, self.handle)
        except (NotPlainData, TypeError, ValueError, KeyError, RecursionError):
            raise self.gone("the program's answer to the harness is malformed") from None

    def handle(self, node):
        n, type_name = node.get("h"), node.get("n")
        if type(n) is not int or type(type_name) is not str or len(node) != 2:
            raise NotPlainData("malformed handle")
        obj = self.objects.get(n)
        if obj is None:
            obj = self.objects[n] = ProgramObject(self, n, type_name[:80])
        return obj

    def argument(self, value):
        """`opaque` for the harness's arguments: the program's own objects go as handles."""
        if type(value) is ProgramObject:
            return {"h": value._rlrun_handle, "n": value._rlrun_type}
        what = f"a value of type {type(value).__name__}"
        self.emit({"k": "unsupported", "m": what})
        raise NotPlainData(f"the harness passes {what} to the program: only plain data and "
                           "the program's own objects can be passed")

    def globals(self, names, entry):
        """The program's globals among `names` (and its entry point) for the harness."""
        reply = self.ask({"o": "g", "n": names, "e": entry})
        found = reply.get("g")
        if type(found) is not dict:
            raise self.gone("the program's answer to the harness is malformed")
        g = {}
        for name in names:
            if name not in found:
                continue
            node = found[name]
            if type(node) is dict and len(node) == 1 and type(node.get("m")) is str:
                # A module the program imported: the harness gets its own, untouched copy.
                try:
                    __import__(node["m"])
                    g[name] = sys.modules[node["m"]]
                except Exception:  # noqa: BLE001 - a name the harness uses stays undefined
                    pass
            else:
                g[name] = self.value(node)
        return g, (self.value(reply["e"]) if "e" in reply else None)

    def call(self, obj, args, kwargs):
        request = {"o": "c", "h": obj._rlrun_handle,
                   "a": encode_plain(list(args), opaque=self.argument),
                   "k": encode_plain(kwargs, opaque=self.argument)}
        reply = self.outcome(self.ask(request))
        if "a" in reply:
            after = self.value(reply["a"])
            if not (type(after) is list and len(after) == 2 and type(after[0]) is list
                    and len(after[0]) == len(args) and type(after[1]) is dict
                    and after[1].keys() == kwargs.keys()):
                raise self.gone("the program's answer to the harness is malformed")
            for old, new in zip(args, after[0], strict=True):
                update_in_place(old, new)
            for key, old in kwargs.items():
                update_in_place(old, after[1][key])
        return self.value(reply["r"])

    def attr(self, obj, name):
        return self.value(self.outcome(self.ask({"o": "a", "h": obj._rlrun_handle,
                                                "n": name}))["r"])

    def outcome(self, reply):
        """`reply` if it carries a value; raises the exception the program raised instead."""
        if "x" not in reply:
            if "r" not in reply:
                raise self.gone("the program's answer to the harness is malformed")
            return reply
        cls = self.builtins.get(reply["x"]) if type(reply["x"]) is str else None
        if not (type(cls) is type and issubclass(cls, Exception)):
            raise self.gone("the program's answer to the harness is malformed")
        args = self.value(reply.get("a", {"t": []}))
        if type(args) is not tuple:
            raise self.gone("the program's answer to the harness is malformed")
        exc = None
        for base in cls.__mro__:
            for attempt in (args, ()):
                try:
                    exc = base(*attempt)
                    break
                except Exception:  # noqa: BLE001, S112 - a built-in that wants other arguments
                    continue
            if exc is not None:
                break
        if type(reply.get("tb")) is str:
            exc.add_note("raised in the program:\n" + reply["tb"][-2000:])
        raise exc


def run_harness(slot, test, emit):
    """The harness process: runs the harness with the program's objects as handles. Its reports
    (checks, completion) are the only evidence the judge takes for the test."""
    # Same uid as the program's process: not dumpable, so that process cannot open our memory.
    LIBC.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    channel = Channel(emit, slot.output_limit)
    entry = test.get("entry_point") if test.get("call_check") else None
    g, candidate = channel.globals(list(test.get("names", [])), entry)

    def site(i, value):
        try:
            emit({"k": "site", "i": i, "v": encode_plain(value, opaque=not_plain)})
        except NotPlainData as e:
            emit({"k": "site", "i": i, "np": str(e)})

    def plain(value):
        try:
            return plain_copy(value)
        except NotPlainData as e:
            raise channel.not_plain(str(e)) from None

    # No program code runs in this process, so its builtins are untouched.
    h = dict(g, __builtins__=builtins, __name__="__main__",
             __rlrun_site=site, __rlrun_plain=plain)
    harness = test["harness_code"]
    exec(harness if not isinstance(harness, str) else compile(harness, "<harness>", "exec"), h)
    if test.get("call_check"):
        if candidate is None:
            raise NameError(f"the program defines no function {entry!r}")
        h["check"](candidate)
    emit({"k": "done"})
    return 0


class ProgramSide:
    """The program process's end: the program's objects the harness holds handles to."""

    def __init__(self, slot, g):
        self.g = g
        self.builtin_names = slot.builtin_names
        self.objects = []
        self.handles = {}

    def handle(self, obj):
        n = self.handles.get(id(obj))
        if n is None:
            n = self.handles[id(obj)] = len(self.objects)
            self.objects.append(obj)  # kept alive, so its id stays its own
        return {"h": n, "n": type(obj).__name__[:80]}

    def encode(self, value):
        try:
            return encode_plain(value, opaque=self.handle)
        except NotPlainData:  # nested deeper than plain data goes: one object as a whole
            return self.handle(value)

    def lookup(self, node):
        return self.objects[node["h"]]

    def answer(self, req):
        op = req.get("o")
        if op == "g":
            found = {}
            for name in req["n"]:
                if name in self.g and name not in self.builtin_names:
                    value = self.g[name]
                    found[name] = {"m": value.__name__} if type(value) is types.ModuleType \
                        else self.encode(value)
            reply = {"g": found}
            if req.get("e") in self.g:
                reply["e"] = self.encode(self.g[req["e"]])
            return reply
        target = self.objects[req["h"]]
        try:
            if op == "a":
                value = getattr(target, req["n"])
            else:
                args = decode_plain(req["a"], self.lookup)
                kwargs = decode_plain(req["k"], self.lookup)
                value = target(*args, **kwargs)
        except Exception as e:  # noqa: BLE001 - the program's exception is its answer
            return self.raised(e)
        reply = {"r": self.encode(value)}
        if op == "c":
            after = [self.encode(args), self.encode(kwargs)]
            if after != [req["a"], req["k"]]:
                reply["a"] = after
        return reply

    def raised(self, e):
        """The answer for an exception: its nearest built-in type, its arguments if they are
        plain data, and the program's traceback (shown if the harness does not catch it)."""
        name = "Exception"
        for cls in type(e).__mro__:
            if cls.__module__ == "builtins" and cls.__name__ in self.builtin_names:
                name = cls.__name__
                break
        reply = {"x": name}
        try:
            reply["a"] = encode_plain(tuple(e.args))
        except Exception:  # noqa: BLE001 - the program's own exception object misbehaves
            pass
        try:
            reply["tb"] = "".join(traceback.format_exception(e, limit=-8))[-2000:]
        except Exception:  # noqa: BLE001
            pass
        return reply


def serve_harness(slot, g, request):
    """Answer the harness process until it closes the pipes (see run_harness)."""
    side = ProgramSide(slot, g)
    while request is not None:
        send_frame(PEER_OUT_FD, side.answer(request))
        request = recv_frame(PEER_IN_FD)
    return 0


def child_exec(slot, program, argv, limits, use_seccomp, workdir, fds):
    """Runs in the forked child: setup, then execve of `program` (a path or a memfd)."""
    try:
        if not slot.pid1:
            os.setsid()
        stdin_fd, out_w, err_w, res_w, _ = fds
        os.dup2(stdin_fd, 0)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        # The result pipe is close-on-exec: the started program cannot write frames.
        os.dup2(res_w, RESULT_FD, inheritable=False)
        if isinstance(program, int):
            os.dup2(program, EXEC_FD, inheritable=False)
            program = EXEC_FD
        os.closerange(EXEC_FD + 1, 1 << 16)
        confine(slot, workdir, *limits)
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

class Kid:
    """A forked test process as the zygote tracks it: its pid and pidfd, the read ends of its
    stdout, stderr and result pipes, and its work directory."""

    __slots__ = ("pid", "pidfd", "out_r", "err_r", "res_r", "workdir")

    def __init__(self, pid, pidfd, out_r, err_r, res_r, workdir):
        self.pid, self.pidfd = pid, pidfd
        self.out_r, self.err_r, self.res_r = out_r, err_r, res_r
        self.workdir = workdir

    def close(self):
        for fd in (self.pidfd, self.out_r, self.err_r, self.res_r):
            os.close(fd)
        cleanup_dir(self.workdir)


def fork_child(slot, start_child, args, stdin_data, peer=None, quiet_s=0.0):
    """Fork one test process with a fresh work directory, stdin from a memfd holding
    `stdin_data`, pipes for its output and result frames and, for the two processes of a
    harness test, `peer`: its ends of the pipes between them. `start_child(*args, workdir,
    fds)` runs in the child.

    With `quiet_s`, the zygote first waits that long for the child to exit, touching as little
    memory as it can: a short test ends meanwhile, and the zygote then wakes once, at its exit,
    not at each write too, and writes its own pages after the child has let go of them, so
    they are not copied (together a sixth of the CPU time of a trivial test). A program that
    fills a pipe (64 KiB) sooner waits at most that long to be read."""
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
    # Fresh entropy for `random` in every child, drawn just before its fork: no other child
    # (in particular the program's, beside a harness process) holds a copy.
    slot.reseed_random()
    pid = os.fork()
    if pid == 0:
        try:
            start_child(*args, workdir, (stdin_fd, out_w, err_w, res_w, peer))
        finally:
            os._exit(127)
    pidfd = os.pidfd_open(pid)
    if quiet_s:
        select.select([pidfd], (), (), quiet_s)
    for fd in (stdin_fd, out_w, err_w, res_w):
        os.close(fd)
    return Kid(pid, pidfd, out_r, err_r, res_r, workdir)


def run_one(slot, start_child, args, stdin_data, wall_s, frames=False):
    """Fork one child for one test and supervise it (`frames`: see supervise)."""
    t0 = time.monotonic()
    kid = fork_child(slot, start_child, args, stdin_data, quiet_s=min(QUIET_S, wall_s))
    return supervise(slot, [kid], t0, wall_s, frames)[0]


def run_pair(slot, code, test):
    """A harness test: the program's process and the harness's (see run_harness), joined by
    two pipes, under one wall clock. The result is the program's, with the harness process's
    under "harness"; the test is over when the harness process exits."""
    wall_s = float(test.get("time_limit_s", 2.0))
    ask_r, ask_w = os.pipe2(os.O_CLOEXEC)
    answer_r, answer_w = os.pipe2(os.O_CLOEXEC)
    kids = []
    t0 = time.monotonic()
    try:
        kids.append(fork_child(
            slot, child_python, (slot, run_python, (slot, code, test), test),
            test.get("stdin", "").encode("utf-8", "surrogateescape"), (ask_r, answer_w)))
        kids.insert(0, fork_child(
            slot, child_python, (slot, run_harness, (slot, test), test), b"",
            (answer_r, ask_w)))
    except BaseException:
        kill_rest(slot, [kid.pid for kid in kids])
        for kid in kids:
            os.waitpid(kid.pid, 0)
            kid.close()
        raise
    finally:
        # Only the two children hold these now, so either one's exit is EOF to the other.
        for fd in (ask_r, ask_w, answer_r, answer_w):
            os.close(fd)
    # The harness process ends the test: wait quietly for its exit (see fork_child).
    select.select([kids[0].pidfd], (), (), min(QUIET_S, wall_s))
    harness, program = supervise(slot, kids, t0, wall_s, frames=True)
    program["harness"] = harness
    program["ready"] = program["ready"] and harness["ready"]
    program["start_error"] = program["start_error"] or harness["start_error"]
    return program


def supervise(slot, kids, t0, wall_s, frames):
    """Read the children's pipes (capped) until the first of `kids` has exited, and the others
    too or a short grace after it, and the pipes close, or a limit is hit; then kill everything
    the test started, reap it and clean up after it. One result per kid; `killed` says the
    zygote killed it (it outlived the grace, or the test ran out of time).

    Without `frames` (a stdio or binary test) the result pipe carries only our few-byte setup
    frames, so it is read once everything is dead instead of waking the zygote while the test
    runs; whatever more a program writes there can only stall the program itself."""
    bufs, caps, errs = {}, {}, set()
    poller = select.poll()
    pidfds = {}
    for k, kid in enumerate(kids):
        bufs.update({kid.out_r: bytearray(), kid.err_r: bytearray(), kid.res_r: bytearray()})
        caps.update({kid.out_r: slot.output_limit, kid.err_r: 1 << 16,
                     kid.res_r: slot.output_limit})
        errs.add(kid.err_r)
        for fd in (kid.out_r, kid.err_r, kid.res_r) if frames else (kid.out_r, kid.err_r):
            poller.register(fd, select.POLLIN)
        pidfds[kid.pidfd] = k
        poller.register(kid.pidfd, select.POLLIN)
    open_pipes = (3 if frames else 2) * len(kids)
    pids = [kid.pid for kid in kids]
    alive = set(range(len(kids)))  # kids whose exit has not been seen
    killed = None  # which kids were still running when the zygote killed what was left
    # Until the first child exits, the wall-clock limit. Then the others get a short grace to
    # exit on their own (a harness test's program sees its pipes close and ends), so that a
    # status they reach on their own is theirs; then everything left is killed, and the pipes
    # get a short grace to close.
    until = t0 + wall_s
    timed_out = exceeded = ended = False
    try:
        while (open_pipes or not ended) and not exceeded:
            if not ended and not alive:
                killed = [False] * len(kids)
                kill_rest(slot, pids)
                ended, until = True, time.monotonic() + 0.2
                continue
            left = until - time.monotonic()
            if left <= 0:
                if ended or 0 in alive:
                    timed_out = not ended and 0 in alive
                    break
                killed = [running(pid) for pid in pids]
                kill_rest(slot, pids)
                ended, until = True, time.monotonic() + 0.2
                continue
            # Pipes are blocking: poll only reports one with data or at EOF, so a read returns.
            for fd, _ in poller.poll(int(left * 1000) + 1):
                if fd in pidfds:
                    poller.unregister(fd)
                    alive.discard(pidfds[fd])
                    if pidfds[fd] == 0 and alive:
                        until = min(until, time.monotonic() + 0.2)
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
                    exceeded = exceeded or fd not in errs
                else:
                    buf += chunk
    finally:
        if not ended:
            killed = [running(pid) for pid in pids]
            kill_rest(slot, pids)
    results = []
    try:
        waited = [os.wait4(kid.pid, 0) for kid in kids]
        wall = time.monotonic() - t0
        reap_orphans()
        for kid, was_killed, (_, status, ru) in zip(kids, killed, waited, strict=True):
            res = bufs[kid.res_r]
            if not frames:
                # Everything the test started is dead or dying: take what the pipe holds, never
                # wait.
                os.set_blocking(kid.res_r, False)
                try:
                    while chunk := os.read(kid.res_r, 1 << 16):
                        res += chunk
                except BlockingIOError:
                    pass
                exceeded = exceeded or len(res) > caps[kid.res_r]
                del res[caps[kid.res_r]:]
            # The setup code writes "ready" before any program code runs, so a child without
            # it died in our code (a sandbox fault) and one with it cannot pretend otherwise.
            ready = res.startswith(READY_FRAME)
            parsed, bad = parse_frames(res[len(READY_FRAME):] if ready else res)
            signaled = os.WIFSIGNALED(status)
            results.append({
                "wall_s": wall, "cpu_s": ru.ru_utime + ru.ru_stime, "maxrss_kb": ru.ru_maxrss,
                "timed_out": timed_out, "output_exceeded": exceeded, "killed": was_killed,
                "stdout": bufs[kid.out_r],
                "stderr": ends(bufs[kid.err_r], 2048).decode("utf-8", "replace"),
                "signal": os.WTERMSIG(status) if signaled else None,
                "exit_code": None if signaled else os.WEXITSTATUS(status),
                "ready": ready, "frames": parsed, "frame_error": bad,
                "start_error": next((fr.get("m", "") for fr in parsed[:1]
                                     if isinstance(fr, dict) and fr.get("k") == "execfail"), ""),
            })
    finally:
        for kid in kids:
            kid.close()
        for d in slot.sweep:
            sweep_dir(d, slot.keep)
    return results


def ends(data, n):
    """The first and the last `n` bytes of `data`: a compiler's first errors are what the rest
    follow from, a traceback's last lines name the exception."""
    return data if len(data) <= 2 * n + 5 else data[:n] + b"\n...\n" + data[-n:]


def running(pid):
    """Whether the child `pid` has not exited yet (it is not reaped here)."""
    return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None


def kill_rest(slot, pids):
    """Kill every process the test started: as PID 1 of the namespace, every other process;
    otherwise each child and its session, which it made first and no process of it can
    leave."""
    if slot.pid1:
        try:
            os.kill(-1, signal.SIGKILL)
        except OSError:
            pass
        return
    for pid in pids:
        try:
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
            if mode == "harness":
                test = dict(test, harness_code=cached_compile(slot, test["harness"], "<harness>"))
                r = run_pair(slot, code, test)
            else:
                r = run_one(slot, child_python, (slot, run_python, (slot, code, test), test),
                            test.get("stdin", "").encode("utf-8", "surrogateescape"),
                            float(test.get("time_limit_s", 2.0)), frames=mode != "stdio")
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
        r = run_one(slot, child_exec, (slot, binary, ["main"], (limit, mem, slot.nproc), True),
                    test.get("stdin", "").encode("utf-8", "surrogateescape"), limit)
        results.append(r)
        if req.get("stop_on_abnormal") and abnormal(r):
            break
    return {"ok": True, "results": results}


def abnormal(r):
    """A test that did not end with exit status 0 (for a harness test: its harness process):
    whatever the judge compares, it failed."""
    ended = r.get("harness", r)
    return r["timed_out"] or r["output_exceeded"] or ended["signal"] is not None \
        or ended["exit_code"] != 0 or not r["ready"]


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
        child_exec(slot, compiler, argv, (limit, mem, 0), False, src_dir, fds)

    slot.keep.add(src_dir)
    try:
        r = run_one(slot, start, (), b"", limit)
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
    reply = {"ok": True, "compiled": ok, "stderr": r["stderr"], "wall_s": r["wall_s"],
             "start_error": r["start_error"],
             "timed_out": r["timed_out"], "signal": r["signal"], "exit_code": r["exit_code"]}
    if ok:
        with open(binary, "rb") as f:
            data = f.read()
        store_binary(slot, key, data)
        if req.get("return_binary"):
            reply["binary_hex"] = data.hex()
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
    # The newest always stays: the judge stores a binary just before running it.
    size = sum(os.fstat(f).st_size for f in slot.binaries.values())
    while len(slot.binaries) > 1 and (len(slot.binaries) > MAX_BINARIES
                                      or size > MAX_BINARY_BYTES):
        oldest = slot.binaries.pop(next(iter(slot.binaries)))
        size -= os.fstat(oldest).st_size
        os.close(oldest)


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
                store_binary(slot, req["hash"], bytes.fromhex(req["binary_hex"]))
                reply = {"ok": True}
            elif op == "ping":
                reply = {"ok": True, "pid1": slot.pid1}
            else:
                reply = {"ok": False, "error": f"unknown op {op!r}"}
        except Exception as e:
            reply = {"ok": False, "error": f"{type(e).__name__}: {e}",
                     "trace": traceback.format_exc()[-2000:]}
        send_reply(wfd, reply)
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

    # 256 bits from the OS are a full seed; `seed()` with no argument draws 2,496 bytes, a
    # measurable part of the zygote's work per fork.
    def reseed(seed=_random.Random.seed, inst=random._inst, urandom=os.urandom,
               from_bytes=int.from_bytes):
        seed(inst, from_bytes(urandom(32), "little"))
    return reseed


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
