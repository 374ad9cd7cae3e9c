#!/usr/bin/python3
"""Checks the tree's structure against what README.md's "Layout" section documents.

  1. Layering: the ```layering block in README.md lists src/'s folders lowest floor
     first, each with the public headers (include/stoker/) it implements. A source or
     header in a folder may include its own folder's headers and those of the folders
     listed before it, never one listed after it; a public header counts as part of the
     folder that implements it, and the public headers' own includes obey the same rule.
     The tops (the CLI in src/cli, the binding in python/src, bench/, tests/, examples/)
     may include any public header; the CLI and the binding include an internal header
     only with a comment on or just above the include saying why. An `allow FOLDER ->
     HEADER` line in the block names a documented exception to the floors.
  2. Size: no C++ source or header of the library, the CLI or the binding (src/,
     include/, python/src) over 800 lines. (Test suites are not held to it: one suite a
     component reads best whole.)
  3. Duplication: no run of DUP_LINES or more identical non-trivial lines (whitespace
     and comments ignored) in two places of src/, include/ and python/src.

Exits 1 naming every breach; prints what it checked otherwise.
"""
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_LINES = 800
DUP_LINES = 8
CPP = {".h", ".cc", ".cu", ".hpp", ".cpp"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"(.*)$')


def parse_layering():
    text = (ROOT / "README.md").read_text()
    m = re.search(r"```layering\n(.*?)```", text, re.S)
    if not m:
        sys.exit("README.md has no ```layering block")
    floors, owner, allowed = [], {}, set()
    for line in m.group(1).splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("allow "):  # "allow FOLDER -> HEADER": a documented exception
            here, _, header = line[len("allow "):].partition("->")
            allowed.add((here.strip(), header.strip()))
            continue
        name, _, headers = line.partition(":")
        name = name.strip()
        floors.append(name)
        for h in headers.split():
            owner[h] = name
    return floors, owner, allowed


def sources(*dirs):
    for d in dirs:
        for p in sorted((ROOT / d).rglob("*")):
            if p.suffix in CPP and p.is_file():
                yield p


def folder_of_include(inc, owner):
    """The src/ folder an include names, or None for a top-level or outside header."""
    if inc.startswith("stoker/"):
        return owner.get(inc[len("stoker/"):], "?public:" + inc)
    first = inc.split("/", 1)[0]
    return first if "/" in inc else None


def check_layering(floors, owner, allowed, errors):
    rank = {f: i for i, f in enumerate(floors)}
    src_folders = {p.name for p in (ROOT / "src").iterdir() if p.is_dir()} - {"cli"}
    for f in sorted(src_folders - set(rank)):
        errors.append(f"layering: src/{f}/ is not in README.md's layering block")
    for h in sorted(p.name for p in (ROOT / "include/stoker").glob("*.h")):
        if h != "stoker.h" and h not in owner:
            errors.append(f"layering: include/stoker/{h} has no implementing folder in README.md's layering block")
    edges = 0
    for p in sources("src", "include", "python/src"):
        rel = p.relative_to(ROOT)
        parts = rel.parts
        if parts[0] == "src" and parts[1] != "cli":
            here = parts[1]
        elif parts[0] == "include":
            here = owner.get(p.name)
            if here is None:
                continue  # stoker.h: the umbrella
        else:
            here = None  # a top: src/cli or python/src
        lines = p.read_text(errors="replace").splitlines()
        for n, line in enumerate(lines, 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            inc, rest = m.group(1), m.group(2)
            target = folder_of_include(inc, owner)
            if target is None:
                continue
            if target.startswith("?public:"):
                errors.append(f"{rel}:{n}: includes {inc}, which no folder implements in the layering block")
                continue
            if target not in rank:
                continue  # a header beside the file (no folder), e.g. "bindings.h"
            edges += 1
            if here is None:
                documented = rest.strip().startswith("//") or (n > 1 and lines[n - 2].strip().startswith("//"))
                if not inc.startswith("stoker/") and not documented:
                    errors.append(f"{rel}:{n}: the library's door is its public headers: {inc} "
                                  "is internal (a documented exception says why in a comment on or just above the include)")
                continue
            if here not in rank:
                continue  # reported above: a folder missing from the layering block
            if rank[target] > rank[here] and (here, inc.split("/")[-1]) not in allowed:
                errors.append(f"{rel}:{n}: {here}/ includes {inc} from {target}/, a higher floor")
    return edges


def check_sizes(errors):
    n = 0
    for p in sources("src", "include", "python/src"):
        n += 1
        lines = p.read_text(errors="replace").count("\n")
        if lines > MAX_LINES:
            errors.append(f"{p.relative_to(ROOT)}: {lines} lines (over {MAX_LINES})")
    return n


TRIVIAL = re.compile(r"^(?:[{}();,\s]*|#\s*include.*|#\s*pragma.*|namespace.*|}\s*//.*|public:|private:|protected:"
                     r"|break;|return;|continue;|default:|else\s*{?|try\s*{|\}\s*catch.*|#endif.*|#else)$")


def normalised(p):
    out = []
    in_block = False
    for n, raw in enumerate(p.read_text(errors="replace").splitlines(), 1):
        line = raw
        if in_block:
            if "*/" not in line:
                continue
            line = line.split("*/", 1)[1]
            in_block = False
        line = re.sub(r"/\*.*?\*/", "", line)
        if "/*" in line:
            line, in_block = line.split("/*", 1)[0], True
        line = re.sub(r"//.*$", "", line).strip()
        if TRIVIAL.match(line):
            continue
        out.append((n, re.sub(r"\s+", " ", line)))
    return out


def check_duplicates(errors):
    seen = {}
    for p in sources("src", "include", "python/src"):
        lines = normalised(p)
        rel = str(p.relative_to(ROOT))
        last_reported = -DUP_LINES
        for i in range(len(lines) - DUP_LINES + 1):
            key = "\n".join(l for _, l in lines[i:i + DUP_LINES])
            where = (rel, lines[i][0])
            first = seen.setdefault(key, where)
            if first is not where and first[0] != rel and i - last_reported >= DUP_LINES:
                errors.append(f"{rel}:{lines[i][0]}: {DUP_LINES}+ lines also at {first[0]}:{first[1]}")
                last_reported = i


def main():
    floors, owner, allowed = parse_layering()
    errors = []
    edges = check_layering(floors, owner, allowed, errors)
    files = check_sizes(errors)
    check_duplicates(errors)
    for e in errors:
        print(e)
    if errors:
        print(f"check_structure: {len(errors)} problem(s)")
        return 1
    print(f"check_structure: {edges} includes across {len(floors)} floors ({' < '.join(floors)}) obey the "
          f"layering; {files} sources under {MAX_LINES} lines; no {DUP_LINES}-line run written twice")
    return 0


if __name__ == "__main__":
    sys.exit(main())
