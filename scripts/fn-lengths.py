#!/usr/bin/env python3
"""The length of every function in shipped code, from its `fn` line to its closing brace.

Shipped code is every `*.rs` under the crates' `src/` directories outside test code:
files named `tests.rs` or under a `tests/` directory, inline `#[cfg(test)] mod ... { }`
blocks, and test support (`testing/`). Strings, characters and comments are blanked
before braces are matched, so a `{` in a string or a comment does not count.

    scripts/fn-lengths.py [--top N] [--max LINES] [ROOT...]

Prints the count over 40, 60, 80 and 100 lines and the N longest (default 15); with
`--max`, fails if any function is longer than LINES (CI runs it with 100). Standard
library only, so it runs before anything is built.
"""

import os
import re
import sys

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
FN = re.compile(r"\bfn\s+([A-Za-z_][A-Za-z0-9_]*)")


def blank(text):
    """The text with comments, strings and char literals replaced by spaces (newlines
    kept, so line numbers hold)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "r" and re.match(r'r#*"', text[i:]) and (i == 0 or not text[i - 1].isalnum()):
            m = re.match(r'r(#*)"', text[i:])
            end = '"' + m.group(1)
            j = text.find(end, i + len(m.group(0)))
            j = n if j < 0 else j + len(end)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            j += 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "'":
            # A char literal ('x', '\n', '\u{..}') or a lifetime ('a): only the former is
            # closed by a quote within a few characters.
            m = re.match(r"'(\\u\{[0-9a-fA-F]+\}|\\.|[^\\'])'", text[i:])
            if m:
                out.append(" " * len(m.group(0)))
                i += len(m.group(0))
            else:
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def drop_test_modules(code):
    """Blank inline `#[cfg(test)] mod x { ... }` blocks."""
    lines = code.split("\n")
    i = 0
    while i < len(lines):
        if lines[i].strip() == "#[cfg(test)]" and i + 1 < len(lines) and re.match(
            r"\s*(pub(\([a-z]+\))? )?mod \w+ \{", lines[i + 1]
        ):
            depth = 0
            j = i + 1
            while j < len(lines):
                depth += lines[j].count("{") - lines[j].count("}")
                lines[j] = ""
                if depth <= 0 and "{" not in lines[j]:
                    break
                j += 1
            i = j
        i += 1
    return "\n".join(lines)


def functions(path, rel):
    with open(path, encoding="utf-8") as f:
        code = drop_test_modules(blank(f.read()))
    for m in FN.finditer(code):
        start = code.count("\n", 0, m.start()) + 1
        # The body opens at the first `{` after the signature, unless a `;` (a trait's
        # declaration) comes first.
        k = m.end()
        while k < len(code) and code[k] not in "{;":
            k += 1
        if k >= len(code) or code[k] == ";":
            continue
        depth, j = 0, k
        while j < len(code):
            if code[j] == "{":
                depth += 1
            elif code[j] == "}":
                depth -= 1
                if depth == 0:
                    break
            j += 1
        end = code.count("\n", 0, j) + 1
        yield end - start + 1, f"{rel}:{start}", m.group(1)


def shipped_files(roots):
    for root in roots:
        for dirpath, dirs, files in os.walk(root):
            dirs[:] = sorted(d for d in dirs if d not in ("tests", "testing"))
            for name in sorted(files):
                if name.endswith(".rs") and name != "tests.rs":
                    path = os.path.join(dirpath, name)
                    yield path, os.path.relpath(path, HERE)


def default_roots():
    roots = [os.path.join(HERE, "src")]
    crates = os.path.join(HERE, "crates")
    if os.path.isdir(crates):
        for c in sorted(os.listdir(crates)):
            if c.endswith("test-support"):
                continue
            src = os.path.join(crates, c, "src")
            if os.path.isdir(src):
                roots.append(src)
    return [r for r in roots if os.path.isdir(r)]


def main(argv):
    top, limit, roots = 15, None, []
    i = 0
    while i < len(argv):
        if argv[i] == "--top":
            top, i = int(argv[i + 1]), i + 2
        elif argv[i] == "--max":
            limit, i = int(argv[i + 1]), i + 2
        else:
            roots.append(argv[i])
            i += 1
    found = sorted(
        (f for path, rel in shipped_files(roots or default_roots()) for f in functions(path, rel)),
        key=lambda f: (-f[0], f[1]),
    )
    over = {k: sum(1 for f in found if f[0] > k) for k in (40, 60, 80, 100)}
    print(
        f"{len(found)} functions; over 40 lines: {over[40]}, over 60: {over[60]}, "
        f"over 80: {over[80]}, over 100: {over[100]}"
    )
    for length, where, name in found[:top]:
        print(f"{length:5} {where} {name}")
    if limit is not None:
        long = [f for f in found if f[0] > limit]
        if long:
            print(f"fn-lengths: {len(long)} shipped functions over {limit} lines", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
