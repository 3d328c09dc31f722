#!/usr/bin/env python3
"""Runs every example of docs/guide.md with the build's tools and checks that each prints
what the guide shows, and that the guide names every op of the generated dialect reference
and every `catalyst.*` attribute the dialect accepts.

The guide's fenced blocks follow one convention:
- ```mlir file=NAME (or ```c file=NAME): a file, written to a scratch directory where the
  guide reaches it; every file must be named by a later `sh` block, so none goes unrun.
- ```sh: commands, run in bash (errexit, pipefail) in the scratch directory with the
  build's tools first on PATH and $EXECUTOR the address of a running courier-executor.
  They must succeed, or end with the status `exit=N` names (```sh exit=1).
- ```python: a program, run by the interpreter the Python package was built for, in the
  same directory and environment, with the package (build/python) on PYTHONPATH; it must
  succeed. When the build has no Python package, these blocks are skipped and say so.
- The ```text block right after an `sh` or `python` block is what it prints, stdout and
  stderr together, line by line; "…" matches anything within a line, and a line holding
  only "…" matches any number of lines. An `sh` block with no `text` block after it must
  print nothing.

usage: check-guide.py [--examples-only] GUIDE BIN_DIR DOC_DIR SOURCE_DIR [PYTHON PYTHONPATH]

--examples-only runs a page's examples by the same convention (docs/writing.md) without
asking it to name every op and attribute.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from doc_examples import start_server, stop_servers  # noqa: E402

FENCE = re.compile(r"^```(\w*)([^\n]*)\n(.*?)^```$", re.S | re.M)


def fenced_blocks(markdown):
    """(language, options, body, line) for each fenced block, in order."""
    found = []
    for m in FENCE.finditer(markdown):
        options = dict(word.split("=", 1) for word in m.group(2).split() if "=" in word)
        found.append((m.group(1), options, m.group(3), markdown.count("\n", 0, m.start()) + 1))
    return found


def line_matches(wanted, line):
    parts = [re.escape(part) for part in wanted.split("…")]
    return re.fullmatch(".*".join(parts), line) is not None


def output_matches(wanted, lines):
    """Whether `lines` are `wanted`, a line of only "…" standing for any number of lines."""
    if not wanted:
        return not lines
    if wanted[0] == "…":
        return any(output_matches(wanted[1:], lines[skip:]) for skip in range(len(lines) + 1))
    return bool(lines) and line_matches(wanted[0], lines[0]) and output_matches(wanted[1:],
                                                                               lines[1:])


def run_examples(blocks, workdir, env, python=None):
    """Writes the files and runs the commands and programs in order; returns the list of
    failures."""
    failures = []
    ran = 0
    skipped = 0
    unused = {}
    for index, (language, options, body, line) in enumerate(blocks):
        if "file" in options:
            name = options["file"]
            with open(os.path.join(workdir, name), "w") as f:
                f.write(body)
            unused[name] = line
            continue
        if language not in ("sh", "python"):
            continue
        if language == "python" and not python:
            skipped += 1
            continue
        ran += 1
        for name in list(unused):
            if re.search(r"(^|[\s/<\"'])" + re.escape(name) + r"($|[\s>\"'])", body, re.M):
                del unused[name]
        command = [python, "-c", body] if language == "python" else [
            "bash", "-e", "-o", "pipefail", "-c", body]
        result = subprocess.run(command, cwd=workdir, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, timeout=300)
        status = int(options.get("exit", "0"))
        following = blocks[index + 1] if index + 1 < len(blocks) else ("", {}, "", 0)
        expected = following[2] if following[0] == "text" else ""
        printed = [l.rstrip() for l in result.stdout.rstrip("\n").splitlines()]
        wanted = [l.rstrip() for l in expected.rstrip("\n").splitlines()]
        if result.returncode != status:
            failures.append(f"line {line}: the commands ended with status {result.returncode}, "
                            f"the guide says {status}:\n{body}printed:\n{result.stdout}")
        elif not output_matches(wanted, printed):
            failures.append(f"line {line}: the commands\n{body}printed:\n{result.stdout}"
                            f"but the guide shows:\n{expected}")
    for name, line in unused.items():
        failures.append(f"line {line}: the file {name} is never used by a command")
    if ran == 0:
        failures.append("the page has no commands")
    print(f"ran {ran} command and program blocks")
    if skipped:
        print(f"skipped {skipped} Python blocks: this build has no Python package")
    return failures


def check_coverage(markdown, doc_dir, source_dir):
    """Every op of the generated reference and every catalyst.* attribute the dialect's
    sources name must appear in the guide; returns the list of failures."""
    failures = []
    ops = set()
    for root, _, files in os.walk(doc_dir):
        for name in files:
            if name.endswith(".md"):
                with open(os.path.join(root, name)) as f:
                    ops.update(re.findall(r"^### `([a-z_]+\.[a-z_]+)`", f.read(), re.M))
    if not ops:
        failures.append(f"no ops found in the generated reference under {doc_dir}")
    attributes = set()
    for name in ("Catalyst.td", "CatalystDialect.cpp"):
        with open(os.path.join(source_dir, "dialect", name)) as f:
            attributes.update(re.findall(r"\"(catalyst\.[a-z_]+)\"", f.read()))
    for name in sorted(ops | attributes):
        if not re.search(r"`" + re.escape(name) + r"[`\s=]", markdown):
            failures.append(f"the guide never names `{name}`")
    return failures


def main():
    args = sys.argv[1:]
    examples_only = args[:1] == ["--examples-only"]
    if examples_only:
        args = args[1:]
    guide, bin_dir, doc_dir, source_dir = args[0:4]
    python, python_path = (args[4:6] + [None, None])[:2]
    markdown = open(guide).read()
    workdir = tempfile.mkdtemp(prefix="courier-guide-")
    env = dict(os.environ)
    env["PATH"] = os.path.abspath(bin_dir) + os.pathsep + env.get("PATH", "")
    env["XDG_CACHE_HOME"] = os.path.join(workdir, ".cache")
    if python_path:
        env["PYTHONPATH"] = python_path
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    failures = [] if examples_only else check_coverage(markdown, doc_dir, source_dir)
    executor = None
    try:
        executor, address = start_server(
            [os.path.join(bin_dir, "courier-executor"), "--listen", "127.0.0.1:0"],
            os.path.join(workdir, ".executor.log"), "courier-executor")
        env["EXECUTOR"] = address
        failures += run_examples(fenced_blocks(markdown), workdir, env, python)
    finally:
        if executor:
            stop_servers([executor], timeout=20)
        shutil.rmtree(workdir, ignore_errors=True)
    for failure in failures:
        print("FAILED: " + failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
