#!/usr/bin/env python3
"""Runs every `sh` block of docs/rest.md, in order, against real courier-serve processes and
checks each block's output against the `json` or `text` block that follows it ("…" matches
anything). The block runner and matcher are tests/transport/check-protocol-doc.py's."""
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile

_spec = importlib.util.spec_from_file_location(
    "check_protocol_doc",
    os.path.join(os.path.dirname(__file__), "..", "transport", "check-protocol-doc.py"))
_protocol = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_protocol)
blocks, check = _protocol.blocks, _protocol.check


def start_serve(serve, workdir, name, args):
    log = open(os.path.join(workdir, name + ".log"), "ab")
    proc = subprocess.Popen([serve, "--listen", "127.0.0.1:0", "--cache-dir",
                             os.path.join(workdir, "cache")] + args,
                            stdout=subprocess.PIPE, stderr=log)
    line = proc.stdout.readline().decode()
    if not line.startswith("listening on "):
        raise SystemExit(f"courier-serve {name} did not start: {line!r}")
    return proc, line[len("listening on "):].strip()


def main():
    doc, serve, samples = sys.argv[1:4]
    markdown = open(doc).read()
    workdir = tempfile.mkdtemp(prefix="courier-rest-doc-")
    # The examples name files as a reader in the repository root would.
    os.symlink(os.path.abspath(samples), os.path.join(workdir, "samples"))
    watch = os.path.join(workdir, "models")
    os.mkdir(watch)
    shutil.copy(os.path.join(samples, "02-local-kernel", "app.mlir"),
                os.path.join(watch, "kernel.mlir"))
    with open(os.path.join(workdir, "token"), "w") as f:
        f.write("doc-token\n")
    servers = {
        "A": [],
        "TA": ["--token-file", os.path.join(workdir, "token")],
        "LA": ["--max-modules", "1", "--max-body-bytes", "65536"],
        "SA": ["--compile-timeout-ms", "1"],
        "WA": ["--watch", watch],
    }
    procs, addresses = [], {}
    failures = 0
    try:
        for name, args in servers.items():
            proc, address = start_serve(serve, workdir, name, args)
            procs.append(proc)
            addresses[name] = address
        state = os.path.join(workdir, "state.sh")
        with open(state, "w") as f:
            for name, address in addresses.items():
                f.write(f"{name}={address}\n")
            f.write(f"TOKEN=doc-token\nMODELS={watch}\n")
        fenced = blocks(markdown)
        ran = 0
        for index, (language, body) in enumerate(fenced):
            if language != "sh":
                continue
            ran += 1
            script = f"set -euo pipefail\nset -a\nsource {state}\n{body}\nexport -p > {state}\n"
            result = subprocess.run(["bash", "-c", script], cwd=workdir, capture_output=True,
                                    text=True, timeout=120)
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
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=20)
        shutil.rmtree(workdir, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
