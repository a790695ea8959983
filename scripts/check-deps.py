#!/usr/bin/env python3
"""Checks Cargo.lock's packages against deps-policy.toml, offline: licenses, sources
and duplicate versions. Reads `cargo metadata --offline --locked`; exits 1 listing
every violation."""

import json
import re
import subprocess
import sys
import tomllib
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# cargo's source ids for the crates.io index (git and sparse protocols).
REGISTRY_IDS = {"crates.io": re.compile(r"^(registry|sparse)\+https://[^ ]*crates\.io[-/]index/?$|^sparse\+https://index\.crates\.io/$")}


def tokens(expr):
    return re.findall(r"\(|\)|[^\s()]+", expr.replace("/", " OR "))


def satisfiable(expr, allowed):
    """Whether an SPDX expression can be met using only allowed licenses. `A WITH B`
    counts as its own identifier; the old `A/B` form means `A OR B`."""
    toks = tokens(expr)
    pos = 0

    def primary():
        nonlocal pos
        if pos >= len(toks):
            raise ValueError("unexpected end")
        tok = toks[pos]
        pos += 1
        if tok == "(":
            value = disjunction()
            if pos >= len(toks) or toks[pos] != ")":
                raise ValueError("missing )")
            pos += 1
            return value
        if pos + 1 < len(toks) and toks[pos] == "WITH":
            tok = f"{tok} WITH {toks[pos + 1]}"
            pos += 2
        return tok in allowed

    def conjunction():
        nonlocal pos
        value = primary()
        while pos < len(toks) and toks[pos] == "AND":
            pos += 1
            value = primary() and value
        return value

    def disjunction():
        nonlocal pos
        value = conjunction()
        while pos < len(toks) and toks[pos] == "OR":
            pos += 1
            value = conjunction() or value
        return value

    value = disjunction()
    if pos != len(toks):
        raise ValueError(f"trailing {toks[pos:]}")
    return value


def self_test():
    """The expression reader on the forms the policy depends on."""
    ok = {"MIT", "Apache-2.0", "Apache-2.0 WITH LLVM-exception"}
    for expr, want in [
        ("MIT OR GPL-3.0", True),
        ("GPL-3.0", False),
        ("(MIT OR Apache-2.0) AND GPL-2.0", False),
        ("MIT AND Apache-2.0", True),
        ("MIT/Apache-2.0", True),
        ("Apache-2.0 WITH LLVM-exception OR GPL-2.0", True),
        ("GPL-2.0 WITH Classpath-exception-2.0", False),
    ]:
        assert satisfiable(expr, ok) == want, (expr, want)


def main():
    self_test()
    policy = tomllib.loads((ROOT / "deps-policy.toml").read_text())
    # The build host's platform only: offline, cargo has just the crates this platform
    # builds with (a fresh machine never downloaded the Windows-only ones), and those
    # are what ships.
    host = next(
        line.split(": ", 1)[1]
        for line in subprocess.run(["rustc", "-vV"], check=True, capture_output=True, text=True).stdout.splitlines()
        if line.startswith("host: ")
    )
    meta = json.loads(
        subprocess.run(
            ["cargo", "metadata", "--offline", "--locked", "--format-version", "1", "--filter-platform", host],
            cwd=ROOT,
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    )
    allowed = set(policy["licenses"]["allow"])
    registries = [REGISTRY_IDS[r] for r in policy["sources"]["allow-registries"]]
    paths = set(policy["sources"]["allow-path"])
    problems = []
    versions = defaultdict(set)
    for p in meta["packages"]:
        name, version = p["name"], p["version"]
        versions[name].add(version)
        lic = p.get("license")
        if not lic:
            problems.append(f"{name} {version}: no SPDX license expression")
        else:
            try:
                if not satisfiable(lic, allowed):
                    problems.append(f"{name} {version}: license {lic!r} is not allowed")
            except ValueError as e:
                problems.append(f"{name} {version}: cannot read license {lic!r}: {e}")
        source = p.get("source")
        if source is None:
            if name not in paths:
                problems.append(f"{name} {version}: a path dependency outside this repository's crates")
        elif not any(r.match(source) for r in registries):
            problems.append(f"{name} {version}: source {source} is not an allowed registry")
    listed = policy.get("duplicates", {})
    for name, vs in sorted(versions.items()):
        if len(vs) > 1:
            want = set(listed.get(name, {}).get("versions", []))
            if want != vs:
                problems.append(
                    f"{name}: versions {sorted(vs)} in the tree; deps-policy.toml allows {sorted(want) or 'one'}"
                )
    for name in sorted(set(listed) - {n for n, vs in versions.items() if len(vs) > 1}):
        problems.append(f"{name}: listed as a duplicate in deps-policy.toml, but the tree has one version")
    if problems:
        print("dependency policy violations:", *problems, sep="\n  ", file=sys.stderr)
        return 1
    dup = sum(1 for vs in versions.values() if len(vs) > 1)
    print(f"dependency policy: {len(meta['packages'])} packages, licenses and sources allowed, {dup} listed duplicates")
    return 0


if __name__ == "__main__":
    sys.exit(main())
