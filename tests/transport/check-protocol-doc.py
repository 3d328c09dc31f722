#!/usr/bin/env python3
"""Runs every `sh` block of docs/protocol.md against real executors and checks each block's
output against the `json` or `text` block that follows it ("…" matches anything)."""
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from doc_examples import run_sh_blocks, start_server, stop_servers  # noqa: E402


def start_executor(executor, plugin, workdir, token=None):
    args = [executor, "--listen", "127.0.0.1:0", "--plugin", plugin]
    if token:
        path = os.path.join(workdir, "token")
        with open(path, "w") as f:
            f.write(token + "\n")
        args += ["--token-file", path]
    return start_server(args, os.path.join(workdir, "executor.log"), "executor")


def main():
    doc, executor, plugin, obj = sys.argv[1:5]
    markdown = open(doc).read()
    workdir = tempfile.mkdtemp(prefix="courier-protocol-doc-")
    plain, address = start_executor(executor, plugin, workdir)
    secured, secured_address = start_executor(executor, plugin, workdir, token="doc-token")
    state = os.path.join(workdir, "state.sh")
    with open(state, "w") as f:
        f.write(f"A={address}\nTA={secured_address}\nTOKEN=doc-token\nOBJ={obj}\n")
    try:
        failures = run_sh_blocks(markdown, state, workdir, timeout=60)
    finally:
        stop_servers((plain, secured), timeout=10)
        shutil.rmtree(workdir, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
