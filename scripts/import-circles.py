#!/usr/bin/env python3
"""Lists the import circles between the modules of each crate of the workspace.

A module imports another when its file names a path into it (`use crate::a::b`,
`super::x`, `self::x`, or a child module's name followed by `::`). A circle is a set of
modules that reach each other (a strongly connected component of more than one module);
a parent that declares a child (`mod child;`) does not import it by that alone, nor by
re-exporting its names (`pub use child::Name;`), unless it also uses such a name itself.

    python3 scripts/import-circles.py [--edges] [CRATES_DIR]   # exit 1 when there is a circle
    python3 scripts/import-circles.py --self-test              # the rules on a made-up crate
"""

import re
import sys
from pathlib import Path

USE = re.compile(r"(?<!pub )(?<!\) )\buse\s+((?:crate|super|self)\b[^;]*);", re.S)
REEXPORT = re.compile(r"\bpub(?:\([^)]*\))?\s+use\s+([^;]*);", re.S)
PATH = re.compile(r"\b((?:crate|super|self)(?:::[A-Za-z_][A-Za-z0-9_]*)+)")
MOD = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+([a-z_][a-z0-9_]*)\s*;", re.M)
COMMENT = re.compile(r"//[^\n]*")


def modules(src: Path) -> dict:
    """Module path (tuple) -> file, for every module file under `src`."""
    found = {}
    for f in src.rglob("*.rs"):
        rel = f.relative_to(src).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] in ("mod", "lib", "main"):
            parts = parts[:-1]
        found[tuple(parts)] = f
    return found


def expand(tree: str) -> list:
    """`crate::{a, b::{c, d}}` -> ['crate::a', 'crate::b::c', 'crate::b::d']."""
    tree = re.sub(r"\s+", "", tree)
    i = tree.find("{")
    if i < 0:
        return [re.sub(r"as\w+$", "", tree)]
    head, body = tree[:i], tree[i + 1 : tree.rfind("}")]
    parts, depth, cur = [], 0, ""
    for ch in body:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += ch == "{"
        depth -= ch == "}"
        cur += ch
    parts.append(cur)
    return [p for part in parts if part for p in expand(head + part)]


def reexports(mods: dict) -> dict:
    """(module, name) -> the path a `pub use` in that module re-exports under that name."""
    alias = {}
    for here, f in mods.items():
        for tree in REEXPORT.findall(COMMENT.sub("", f.read_text())):
            for p in expand(tree):
                if p.endswith("::*"):
                    continue
                name = p.split("::")[-1]
                if not p.startswith(("crate", "super", "self")):
                    p = "self::" + p
                alias[(here, name)] = p
    return alias


def resolve(path: str, here: tuple, mods: dict, alias: dict, depth: int = 0):
    """The module a path leads into (through re-exports, to where it is defined)."""
    segs = path.split("::")
    if segs[0] == "crate":
        base, rest = (), segs[1:]
    else:
        base = here
        while segs and segs[0] in ("super", "self"):
            if segs[0] == "super":
                base = base[:-1]
            segs = segs[1:]
        rest = segs
    best, n = base, 0
    while n < len(rest) and best + (rest[n],) in mods:
        best, n = best + (rest[n],), n + 1
    if n < len(rest) and (best, rest[n]) in alias and depth < 8:
        again = alias[(best, rest[n])] + "".join("::" + r for r in rest[n + 1 :])
        return resolve(again, best, mods, alias, depth + 1)
    return best


def edges(mods: dict) -> dict:
    """Module -> the modules it imports; a `pub use` re-export is not an import."""
    alias = reexports(mods)
    graph = {m: set() for m in mods}
    for here, f in mods.items():
        text = COMMENT.sub("", f.read_text())
        text = re.sub(r"#\[cfg\(test\)\]\s*mod\s+\w+\s*\{.*", "", text, flags=re.S)
        paths = [p for u in USE.findall(text) for p in expand(u)]
        paths += PATH.findall(REEXPORT.sub("", USE.sub("", text)))
        for child in MOD.findall(text):
            if here + (child,) in mods:
                code = REEXPORT.sub("", text)
                paths += [f"self::{child}" for _ in re.findall(rf"(?<![:\w]){child}::", code)]
        # A `pub use` is no import by itself, but a module that re-exports a name and
        # also uses it in its own code depends on where that name is defined.
        own = MOD.sub("", REEXPORT.sub("", text))
        for tree in REEXPORT.findall(text):
            for p in expand(tree):
                name = re.sub(r"^.*::", "", p.split(" as ")[0])
                if name != "*" and re.search(rf"(?<![:\w]){name}\b", own):
                    paths.append(p if p.startswith(("crate", "super", "self")) else "self::" + p)
        for p in paths:
            target = resolve(p, here, mods, alias)
            if target is not None and target != here and target in mods:
                graph[here].add(target)
    return graph


def circles(graph: dict) -> list:
    """Tarjan's strongly connected components of more than one module."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in graph:
        if v not in index:
            visit(v)
    return out


def self_test() -> int:
    """The circle this script once missed (issue 53): a parent that uses a name it
    re-exports from a child, whose import chain leads back to the parent."""
    import tempfile

    files = {
        "lib.rs": "mod side;\nmod stages;\n",
        "side/mod.rs": "mod sections;\npub use sections::Section;\npub struct Side(Section);\npub enum Role { A }\n",
        "side/sections.rs": "use crate::stages::Stage;\npub struct Section(Stage);\n",
        "stages.rs": "use crate::side::Role;\npub struct Stage(Role);\n",
    }
    with tempfile.TemporaryDirectory() as d:
        for name, text in files.items():
            f = Path(d) / "k" / "src" / name
            f.parent.mkdir(parents=True, exist_ok=True)
            f.write_text(text)
        found = circles(edges(modules(Path(d) / "k" / "src")))
        # A re-export alone, and a re-exported name that is also a module's, are no import.
        (Path(d) / "k" / "src" / "side/mod.rs").write_text(
            "mod sections;\npub use sections::{sections, Section};\npub enum Role { A }\n"
        )
        alone = circles(edges(modules(Path(d) / "k" / "src")))
    want = [[("side",), ("side", "sections"), ("stages",)]]
    ok = found == want and alone == []
    print(f"self-test: {'ok' if ok else 'FAILED'} (found {found}, then {alone})")
    return 0 if ok else 1


def main() -> int:
    if "--self-test" in sys.argv:
        return self_test()
    args = [a for a in sys.argv[1:] if a != "--edges"]
    root = Path(args[0] if args else "crates")
    total = 0
    name = lambda m: "::".join(m) or "(root)"
    for src in sorted(root.glob("*/src")):
        graph = edges(modules(src))
        for comp in circles(graph):
            total += 1
            print(f"{src.parent.name}: {', '.join(name(m) for m in comp)}")
            if "--edges" in sys.argv:
                for m in comp:
                    inside = sorted(name(t) for t in graph[m] if t in comp)
                    print(f"    {name(m)} -> {', '.join(inside)}")
    print(f"{total} import circle(s)")
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main())
