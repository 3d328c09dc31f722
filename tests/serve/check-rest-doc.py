#!/usr/bin/env python3
"""Runs every `sh` block of docs/rest.md, in order, against real courier-serve processes and
checks each block's output against the `json` or `text` block that follows it ("…" matches
anything). The block runner and matcher are tests/support/doc_examples.py's."""
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from doc_examples import run_sh_blocks, start_server, stop_servers  # noqa: E402


def start_serve(serve, workdir, name, args):
    # A cache per server: a compile another server left on disk would beat SA's 1 ms limit.
    return start_server([serve, "--listen", "127.0.0.1:0", "--cache-dir",
                         os.path.join(workdir, "cache-" + name)] + args,
                        os.path.join(workdir, name + ".log"), f"courier-serve {name}")


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
        "LA": ["--max-modules", "1", "--max-body-bytes", "65536", "--max-constant-mib", "1"],
        "SA": ["--compile-timeout-ms", "1"],
        "WA": ["--watch", watch],
        "SM": ["--allow-shared-memory"],
    }
    procs, addresses = [], {}
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
        failures = run_sh_blocks(markdown, state, workdir, timeout=120)
    finally:
        stop_servers(procs, timeout=20)
        shutil.rmtree(workdir, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
