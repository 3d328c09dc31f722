#!/usr/bin/env python3
"""Installs the documentation component of a build into a scratch prefix and checks that
share/doc/courier/ holds the README, the license, every page of docs/ and the generated
reference of the dialects and passes, and that the pages' relative links between themselves
resolve in the installed tree.

usage: check-install-docs.py BUILD_DIR
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

PAGES = ["README.md", "LICENSE", "deploy.md", "design.md", "guide.md", "performance.md",
         "protocol.md", "reliability.md", "rest.md", "writing.md",
         "dialects/CatalystDialect.md", "dialects/ExecutorDialect.md",
         "passes/CourierPasses.md"]
LINK = re.compile(r"\]\(([A-Za-z0-9_./-]+\.md)(#[^)]*)?\)")


def main():
    build = sys.argv[1]
    prefix = tempfile.mkdtemp(prefix="courier-install-docs-")
    failures = []
    try:
        proc = subprocess.run(["cmake", "--install", build, "--prefix", prefix,
                               "--component", "doc"], capture_output=True, text=True,
                              timeout=120)
        if proc.returncode != 0:
            raise SystemExit(f"cmake --install failed: {proc.stdout}{proc.stderr}")
        doc = os.path.join(prefix, "share", "doc", "courier")
        for page in PAGES:
            if not os.path.isfile(os.path.join(doc, page)):
                failures.append(f"share/doc/courier/{page} is not installed")
        # The pages installed side by side link to each other by name.
        for page in ("writing.md", "guide.md"):
            path = os.path.join(doc, page)
            if not os.path.isfile(path):
                continue
            for target, _ in LINK.findall(open(path).read()):
                if target.startswith(("../", "http")) or "/" in target and not \
                        target.startswith(("dialects/", "passes/")):
                    continue
                if not os.path.isfile(os.path.join(doc, target)):
                    failures.append(f"{page} links to {target}, not installed beside it")
    finally:
        shutil.rmtree(prefix, ignore_errors=True)
    if failures:
        raise SystemExit("\n".join(failures))
    print(f"share/doc/courier holds {len(PAGES)} documents; their links resolve")


if __name__ == "__main__":
    main()
