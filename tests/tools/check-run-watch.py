#!/usr/bin/env python3
"""courier-run --watch: a saved edit is reloaded and run again, a broken edit is reported
while the old version keeps serving, an edit that crashes is reported and the watch goes on
(the module runs in a worker process), a save after an edit that spins ends its call and is
served, and Ctrl-C ends the run cleanly, idle or while a call spins. A watch whose first
version spins ends the call at the default deadline (10 s) and serves the next save."""
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


def spinning(original):
    """The sample with a kernel that never returns (its result depends on the loop)."""
    text = original.replace(
        "%d = arith.mulf %x, %two : tensor<4xf64>",
        "%zero = arith.constant 0 : i64\n"
        "      %n = scf.while (%i = %zero) : (i64) -> i64 {\n"
        "        %true = arith.constant true\n"
        "        scf.condition(%true) %i : i64\n"
        "      } do {\n"
        "      ^bb0(%i: i64):\n"
        "        %step = arith.constant 1 : i64\n"
        "        %j = arith.addi %i, %step : i64\n"
        "        scf.yield %j : i64\n"
        "      }\n"
        "      %f = arith.sitofp %n : i64 to f64\n"
        "      %s = tensor.splat %f : tensor<4xf64>\n"
        "      %d = arith.mulf %x, %s : tensor<4xf64>")
    if text == original:
        raise SystemExit("the sample no longer has the line this test edits")
    return text


def watch(courier_run, app, work, *flags):
    proc = subprocess.Popen(
        [courier_run, app, "--arg", "[1, 2, 3, 4]", "--watch", "--cache-dir",
         os.path.join(work, "cache"), *flags],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = queue.Queue(), queue.Queue()
    threading.Thread(target=lines, args=(proc.stdout, out), daemon=True).start()
    threading.Thread(target=lines, args=(proc.stderr, err), daemon=True).start()
    return proc, out, err


def stop(proc, when):
    proc.send_signal(signal.SIGINT)
    try:
        code = proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise SystemExit(f"courier-run --watch did not stop on SIGINT {when}")
    if code != 0:
        raise SystemExit(f"courier-run --watch exited with {code} on SIGINT {when}")


def first_version_spins(courier_run, original, work):
    """With no --invoke-timeout-ms, a watch ends a call after 10 s; the next save is served."""
    app = os.path.join(work, "spins-first.mlir")
    save(app, spinning(original))
    proc, out, err = watch(courier_run, app, work)
    try:
        expect(err, lambda l: "watching" in l, "the watch to start")
        expect(err, lambda l: "took longer than 10000 ms" in l, "the default deadline", 40)
        expect(err, lambda l: "version 1 was ended at its deadline (10000 ms)" in l
               and "no version serves yet" in l, "the first version's end")
        save(app, original)
        expect(err, lambda l: "reloaded" in l and "as version 2" in l, "the reload after a spin")
        expect(out, lambda l: l == '{"data":[3,5,7,9],"dtype":"f64","shape":[4]}',
               "the result after the spin")
        # --invoke-timeout-ms replaces the default.
        save(app, spinning(original).replace("%step = arith.constant 1", "%step = arith.constant 2"))
        expect(err, lambda l: "as version 3" in l, "the second spinning edit")
        stop(proc, "while a call spins")
    finally:
        if proc.poll() is None:
            proc.kill()

    proc, out, err = watch(courier_run, app, work, "--invoke-timeout-ms", "300")
    try:
        save(app, spinning(original))
        expect(err, lambda l: "took longer than 300 ms" in l, "the deadline given", 20)
        stop(proc, "after a deadline")
    finally:
        if proc.poll() is None:
            proc.kill()


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

        # An edit that spins: the next save ends its call and is compiled and served.
        save(app, spinning(original))
        expect(err, lambda l: "reloaded" in l and "as version 5" in l, "the spinning edit")
        save(app, original.replace("dense<1.0>", "dense<7.0>"))
        expect(err, lambda l: "as version 6" in l, "the save after the spinning edit")
        expect(err, lambda l: "version 5 is still running its call: ended, version 6 replaces it"
               in l, "the spinning call's end")
        expect(out, lambda l: l == '{"data":[9,11,13,15],"dtype":"f64","shape":[4]}',
               "the result after the spinning edit")

        stop(proc, "when idle")
        first_version_spins(courier_run, original, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("courier-run --watch: reload, failed reload, crashed and spinning edits, deadlines "
          "and exit all as expected")


if __name__ == "__main__":
    main()
