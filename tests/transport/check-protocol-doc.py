#!/usr/bin/env python3
"""Runs every `sh` block of docs/protocol.md against real executors and checks each block's
output against the `json` or `text` block that follows it ("…" matches anything)."""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile


def start_executor(executor, plugin, workdir, token=None):
    args = [executor, "--listen", "127.0.0.1:0", "--plugin", plugin]
    if token:
        path = os.path.join(workdir, "token")
        with open(path, "w") as f:
            f.write(token + "\n")
        args += ["--token-file", path]
    log = open(os.path.join(workdir, "executor.log"), "ab")
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=log)
    line = proc.stdout.readline().decode()
    if not line.startswith("listening on "):
        raise SystemExit(f"executor did not start: {line!r}")
    return proc, line[len("listening on "):].strip()


def blocks(markdown):
    """(language, body) for each fenced block, in order."""
    return [(m.group(1), m.group(2))
            for m in re.finditer(r"^```(\w*)\n(.*?)^```$", markdown, re.S | re.M)]


def pattern(expected):
    return re.compile(".*".join(re.escape(part) for part in expected.split("…")), re.S)


def json_matches(expected, actual):
    if isinstance(expected, str) and "…" in expected:
        return isinstance(actual, str) and pattern(expected).fullmatch(actual) is not None
    if isinstance(expected, dict):
        return (isinstance(actual, dict) and expected.keys() == actual.keys()
                and all(json_matches(expected[k], actual[k]) for k in expected))
    if isinstance(expected, list):
        if expected == ["…"]:
            return isinstance(actual, list)
        return (isinstance(actual, list) and len(expected) == len(actual)
                and all(json_matches(e, a) for e, a in zip(expected, actual)))
    return expected == actual


def check(language, expected, output):
    if language == "json":
        try:
            actual = json.loads(output)
        except json.JSONDecodeError:
            return False
        return json_matches(json.loads(expected), actual)
    lines = [l.strip() for l in output.strip().splitlines()]
    wanted = [l.strip() for l in expected.strip().splitlines()]
    return len(lines) == len(wanted) and all(
        pattern(w).fullmatch(l) for w, l in zip(wanted, lines))


def main():
    doc, executor, plugin, obj = sys.argv[1:5]
    markdown = open(doc).read()
    workdir = tempfile.mkdtemp(prefix="courier-protocol-doc-")
    plain, address = start_executor(executor, plugin, workdir)
    secured, secured_address = start_executor(executor, plugin, workdir, token="doc-token")
    state = os.path.join(workdir, "state.sh")
    with open(state, "w") as f:
        f.write(f"A={address}\nTA={secured_address}\nTOKEN=doc-token\nOBJ={obj}\n")
    failures = 0
    try:
        fenced = blocks(markdown)
        ran = 0
        for index, (language, body) in enumerate(fenced):
            if language != "sh":
                continue
            ran += 1
            script = f"set -euo pipefail\nset -a\nsource {state}\n{body}\nexport -p > {state}\n"
            result = subprocess.run(["bash", "-c", script], cwd=workdir, capture_output=True,
                                    text=True, timeout=60)
            if result.returncode != 0:
                print(f"block {index} failed ({result.returncode}):\n{body}\n{result.stderr}")
                failures += 1
                continue
            following = fenced[index + 1] if index + 1 < len(fenced) else ("", "")
            if following[0] in ("json", "text") and not check(following[0], following[1],
                                                               result.stdout):
                print(f"block {index} printed:\n{result.stdout}\nexpected:\n{following[1]}")
                failures += 1
        print(f"ran {ran} sh blocks, {failures} failed")
        if ran == 0:
            failures += 1
    finally:
        for proc in (plain, secured):
            proc.terminate()
            proc.wait(timeout=10)
        shutil.rmtree(workdir, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
