#!/usr/bin/env python3
"""courier-run --watch: a saved edit is reloaded and run again, a broken edit is reported
while the old version keeps serving, an edit that crashes is reported and the watch goes on
(the module runs in a worker process), and Ctrl-C ends the run cleanly."""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import queue


def lines(stream, out):
    for line in iter(stream.readline, ""):
        out.put(line.rstrip("\n"))


def expect(q, predicate, what, timeout=30):
    try:
        while True:
            line = q.get(timeout=timeout)
            if predicate(line):
                return line
    except queue.Empty:
        raise SystemExit(f"timed out waiting for {what}")


def save(path, text):
    # As editors do: write a new file and rename it over the old one.
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def main():
    courier_run, sample = sys.argv[1:3]
    work = tempfile.mkdtemp(prefix="courier-run-watch-")
    try:
        app = os.path.join(work, "app.mlir")
        original = open(sample).read()
        shutil.copy(sample, app)
        proc = subprocess.Popen(
            [courier_run, app, "--arg", "[1, 2, 3, 4]", "--watch", "--cache-dir",
             os.path.join(work, "cache")],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        out, err = queue.Queue(), queue.Queue()
        threading.Thread(target=lines, args=(proc.stdout, out), daemon=True).start()
        threading.Thread(target=lines, args=(proc.stderr, err), daemon=True).start()

        expect(out, lambda l: l == '{"data":[3,5,7,9],"dtype":"f64","shape":[4]}', "first run")
        expect(err, lambda l: "watching" in l, "the watch to start")

        save(app, original.replace("dense<1.0>", "dense<100.0>"))
        expect(err, lambda l: "reloaded" in l and "as version 2" in l, "the reload line")
        expect(out, lambda l: l == '{"data":[102,104,106,108],"dtype":"f64","shape":[4]}',
               "the new version's result")

        # The diagnostic first, at the start of its line where an editor finds it, with the
        # source line and a caret; then what became of the reload.
        save(app, original.replace("arith.addf %d", "arith.bogus %d"))
        expect(err, lambda l: l.startswith(app + ":") and ": error: " in l
               and "arith.bogus" in l, "the broken edit's diagnostic")
        expect(err, lambda l: "arith.bogus %d" in l, "the broken edit's source line")
        expect(err, lambda l: l.strip() == "^", "the caret under the broken edit")
        expect(err, lambda l: "failed" in l and "version 2 keeps serving" in l,
               "the failed reload line")

        # The kernel loads from address 0: its worker dies, courier-run does not.
        crashing = original.replace(
            "%d = arith.mulf %x, %two : tensor<4xf64>",
            "%null = llvm.mlir.zero : !llvm.ptr\n"
            "      %v = llvm.load volatile %null : !llvm.ptr -> f64\n"
            "      %s = tensor.splat %v : tensor<4xf64>\n"
            "      %d = arith.mulf %x, %s : tensor<4xf64>")
        if crashing == original:
            raise SystemExit("the sample no longer has the line this test edits")
        save(app, crashing)
        expect(err, lambda l: "version 3 crashed with SIGSEGV" in l
               and "version 2 keeps serving" in l, "the crashed version's line")

        # The watch goes on: the next good edit loads and runs.
        save(app, original.replace("dense<1.0>", "dense<1000.0>"))
        expect(err, lambda l: "reloaded" in l and "as version 4" in l, "the reload after the crash")
        expect(out, lambda l: l == '{"data":[1002,1004,1006,1008],"dtype":"f64","shape":[4]}',
               "the result after the crash")
        if proc.poll() is not None:
            raise SystemExit(f"courier-run --watch exited with {proc.returncode}")

        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=30)
        if code != 0:
            raise SystemExit(f"courier-run --watch exited with {code} on SIGINT")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("courier-run --watch: reload, failed reload, crashed edit and exit all as expected")


if __name__ == "__main__":
    main()
