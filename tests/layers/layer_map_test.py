#!/usr/bin/env python3
"""The layer map of docs/design.md stays true (issue 41).

    layer_map_test.py SOURCE_DIR            check the tree; exit 1 naming every violation
    layer_map_test.py SOURCE_DIR --planted  also prove the check fails: plant each kind of
                                            violation in a scratch copy and expect its message

The map is the fenced block after the "layer map" comment in docs/design.md: one row per file,
"FLOOR PATH PURPOSE". Checked, by reading #include lines only:
  * every file under src/ (and every public header without a source file) has a row, and every
    row names a file that exists, with a purpose;
  * a file includes only files on its floor or below (include/overlay/X.hpp is on src/X.cpp's
    floor), and the includes form no cycle;
  * a source of the overlay_base library (its add_library list in CMakeLists.txt) includes only
    files of that library;
  * the design's sentence on that library names its files and counts them, and the library's
    whole (overlay_base and overlay_core), as CMakeLists.txt builds them;
  * the front end stays thin (issue 64): no file of src/cli over 300 lines (its reports write
    their own JSON in the library);
  * no statement of src/ strings assignments together with the comma operator (`a = x, b = y;`,
    alone or as an if's body): one assignment a statement (issue 64).
"""
import os
import re
import shutil
import sys
import tempfile

ROW = re.compile(r"^(\d+)\s+(\S+)\s+(.*\S)\s*$")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def read_map(root):
    text = open(os.path.join(root, "docs/design.md"), encoding="utf-8").read()
    m = re.search(r"<!-- layer map:[^>]*-->\s*```\n(.*?)```", text, re.S)
    if not m:
        raise SystemExit("docs/design.md has no layer map block")
    rows, problems = {}, []
    for line in m.group(1).splitlines():
        r = ROW.match(line)
        if not r:
            problems.append("layer map: a row is not 'FLOOR PATH PURPOSE': %r" % line)
            continue
        if r.group(2) in rows:
            problems.append("layer map: %s has two rows" % r.group(2))
        rows[r.group(2)] = int(r.group(1))
    return rows, problems


def files_under(root, top, exts):
    out = []
    for d, _, names in os.walk(os.path.join(root, top)):
        out += [os.path.relpath(os.path.join(d, n), root) for n in names if n.endswith(exts)]
    return sorted(out)


def node(root, path):
    """The map row a file belongs to: a header goes with its source file where there is one."""
    if path.startswith("include/overlay/"):
        src = "src/" + path[len("include/overlay/") : -len(".hpp")] + ".cpp"
        return src if os.path.exists(os.path.join(root, src)) else path
    if path.endswith(".hpp") and os.path.exists(os.path.join(root, path[:-4] + ".cpp")):
        return path[:-4] + ".cpp"
    return path


def includes(root, path):
    """The project files `path` includes, as repository paths."""
    out = []
    for line in open(os.path.join(root, path), encoding="utf-8", errors="replace"):
        m = INCLUDE.match(line)
        if not m:
            continue
        inc = m.group(1)
        if inc.startswith("overlay/"):
            out.append("include/" + inc)
        else:
            local = os.path.normpath(os.path.join(os.path.dirname(path), inc))
            if os.path.exists(os.path.join(root, local)):
                out.append(local)
    return out


def base_library(root):
    text = open(os.path.join(root, "CMakeLists.txt"), encoding="utf-8").read()
    m = re.search(r"add_library\(overlay_base STATIC(.*?)\)", text, re.S)
    return set(re.findall(r"src/\S+\.cpp", m.group(1))) if m else set()


def core_library(root):
    text = open(os.path.join(root, "CMakeLists.txt"), encoding="utf-8").read()
    m = re.search(r"add_library\(overlay_core STATIC(.*?)\n\)", text, re.S)
    return set(re.findall(r"src/\S+\.cpp", m.group(1))) if m else set()


def library_counts(root):
    """The design's `overlay_base` (LIST) ... compiles N files, not M: as CMakeLists.txt says."""
    text = open(os.path.join(root, "docs/design.md"), encoding="utf-8").read()
    m = re.search(r"`overlay_base` \(([^)]*)\):.*?compiles (\d+) files, not (\d+)\.", text, re.S)
    if not m:
        return [
            "docs/design.md has no sentence on overlay_base's files ('`overlay_base` (...) ... compiles N files, not M.')"
        ]
    base, core = base_library(root), core_library(root)
    named = {"src/%s.cpp" % n.strip() for n in m.group(1).replace("\n", " ").split(",")}
    problems = []
    if named != base:
        problems.append(
            "docs/design.md lists overlay_base as %s; CMakeLists.txt builds %s"
            % (", ".join(sorted(named)), ", ".join(sorted(base)))
        )
    if (int(m.group(2)), int(m.group(3))) != (len(base), len(base) + len(core)):
        problems.append(
            "docs/design.md counts %s files of overlay_base, not %s in the library; CMakeLists.txt builds %d, not %d"
            % (m.group(2), m.group(3), len(base), len(base) + len(core))
        )
    return problems


CLI_MAX_LINES = 300


def thin_front_end(root):
    problems = []
    for f in files_under(root, "src/cli", (".cpp", ".hpp")):
        n = sum(1 for _ in open(os.path.join(root, f), encoding="utf-8", errors="replace"))
        if n > CLI_MAX_LINES:
            problems.append("%s has %d lines, more than the front end's %d" % (f, n, CLI_MAX_LINES))
    return problems


# An expression statement, alone on its line or an if/else body on the if's line, whose top level
# holds a comma and an assignment after it: `a = x, b = y;`. Declarations (`int a = 1, b = 2;`)
# and for-headers are not statements of this kind.
COMMA_STATEMENT = re.compile(r"^\s*(?:(?:if|else if) \(.*\) |else )?[A-Za-z_][\w.\->\[\]]* = [^;]*;\s*(?://.*)?$")


def top_level_commas(text):
    depth, quote, out = 0, None, []
    for i, c in enumerate(text):
        if quote:
            quote = None if c == quote and text[i - 1] != "\\" else quote
        elif c in "\"'":
            quote = c
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == "," and depth == 0:
            out.append(i)
    return out


def comma_statements(root):
    problems = []
    for f in files_under(root, "src", (".cpp", ".hpp")):
        for n, line in enumerate(open(os.path.join(root, f), encoding="utf-8", errors="replace"), 1):
            code = line.split("//", 1)[0] if '"' not in line else line
            if not COMMA_STATEMENT.match(code) or code.lstrip().startswith(("for ", "return ")):
                continue
            body = re.sub(r"^\s*(?:(?:if|else if) \(.*\) |else )", "", code).rstrip().rstrip(";")
            if any("=" in body[c:].split(",", 2)[1] for c in top_level_commas(body) if "," in body[c:]):
                problems.append("%s:%d holds assignments strung by the comma operator: %s" % (f, n, line.strip()))
    return problems


# `if ((x = f()) == y)`, `while ((n = read(...)) < 0)`: an assignment a reader must find inside a
# condition (issue 64: one assignment a statement).
ASSIGNED_IN_CONDITION = re.compile(r"\b(?:if|while)\s*\(\s*\(\s*[\w.>\[\]-]+\s*=[^=]")


def assignments_in_conditions(root):
    problems = []
    for f in files_under(root, "src", (".cpp", ".hpp")) + files_under(root, "include/overlay", (".hpp",)):
        text = open(os.path.join(root, f), encoding="utf-8", errors="replace").read()
        for m in ASSIGNED_IN_CONDITION.finditer(text):
            n = text.count("\n", 0, m.start()) + 1
            problems.append("%s:%d assigns inside a condition: %s" % (f, n, text.splitlines()[n - 1].strip()))
    return problems


SILENT_CATCH = re.compile(r"catch\s*\([^)]*\)\s*\{((?:\s*//[^\n]*\n)*\s*)\}")
# Where nothing may be said (docs/contributing.md, "Errors"): the logger itself failed, and a
# forked child before _exit.
SILENT_CATCH_ALLOWED = {"src/error.cpp": 1, "src/store.cpp": 1}


def silent_catches(root):
    problems = []
    for f in files_under(root, "src", (".cpp", ".hpp")):
        text = open(os.path.join(root, f), encoding="utf-8", errors="replace").read()
        hits = [text.count("\n", 0, m.start()) + 1 for m in SILENT_CATCH.finditer(text)]
        if len(hits) > SILENT_CATCH_ALLOWED.get(f, 0):
            problems.append(
                "%s:%s drops an error in a catch that says nothing (use best_effort)" % (f, ",".join(map(str, hits)))
            )
    return problems


def check(root):
    rows, problems = read_map(root)
    files = files_under(root, "src", (".cpp", ".hpp")) + files_under(root, "include/overlay", (".hpp",))
    nodes = {}
    for f in files:
        nodes.setdefault(node(root, f), []).append(f)
    for n in sorted(nodes):
        if n not in rows:
            problems.append("%s is not in the layer map (docs/design.md)" % n)
    for n in sorted(rows):
        if n not in nodes:
            problems.append("the layer map names %s, which is not there" % n)
    base = base_library(root)
    base_nodes = {node(root, b) for b in base}
    edges = {}
    for n, members in nodes.items():
        for f in members:
            for inc in includes(root, f):
                t = node(root, inc)
                if t == n:
                    continue
                edges.setdefault(n, set()).add(t)
                if n in rows and t in rows and rows[t] > rows[n]:
                    problems.append("%s (floor %d) includes %s (floor %d): a higher floor" % (f, rows[n], inc, rows[t]))
                if n in base_nodes and t not in base_nodes:
                    problems.append("%s is in overlay_base but includes %s, which is not" % (f, inc))
    problems += cycles(edges)
    problems += library_counts(root)
    problems += thin_front_end(root)
    problems += comma_statements(root)
    problems += silent_catches(root)
    problems += assignments_in_conditions(root)
    return problems


def cycles(edges):
    state, out = {}, []

    def visit(n, stack):
        state[n] = 1
        for t in sorted(edges.get(n, ())):
            if state.get(t) == 1:
                out.append("an include cycle: " + " -> ".join(stack[stack.index(t) :] + [t]))
            elif t not in state:
                visit(t, stack + [t])
        state[n] = 2

    for n in sorted(edges):
        if n not in state:
            visit(n, [n])
    return out


def planted(root):
    """Each kind of violation, planted in a scratch copy, must be reported."""
    cases = [
        (
            "an upward include",
            "src/disk.cpp",
            '#include "overlay/gc.hpp"\n',
            "src/disk.cpp (floor 1) includes include/overlay/gc.hpp (floor 9): a higher floor",
        ),
        (
            "a base file reaching the core",
            "src/manifest.cpp",
            '#include "overlay/lock.hpp"\n',
            "src/manifest.cpp is in overlay_base but includes include/overlay/lock.hpp, which is not",
        ),
        (
            "a file not in the map",
            "src/new_room.cpp",
            '#include "overlay/error.hpp"\n',
            "src/new_room.cpp is not in the layer map",
        ),
        ("a cycle", "src/lock.cpp", '#include "overlay/in_flight.hpp"\n', "an include cycle: "),
        ("a stale count", "docs/design.md", "", "docs/design.md counts 12 files of overlay_base"),
        ("a thick front end", "src/cli/main.cpp", "// padding\n" * 400, "src/cli/main.cpp has "),
        (
            "a comma statement",
            "src/words.cpp",
            "void planted(int& a, int& b) {\n  if (a) a = 1, b = 2;\n}\n",
            "src/words.cpp:2 holds assignments strung by the comma operator",
        ),
        (
            "an assignment in a condition",
            "src/words.cpp",
            "int planted(int (*f)()) {\n  int rc;\n  while ((rc = f()) == 0) {\n  }\n  return rc;\n}\n",
            "src/words.cpp:3 assigns inside a condition",
        ),
        (
            "a catch that says nothing",
            "src/words.cpp",
            "void planted() {\n  try {\n    throw 1;\n  } catch (...) {\n    // nothing to see\n  }\n}\n",
            "src/words.cpp:4 drops an error in a catch that says nothing",
        ),
    ]
    failed = 0
    for what, path, line, expect in cases:
        scratch = tempfile.mkdtemp()
        try:
            for d in ("src", "include", "docs"):
                shutil.copytree(os.path.join(root, d), os.path.join(scratch, d))
            shutil.copy(os.path.join(root, "CMakeLists.txt"), scratch)
            target = os.path.join(scratch, path)
            old = open(target).read() if os.path.exists(target) else ""
            with open(target, "w") as f:
                f.write(line + old)
            if what == "a cycle":  # on one floor, so only the cycle check can see it
                p = os.path.join(scratch, "docs/design.md")
                text = open(p).read().replace("\n2  src/lock.cpp ", "\n3  src/lock.cpp ")
                open(p, "w").write(text)
            if what == "a stale count":
                p = os.path.join(scratch, "docs/design.md")
                text = re.sub(r"compiles \d+ files, not", "compiles 12 files, not", open(p).read())
                open(p, "w").write(text)
            got = check(scratch)
            hit = [g for g in got if expect in g]
            print("planted %-32s -> %s" % (what, hit[0] if hit else "NOT REPORTED: %s" % got))
            failed += 0 if hit else 1
        finally:
            shutil.rmtree(scratch)
    return failed


def main():
    root = os.path.abspath(sys.argv[1])
    problems = check(root)
    for p in problems:
        print("layer map: " + p)
    rows, _ = read_map(root)
    print("layer map: %d files on %d floors, %d problems" % (len(rows), len(set(rows.values())), len(problems)))
    failed = planted(root) if "--planted" in sys.argv else 0
    return 1 if problems or failed else 0


if __name__ == "__main__":
    sys.exit(main())
