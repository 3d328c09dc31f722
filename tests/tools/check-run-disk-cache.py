#!/usr/bin/env python3
"""courier-run's disk cache is trusted only as far as it is checked: a planted or truncated
object is rebuilt, never run; --no-disk-cache neither reads nor writes the cache directory; a
directory someone else could write to is refused; with no HOME or XDG_CACHE_HOME nothing is
written to a shared temporary directory; and --cache-max-mib bounds the directory's size."""
import hashlib
import os
import shutil
import stat
import struct
import subprocess
import sys
import tempfile

EXPECTED = '{"data":[3,5,7,9],"dtype":"f64","shape":[4]}'
PLANTED = '{"data":[666,666,666,666],"dtype":"f64","shape":[4]}'


def check(condition, what):
    if not condition:
        raise SystemExit(f"FAILED: {what}")


def objects(cache):
    folder = os.path.join(cache, "objects")
    return sorted(os.path.join(folder, n) for n in os.listdir(folder) if n.endswith(".o"))


def holds_its_hash(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest() + ".o" == os.path.basename(path)


def snapshot(folder):
    """Every file and directory under `folder` with its size and modification time: reads
    mark files used, so an unchanged snapshot means nothing was read or written."""
    found = {}
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            path = os.path.join(root, name)
            st = os.lstat(path)
            found[path] = (st.st_size, st.st_mtime_ns, st.st_mode)
    return found


def folder_size(folder):
    return sum(size for size, _, mode in snapshot(folder).values() if stat.S_ISREG(mode))


class Runner:
    def __init__(self, courier_run, work):
        self.courier_run = courier_run
        self.work = work

    def program(self, name, text):
        path = os.path.join(self.work, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def run(self, app, *flags, env=None):
        return subprocess.run([self.courier_run, app, "--arg", "[1, 2, 3, 4]", "--time", *flags],
                              capture_output=True, text=True, env=env, timeout=300)

    def ok(self, app, *flags, expected=EXPECTED, env=None):
        result = self.run(app, *flags, env=env)
        check(result.returncode == 0 and result.stdout.strip() == expected,
              f"{' '.join(flags)}: expected {expected}, got {result.stdout!r} {result.stderr!r}")
        return result

    def refused(self, app, *flags, reason):
        result = self.run(app, *flags)
        check(result.returncode != 0 and reason in result.stderr and not result.stdout,
              f"{' '.join(flags)}: expected a refusal with {reason!r}, got "
              f"{result.returncode} {result.stdout!r} {result.stderr!r}")


def main():
    courier_run, sample = sys.argv[1:3]
    work = tempfile.mkdtemp(prefix="courier-disk-cache-")
    try:
        r = Runner(courier_run, work)
        text = open(sample).read()
        app = r.program("app.mlir", text)
        planted_app = r.program(
            "planted.mlir", text.replace("dense<2.0>", "dense<0.0>").replace("dense<1.0>",
                                                                           "dense<666.0>"))
        cache, other = os.path.join(work, "cache"), os.path.join(work, "other")

        # A real object, another program's, planted under the name of ours: not run, rebuilt.
        r.ok(app, "--cache-dir", cache)
        check("(cache hit)" in r.ok(app, "--cache-dir", cache).stderr, "a second run hits")
        r.ok(planted_app, "--cache-dir", other, expected=PLANTED)
        [ours], [theirs] = objects(cache), objects(other)
        shutil.copyfile(theirs, ours)
        check("(cache hit)" not in r.ok(app, "--cache-dir", cache).stderr,
              "a planted object is a miss")
        check(holds_its_hash(ours), "the planted object was replaced by the real one")

        # A truncated object is rebuilt, not left to break the module.
        os.truncate(ours, 64)
        check("(cache hit)" not in r.ok(app, "--cache-dir", cache).stderr,
              "a truncated object is a miss")
        check(holds_its_hash(ours), "the truncated object was rebuilt")
        check("(cache hit)" in r.ok(app, "--cache-dir", cache).stderr, "then it hits again")

        # --no-disk-cache: the cache directory is neither read nor written, nor created.
        before = snapshot(cache)
        r.ok(app, "--cache-dir", cache, "--no-disk-cache")
        r.ok(planted_app, "--cache-dir", cache, "--no-disk-cache", expected=PLANTED)
        check(snapshot(cache) == before, "--no-disk-cache left the cache directory untouched")
        absent = os.path.join(work, "absent")
        r.ok(app, "--cache-dir", absent, "--no-disk-cache")
        check(not os.path.exists(absent), "--no-disk-cache created no cache directory")

        # Directories others could write to, or another user owns, are refused.
        os.chmod(cache, 0o777)
        r.refused(app, "--cache-dir", cache,
                  reason=f"refusing cache directory '{cache}': it is writable by group or "
                         "others (mode 0777)")
        os.chmod(cache, 0o700)
        os.chmod(os.path.join(cache, "objects"), 0o702)
        r.refused(app, "--cache-dir", cache, reason=f"'{cache}/objects': it is writable by")
        os.chmod(os.path.join(cache, "objects"), 0o700)
        link = os.path.join(work, "link")
        os.symlink(cache, link)
        r.refused(app, "--cache-dir", link, reason=f"'{link}': it is a symbolic link")
        if os.geteuid() == 0:
            foreign = os.path.join(work, "foreign")
            os.mkdir(foreign, 0o755)
            os.chown(foreign, 65534, 65534)
            r.refused(app, "--cache-dir", foreign,
                      reason=f"'{foreign}': it is owned by uid 65534, not by this user (uid 0)")
            check(os.listdir(foreign) == [], "nothing was written to a foreign directory")
        else:
            print("not root: the foreign-owner refusal is not checked")
        created = os.path.join(work, "fresh", "cache")
        r.ok(app, "--cache-dir", created)
        for folder in (created, os.path.join(created, "host"), os.path.join(created, "objects")):
            check(os.stat(folder).st_mode & 0o777 == 0o700, f"{folder} was created 0700")

        # No HOME and no XDG_CACHE_HOME: no disk cache, nothing under $TMPDIR.
        tmp = os.path.join(work, "tmp")
        os.mkdir(tmp)
        env = {k: v for k, v in os.environ.items() if k not in ("HOME", "XDG_CACHE_HOME")}
        env["TMPDIR"] = tmp
        r.ok(app, env=env)
        check(os.listdir(tmp) == [], f"nothing written to $TMPDIR, found {os.listdir(tmp)}")

        # The bound holds across programs, the most recent surviving. Each program carries
        # a 320 KiB constant, so four of them overflow a 1 MiB bound.
        bounded = os.path.join(work, "bounded")
        big = []
        for i in range(5):
            # Neither a splat nor read at a constant offset, either of which would fold the
            # table to the four elements used: read from x[0] (1) on.
            table = struct.pack("<40960d", *([i + 1.0] * 5 + list(range(40955)))).hex()
            big.append(r.program(f"big{i}.mlir", text.replace(
                "%one = arith.constant dense<1.0> : tensor<4xf64>",
                f'%table = arith.constant dense<"0x{table}"> : tensor<40960xf64>\n'
                "      %c0 = arith.constant 0 : index\n"
                "      %x0 = tensor.extract %x[%c0] : tensor<4xf64>\n"
                "      %i = arith.fptosi %x0 : f64 to i64\n"
                "      %at = arith.index_cast %i : i64 to index\n"
                "      %one = tensor.extract_slice %table[%at] [4] [1] : tensor<40960xf64> "
                "to tensor<4xf64>")))
        for i, program in enumerate(big):
            r.ok(program, "--cache-dir", bounded, "--cache-max-mib", "1",
                 expected=EXPECTED.replace("3,5,7,9", ",".join(
                     str(2 * x + i + 1) for x in (1, 2, 3, 4))))
            size = folder_size(bounded)
            check(size <= 1 << 20, f"the cache holds {size} bytes, over its bound of 1 MiB")
        check(len(objects(bounded)) < len(big), "older objects were evicted")
        last = r.run(big[-1], "--cache-dir", bounded, "--cache-max-mib", "1")
        check("(cache hit)" in last.stderr, f"the newest program survived: {last.stderr!r}")
        first = r.run(big[0], "--cache-dir", bounded, "--cache-max-mib", "1")
        check("(cache hit)" not in first.stderr, "the oldest program was evicted")
    finally:
        for root, dirs, _ in os.walk(work):
            for name in dirs:
                path = os.path.join(root, name)
                if not os.path.islink(path):
                    os.chmod(path, 0o700)
        shutil.rmtree(work, ignore_errors=True)
    print("courier-run disk cache: checked objects, --no-disk-cache, refusals and the bound hold")


if __name__ == "__main__":
    main()
