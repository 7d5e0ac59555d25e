"""Native stacks of trials that die of a signal: the preloaded handler (segv_stack.c) and its
output's parser.

faulthandler shows the Python frames of a segfault; the H200 campaign's eight segfaults during
garbage collection showed "Garbage-collecting" and no more, so their cause stayed unknown
(docs/log/2026-11-30-native-stacks-r5-crash-site.md). `preload()` builds segv_stack.c once per
source version with the host's C compiler (Inductor's CPU backend and Triton need one anyway) into
the user cache; the runner puts
it on the trial's LD_PRELOAD, and a crashing trial's output then ends with the native frames of
the crashing thread. Without a compiler, or with HARNESS_NATIVE_STACKS=0, trials run as before.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

SOURCE = Path(__file__).with_name("segv_stack.c")
ENV_SWITCH = "HARNESS_NATIVE_STACKS"
"""Set to 0 to run trials without the preloaded handler."""
BEGIN = "Native stack of the crashing thread (most recent call first):"
END = "End of native stack"

_lock = threading.Lock()
_built: dict[str, tuple[Path | None, str | None]] = {}
"""Per source digest: (library, why there is none)."""


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "harness"


def compiler() -> str | None:
    return os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")


def preload() -> Path | None:
    """The built handler library, or None (switched off, no compiler, or the build failed:
    `why_not()` says which). Built at most once per process and source version; concurrent
    builders (threads, processes) each write a temporary file and rename it into place."""
    return _state()[0]


def why_not() -> str | None:
    """Why `preload()` gives None; None when it gives a library."""
    return _state()[1]


@functools.cache
def _digest() -> str:
    return hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:16]


def _state() -> tuple[Path | None, str | None]:
    # Asked once per trial (child_env): the source is read and hashed once per process.
    if os.environ.get(ENV_SWITCH, "1") == "0":
        return None, f"{ENV_SWITCH}=0"
    digest = _digest()
    with _lock:
        if digest not in _built:
            _built[digest] = _build(cache_dir() / f"segv_stack-{digest}.so")
        return _built[digest]


def _build(target: Path) -> tuple[Path | None, str | None]:
    if target.is_file():
        return target, None
    cc = compiler()
    if cc is None:
        return None, "no C compiler (gcc or cc) on PATH"
    tmp = None
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".segv_stack-", suffix=".so", dir=target.parent)
        os.close(fd)
        done = subprocess.run(
            [cc, "-shared", "-fPIC", "-O2", "-o", tmp, str(SOURCE)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
            return None, f"{cc} failed: {last}"
        os.replace(tmp, target)
        tmp = None
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"cannot build {target.name}: {exc}"
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
    return target, None


def with_preload(env: dict[str, str]) -> dict[str, str]:
    """`env` with the handler first on LD_PRELOAD (when there is one to load)."""
    lib = preload()
    if lib is None:
        return env
    tail = env.get("LD_PRELOAD", "")
    return {**env, "LD_PRELOAD": " ".join(p for p in (str(lib), tail) if p)}


_LINE = re.compile(r"^(?:(?P<obj>[^\s()\[\]]+)\((?P<sym>[^()]*)\))?\s*\[(?P<addr>0x[0-9a-fA-F]+)\]$")
NO_OBJECT = "?"
"""`obj` of a frame whose address lies in no loaded object (backtrace prints a bare `[0x...]`):
a jump through a dangling function pointer, or code that was unmapped."""
_BARE = re.compile(r"^\+(0x[0-9a-fA-F]+)$")


@dataclass(frozen=True, slots=True)
class NativeFrame:
    obj: str
    """The object file as the dynamic loader named it (a path on the machine that ran the trial)."""
    symbol: str
    """`name+0xoff` (an exported symbol), `+0xoff` (an offset into `obj`) or empty."""
    name: str = ""
    """The function, when resolved on the machine that ran the trial (addr2line -f -C)."""

    def __str__(self) -> str:
        if self.obj == NO_OBJECT:
            return f"?({self.symbol}) outside every loaded object"
        where = f"{os.path.basename(self.obj)}({self.symbol})"
        return f"{where} {self.name}" if self.name else where


def native_stack(text: str) -> list[NativeFrame] | None:
    """The crashing thread's native frames from a trial's output, innermost first, without the
    handler's own frames and the signal delivery (faulthandler's re-raise included); None when
    the output has no native stack."""
    start = text.rfind(BEGIN)
    if start < 0:
        return None
    body = text[start + len(BEGIN) :]
    stop = body.find(END)
    lines = [ln.strip() for ln in (body[:stop] if stop >= 0 else body).splitlines() if ln.strip()]
    frames = [
        NativeFrame(obj=m.group("obj") or NO_OBJECT, symbol=m.group("sym") or m.group("addr"))
        for m in map(_LINE.match, lines)
        if m
    ]
    if len(frames) < 2:
        return frames
    # frames[0] is the handler, frames[1] the signal return trampoline; the same trampoline
    # appears once more per signal delivery (faulthandler's handler re-raises): the faulting
    # code starts after its last appearance.
    last = max(i for i, f in enumerate(frames) if f == frames[1])
    return frames[last + 1 :]


def resolve(frames: list[NativeFrame]) -> list[NativeFrame]:
    """Function names for the frames, on the machine whose libraries they are: `addr2line -f -C`
    for offsets into a library (torch's wheels keep their symbol tables, so hidden functions such
    as `create_cache_entry` resolve), `c++filt` for exported C++ symbols. Frames stay as they
    are where the tool, the file or a name is missing."""
    addr2line, cxxfilt = shutil.which("addr2line"), shutil.which("c++filt")
    names: dict[int, str] = {}
    by_obj: dict[str, list[int]] = {}
    for i, f in enumerate(frames):
        if _BARE.match(f.symbol) and os.path.isfile(f.obj):
            by_obj.setdefault(f.obj, []).append(i)
    for obj, idx in by_obj.items():
        if addr2line is None:
            break
        out = _run([addr2line, "-f", "-C", "-e", obj, *(_BARE.match(frames[i].symbol).group(1) for i in idx)])
        pairs = out.splitlines()[0::2] if out else []
        for i, name in zip(idx, pairs):
            if name and name != "??":
                names[i] = name
    mangled = [(i, f.symbol.rsplit("+", 1)[0]) for i, f in enumerate(frames) if f.symbol.startswith("_Z")]
    if mangled and cxxfilt:
        out = _run([cxxfilt, *(m for _, m in mangled)])
        for (i, m), plain in zip(mangled, out.splitlines() if out else []):
            if plain and plain != m:
                names[i] = plain
    return [dataclasses.replace(f, name=names[i]) if i in names else f for i, f in enumerate(frames)]


def _run(argv: list[str]) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout if done.returncode == 0 else ""


def render(frames: list[NativeFrame], limit: int | None = None, width: int | None = 160) -> str:
    """One frame per line, innermost first; lines longer than `width` clipped (None: whole)."""
    shown = frames if limit is None else frames[:limit]
    lines = [str(f) if width is None or len(str(f)) <= width else str(f)[: width - 3] + "..." for f in shown]
    if limit is not None and len(frames) > limit:
        lines.append(f"... {len(frames) - limit} more")
    return "\n".join(lines)


_KEPT = re.compile(r"^(?P<obj>[^\s()]+)\((?P<sym>[^()]*)\)(?: (?P<name>.+))?$")
_KEPT_NO_OBJECT = " outside every loaded object"


def read_kept(text: str) -> list[NativeFrame]:
    """The frames of a kept `native_stack.txt` (render's lines; `#` lines are comments)."""
    frames = []
    for line in text.splitlines():
        m = _KEPT.match(line.strip())
        if m and not line.startswith("#"):
            name = m.group("name") or ""
            frames.append(
                NativeFrame(
                    obj=m.group("obj"), symbol=m.group("sym"), name="" if name == _KEPT_NO_OBJECT.strip() else name
                )
            )
    return frames


def kept_summary(text: str, limit: int) -> tuple[str, str]:
    """(crash site, innermost `limit` frames rendered) of a kept `native_stack.txt`."""
    frames = read_kept(text)
    return crash_site(frames), render(frames, limit=limit)


RUNTIME_OBJECTS = re.compile(r"^(?:libc|libpthread|libstdc\+\+|libgcc_s|libpython|python|ld-linux)[\w.+-]*$")
"""Objects whose frames say how the crash was reached, not where: the C library, the C++
runtime, the interpreter."""


def crash_site(frames: list[NativeFrame]) -> str:
    """Where a native crash landed, for grouping: the innermost named frame outside the runtime
    objects and outside standard-library templates (R5: `create_cache_entry`, not the
    `std::unordered_map::operator[]` it crashed in); else the innermost frame as printed."""
    for f in frames:
        if (
            f.name
            and not RUNTIME_OBJECTS.match(os.path.basename(f.obj))
            and not f.name.startswith(("std::", "__gnu_cxx::", "void std::"))
        ):
            return f.name
    if frames and frames[0].obj == NO_OBJECT:
        return "code outside every loaded object (a dangling function pointer?)"
    return str(frames[0]) if frames else "?"
