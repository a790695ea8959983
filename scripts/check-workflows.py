#!/usr/bin/env python3
"""Checks the GitHub Actions workflows offline, beside actionlint (scripts/test.sh runs both):
each file against the workflow JSON schema (check-jsonschema's bundled copy), every
`run:` script with shellcheck (expressions stood in for), and every `steps.ID` and
`needs.JOB` an expression names exists where it is used.

A second opinion beside actionlint: the schema here is check-jsonschema's copy, not
actionlint's own.
Exits 1 listing every problem."""

import re
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")


def scripts_and_refs(path):
    doc = yaml.safe_load(path.read_text())
    problems = []
    jobs = doc.get("jobs") or {}
    for job_id, job in jobs.items():
        step_ids = {s["id"] for s in job.get("steps", []) if "id" in s}
        needs = job.get("needs") or []
        needs = [needs] if isinstance(needs, str) else needs
        for n in needs:
            if n not in jobs:
                problems.append(f"{path.name}: job {job_id} needs {n}, which is not a job")
        text = yaml.safe_dump(job)
        for expr in EXPRESSION.findall(text):
            for step in re.findall(r"\bsteps\.([A-Za-z0-9_-]+)\.", expr):
                if step not in step_ids:
                    problems.append(f"{path.name}: job {job_id} names steps.{step}, which it has not")
            for need in re.findall(r"\bneeds\.([A-Za-z0-9_-]+)\.", expr):
                if need not in needs:
                    problems.append(f"{path.name}: job {job_id} names needs.{need} without needing it")
        for i, step in enumerate(job.get("steps", [])):
            if "run" in step:
                script = EXPRESSION.sub("EXPR", step["run"])
                problems.extend(shellcheck(f"{path.name}: {job_id} step {i + 1}", script))
    return problems


def shellcheck(where, script):
    with tempfile.NamedTemporaryFile("w", suffix=".sh") as f:
        f.write("#!/usr/bin/env bash\nset -e\n" + script)
        f.flush()
        run = subprocess.run(["shellcheck", "-S", "warning", f.name], capture_output=True, text=True)
    if run.returncode == 0:
        return []
    return [f"{where}: shellcheck:\n{run.stdout.replace(f.name, 'run')}"]


def main():
    files = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
    if not files:
        print("no workflows", file=sys.stderr)
        return 1
    schema = subprocess.run(
        ["check-jsonschema", "--builtin-schema", "vendor.github-workflows", *map(str, files)],
        capture_output=True,
        text=True,
    )
    problems = [] if schema.returncode == 0 else [schema.stdout + schema.stderr]
    for path in files:
        problems.extend(scripts_and_refs(path))
    for p in problems:
        print(p, file=sys.stderr)
    if problems:
        return 1
    print(f"workflows: {len(files)} files, schema, run scripts and references checked")
    return 0


if __name__ == "__main__":
    sys.exit(main())
