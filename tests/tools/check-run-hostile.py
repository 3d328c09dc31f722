#!/usr/bin/env python3
"""courier-run on texts built to exhaust the stack of MLIR's parser or of what runs after it:
each ends with a one-line compile error at the offending place and exit status 1, never with
a signal, both in process and with --isolate (the module worker runs the same guard and
courier-run reports its answer)."""
import os
import shutil
import subprocess
import sys
import tempfile


def chain(op, count):
    terms = "".join(f" {op} {'d1' if i % 2 else 's0'}" for i in range(count))
    return f"#m = affine_map<(d0, d1)[s0] -> (d0{terms})>\nmodule {{}}\n"


def alias_chain(count, uses=1):
    """`!t1 = tuple<!t0>` and so on (each naming the one before `uses` times), the last
    returned by a function on line `count + 1`."""
    lines = ["!t0 = tuple<i32>"]
    lines += [f"!t{i} = tuple<{', '.join([f'!t{i - 1}'] * uses)}>" for i in range(1, count)]
    lines.append(f"func.func private @f() -> !t{count - 1}")
    return "\n".join(lines) + "\n"


NESTED = "nested deeper than 512 levels"

# (what, text, line:column the error must name, what the error must say)
HOSTILE = [
    ("unary minus", "#m = affine_map<(d0) -> (" + "-" * 250000 + "d0)>\nmodule {}\n", "1:536",
     NESTED),
    ("tuple types", "func.func private @f() -> " + "tuple<" * 1000000 + "i32" + ">" * 1000000,
     f"1:{26 + 6 * 513}", NESTED),
    ("llvm structs", "llvm.func @f(" + "!llvm.struct<(" * 100000 + "i32" + ")>" * 100000 + ")",
     f"1:{13 + 14 * 256}", NESTED),
    ("regions", "module {" * 100000 + "}" * 100000, f"1:{8 * 513}", NESTED),
    ("call site locations",
     "module {} loc(" + "callsite(" * 100000 + '"a":1:1' + ' at "b":1:1)' * 100000 + ")",
     f"1:{14 + 9 * 512}", NESTED),
    ("a chain of additions", chain("+", 50000), f"1:{35 + 5 * 510 + 2}", NESTED),
    # Aliases nest with no brackets: the parse is flat, everything after it was not.
    ("a 1.2-million-line chain of type aliases", alias_chain(1200000), "1200001:1",
     "nested deeper than 1024 levels (through aliases)"),
    ("aliases doubling 60 times", alias_chain(61, uses=2), "62:1",
     "expands to more than 1048576 types and attributes (through aliases)"),
]


def main():
    courier_run = sys.argv[1]
    work = tempfile.mkdtemp(prefix="courier-run-hostile-")
    failures = []
    try:
        runs = [(what, text, place, message, []) for what, text, place, message in HOSTILE]
        runs += [(what + " (isolated)", text, place, message, ["--isolate"])
                 for what, text, place, message in HOSTILE]
        for what, text, place, message, flags in runs:
            path = os.path.join(work, "hostile.mlir")
            with open(path, "w") as f:
                f.write(text)
            proc = subprocess.run(
                [courier_run, path, "--cache-dir", os.path.join(work, "cache")] + flags,
                capture_output=True, text=True, timeout=120)
            err = proc.stderr.strip()
            if proc.returncode < 0:
                failures.append(f"{what}: killed by signal {-proc.returncode}")
            elif proc.returncode != 1:
                failures.append(f"{what}: exit status {proc.returncode}, stderr: {err[:300]}")
            elif f"hostile.mlir:{place}" not in err or message not in err:
                failures.append(f"{what}: expected an error at {place}, got: {err[:300]}")
            else:
                print(f"ok: {what}: {err[:160]}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if failures:
        raise SystemExit("\n".join(failures))


if __name__ == "__main__":
    main()
