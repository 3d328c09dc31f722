#!/usr/bin/env python3
"""No Catch2 test case's name holds a ';': catch_discover_tests registers each name as a CMake
list, so a ';' splits one test into two ctest entries whose filters match no test case, and
ctest reports them passed having run nothing."""
import glob
import os
import re
import sys

NAME = re.compile(r'TEST_CASE\(\s*((?:"(?:[^"\\]|\\.)*"\s*)+)')
PART = re.compile(r'"((?:[^"\\]|\\.)*)"')


def main():
    root = sys.argv[1]
    found = []
    for path in sorted(glob.glob(os.path.join(root, "**", "*.cpp"), recursive=True)):
        with open(path, encoding="utf-8") as f:
            text = f.read()
        for match in NAME.finditer(text):
            name = "".join(PART.findall(match.group(1)))
            if ";" in name:
                line = text.count("\n", 0, match.start()) + 1
                found.append(f"{os.path.relpath(path, root)}:{line}: {name}")
    if found:
        raise SystemExit("test names with ';' (ctest would run nothing of them):\n" +
                         "\n".join(found))
    print("ok: no test name holds a ';'")


if __name__ == "__main__":
    main()
