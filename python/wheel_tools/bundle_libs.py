"""Make a wheel's ELF files carry their own shared libraries.

Every shared library the given ELF files need, directly or through another library,
is copied into one folder of the wheel (stoker.libs/), except those the host must
provide: glibc and the GCC runtime (libstdc++, libgcc_s). Each copy gets a soname made
unique by a hash of its contents (libzstd.so.1 -> libzstd-1a2b3c4d.so.1), every
DT_NEEDED entry naming it is rewritten to match, and every file's RUNPATH points into
the folder relative to itself ($ORIGIN/...). So the dynamic loader finds the wheel's
copies wherever the wheel is installed, and they cannot be confused with another copy
of the same library already loaded in the process (torch's libgomp, a system libcurl,
conda's libzstd): a unique soname is a separate library to the loader.

Uses Debian's patchelf (to edit) and ldd (to resolve, as the build host's loader does).
"""

import hashlib
import os
import re
import shutil
import subprocess
from pathlib import Path

# What the wheel relies on the host for. glibc's libraries must match the host's
# loader, and libstdc++/libgcc_s are shared with every other C++ extension in the
# process (torch's included), so a private copy would be a second runtime, not a fix.
HOST_LIBRARIES = {
    "libc.so.6", "libm.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1",
    "libresolv.so.2", "libutil.so.1", "libanl.so.1", "libnsl.so.1", "libmvec.so.1",
    "libBrokenLocale.so.1", "libstdc++.so.6", "libgcc_s.so.1",
}
_LDD_LINE = re.compile(r"^\s*(\S+)\s+=>\s+(\S+|not found)")


def is_host_library(soname):
    return soname in HOST_LIBRARIES or soname.startswith("ld-linux") or soname == "linux-vdso.so.1"


def _patchelf(*args):
    subprocess.run(["patchelf", *map(str, args)], check=True)


def needed(path):
    """The DT_NEEDED entries of one ELF file, in order."""
    out = subprocess.run(["patchelf", "--print-needed", str(path)], check=True,
                         capture_output=True, text=True).stdout
    return out.split()


def resolve(path):
    """{soname: file} for every library `path` loads, transitively, as ldd resolves them.

    A library ldd cannot find is an error naming it and the file that needs it.
    """
    out = subprocess.run(["ldd", str(path)], check=True, capture_output=True, text=True).stdout
    found = {}
    for line in out.splitlines():
        m = _LDD_LINE.match(line)
        if not m:
            continue
        soname, where = m.groups()
        if where == "not found":
            raise RuntimeError(f"{path}: needs {soname}, which ldd cannot find")
        found[soname] = Path(where).resolve()
    return found


def unique_soname(soname, file):
    """libfoo.so.1.2 -> libfoo-<8 hex of the file's sha256>.so.1.2"""
    digest = hashlib.sha256(Path(file).read_bytes()).hexdigest()[:8]
    stem, dot_so, version = soname.partition(".so")
    return f"{stem}-{digest}{dot_so}{version}"


def bundle(elf_files, libs_dir):
    """Copy what `elf_files` need into `libs_dir` and rewrite them to load those copies.

    Returns {original soname: (bundled file name, source file)}. Files in `elf_files`
    are edited in place; they must not be inside `libs_dir`.
    """
    libs_dir = Path(libs_dir)
    libs_dir.mkdir(parents=True, exist_ok=True)
    sources = {}
    for f in elf_files:
        for soname, where in resolve(f).items():
            if not is_host_library(soname):
                sources.setdefault(soname, where)

    renamed = {soname: unique_soname(soname, src) for soname, src in sources.items()}
    copies = []
    for soname, src in sources.items():
        dst = libs_dir / renamed[soname]
        shutil.copyfile(src, dst)
        os.chmod(dst, 0o755)
        _patchelf("--set-soname", dst.name, dst)
        copies.append(dst)

    for f in [*map(Path, elf_files), *copies]:
        replace = []
        for name in needed(f):
            if name in renamed:
                replace += ["--replace-needed", name, renamed[name]]
        if replace:
            _patchelf(*replace, f)
        rel = os.path.relpath(libs_dir, f.parent)
        _patchelf("--set-rpath", "$ORIGIN" if rel == "." else f"$ORIGIN/{rel}", f)
    return {s: (renamed[s], sources[s]) for s in sources}
