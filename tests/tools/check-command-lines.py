#!/usr/bin/env python3
"""Every tool's command line follows one set of conventions: --version prints Courier's
version (the project version in CMakeLists.txt), an unknown flag is "unknown option '--x'",
a flag given last without its value is "option '--x' needs a value", each as
"TOOL: error: ..." with a non-zero exit; -h is --help everywhere, and courier-run with no
arguments prints a short usage. courier-run reads its program from standard input
given "-"; courier-opt --help-courier lists Courier's passes alone, and courier-opt takes every
option mlir-opt takes."""
import os
import re
import subprocess
import sys


def run(args, stdin=None):
    return subprocess.run(args, input=stdin, capture_output=True, text=True, timeout=120)


def main():
    version, tool_dir, mlir_opt, sample = sys.argv[1:5]
    tools = {
        # tool: a flag that takes a value
        "courier-run": "--entry",
        "courier-opt": "-o",
        "courier-serve": "--listen",
        "courier-executor": "--listen",
        "courier-worker": "--plugin",
        "courier-module-worker": "--parent",
    }
    failures = []

    def expect(what, condition, detail):
        if condition:
            print(f"ok: {what}")
        else:
            failures.append(f"{what}: {detail}")

    for tool, value_flag in tools.items():
        path = os.path.join(tool_dir, tool)
        # courier-run needs its program before it looks at anything else.
        lead = [sample] if tool == "courier-run" else []

        proc = run([path, "--version"])
        first = proc.stdout.splitlines()[0] if proc.stdout else ""
        expect(f"{tool} --version prints Courier's version",
               proc.returncode == 0 and first.startswith(f"{tool} (Courier) {version}, LLVM "),
               f"exit {proc.returncode}, stdout {proc.stdout!r}, stderr {proc.stderr[:300]!r}")

        for flag in ["--no-such-flag", "--no-such-flag=3", "-no-such-flag"]:
            spelled = flag.split("=")[0]
            # Last on the line, where a reader that takes values first would say "missing".
            proc = run([path] + lead + [flag])
            expect(f"{tool} {flag} is an unknown option",
                   proc.returncode != 0 and
                   f"{tool}: error: unknown option '{spelled}'" in proc.stderr,
                   f"exit {proc.returncode}, stderr {proc.stderr[:300]!r}")

        # -h is --help, on every tool.
        short, long = run([path, "-h"]), run([path, "--help"])
        expect(f"{tool} -h prints its usage as --help does",
               short.returncode == 0 and f"usage: {tool} " in short.stdout.lower()
               and short.stdout == long.stdout,
               f"exit {short.returncode}, stdout {short.stdout[:300]!r}, "
               f"stderr {short.stderr[:300]!r}")

        proc = run([path] + lead + [value_flag])
        expect(f"{tool} {value_flag} without a value says it needs one",
               proc.returncode != 0 and
               f"{tool}: error: option '{value_flag}' needs a value" in proc.stderr,
               f"exit {proc.returncode}, stderr {proc.stderr[:300]!r}")

    # One help format: the servers, which read their flags by hand, lay --help out as LLVM's
    # command-line library does for courier-run and courier-opt, and take exactly the flags
    # it lists (the servers refuse any other by construction; here every listed one is taken).
    sections = ["OVERVIEW: ", "USAGE: ", "OPTIONS:", "Generic Options:"]
    run_help = run([os.path.join(tool_dir, "courier-run"), "--help"]).stdout
    expect("courier-run --help has cl's sections", all(s in run_help for s in sections),
           run_help[:300])
    for tool in ["courier-serve", "courier-executor"]:
        path = os.path.join(tool_dir, tool)
        text = run([path, "--help"]).stdout
        lines = text.splitlines()
        expect(f"{tool} --help is laid out as cl lays out courier-run's",
               text.startswith("OVERVIEW: ") and f"\nUSAGE: {tool} [options]\n" in text
               and "\nOPTIONS:\n\nGeneric Options:\n\n" in text
               and f"\n{tool} options:\n\n" in text
               and all(re.match(r"^  -{1,2}[a-z][\w-]*(=<[^>]+>)? +- \S", line)
                       for line in lines[lines.index(f"{tool} options:") + 2:]),
               text[:600])
        listed = re.findall(r"^  (--[a-z][\w-]*)(=<[^>]+>)? +- ", text, re.M)
        flags = [(flag, bool(value)) for flag, value in listed
                 if flag not in ("--help", "--version")]
        expect(f"{tool} --help lists its options", len(flags) >= 20, f"{len(flags)} listed")
        refused = []
        for flag, takes_value in flags:
            # The flag, then an unknown one: the server stops there, or earlier at a value it
            # cannot use, but never calls the listed flag unknown.
            proc = run([path, flag + "=1" if takes_value else flag, "--no-such-flag"])
            if proc.returncode == 0 or f"unknown option '{flag}'" in proc.stderr:
                refused.append(f"{flag}: exit {proc.returncode}, {proc.stderr[:200]!r}")
        expect(f"{tool} takes every option its --help lists", not refused, "; ".join(refused))

    courier_run = os.path.join(tool_dir, "courier-run")
    proc = run([courier_run])
    expect("courier-run with no arguments prints a short usage, not cl's complaint",
           proc.returncode == 1
           and proc.stderr.startswith("USAGE: courier-run [options] <file.mlir")
           and "--help lists every option" in proc.stderr
           and "Not enough positional" not in proc.stderr
           and len(proc.stderr.splitlines()) < 12,
           f"exit {proc.returncode}, stderr {proc.stderr[:300]!r}")
    with open(sample) as f:
        program = f.read()
    proc = run([courier_run, "-", "--arg", "[1, 2, 3, 4]", "--no-disk-cache"], stdin=program)
    expect("courier-run - reads the program from standard input",
           proc.returncode == 0 and proc.stdout.strip() ==
           '{"data":[3,5,7,9],"dtype":"f64","shape":[4]}',
           f"exit {proc.returncode}, stdout {proc.stdout!r}, stderr {proc.stderr[:300]!r}")
    proc = run([courier_run, "-", "--no-disk-cache"], stdin="func.func @main() {\n  retrun\n}\n")
    expect("a program from standard input is <stdin> in its diagnostics",
           proc.returncode == 1 and
           proc.stderr.startswith("<stdin>:2:3: error: custom op 'retrun' is unknown"),
           f"exit {proc.returncode}, stderr {proc.stderr[:300]!r}")
    proc = run([courier_run, "-", "--watch"], stdin=program)
    expect("courier-run - --watch is refused: standard input cannot be watched",
           proc.returncode == 1 and "--watch needs a file to watch" in proc.stderr,
           f"exit {proc.returncode}, stderr {proc.stderr[:300]!r}")

    courier_opt = os.path.join(tool_dir, "courier-opt")
    proc = run([courier_opt, "--help-courier"])
    listed = proc.stdout
    expect("courier-opt --help-courier lists Courier's pipelines and passes",
           proc.returncode == 0 and all(
               name in listed for name in
               ["--courier-pipeline", "--courier-lower-to-llvm", "--lower-runtime-dispatch",
                "--cross-compile-targets", "--dispatch-executor-targets",
                "--convert-executor-to-llvm", "executor"]),
           f"exit {proc.returncode}, stdout {listed[:600]!r}")
    expect("courier-opt --help-courier lists nothing of upstream's",
           "--canonicalize" not in listed and len(listed.splitlines()) < 100,
           f"{len(listed.splitlines())} lines")
    proc = run([courier_opt, "--help"])
    expect("courier-opt --help points at --help-courier",
           proc.returncode == 0 and "--help-courier" in proc.stdout.split("\n\n")[0],
           proc.stdout[:300])

    # courier-opt registers the options mlir-opt registers itself: none may be missing.
    def options(binary):
        text = run([binary, "--help-list-hidden"]).stdout
        return {m.group(1) for m in re.finditer(r"^  --?([A-Za-z][\w.-]*)", text, re.M)}

    missing = options(mlir_opt) - options(courier_opt)
    expect("courier-opt takes every option mlir-opt takes", not missing,
           "missing: " + ", ".join(sorted(missing)))

    if failures:
        raise SystemExit("\n".join(failures))


if __name__ == "__main__":
    main()
