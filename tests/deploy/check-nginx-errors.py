#!/usr/bin/env python3
"""Checks that every error body the nginx front door writes itself uses a code of Courier's
error table with that code's status.

    check-nginx-errors.py DEPLOY_NGINX_DIR ERRORCODE_H

Reads each `return STATUS '{"error":{"code":"CODE",...}}'` in the nginx files and the rows
`{ErrorCode::X, "code", status, senders}` of transport/ErrorCode.h."""
import glob
import json
import os
import re
import sys


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    nginx_dir, table_path = sys.argv[1], sys.argv[2]
    with open(table_path) as f:
        table = {code: int(status) for code, status in
                 re.findall(r'\{ErrorCode::\w+, "(\w+)", (\d+), [^}]*\}', f.read())}
    if len(table) < 10:
        raise SystemExit(f"FAIL: found only {len(table)} rows in {table_path}")
    checked = 0
    failures = []
    for path in sorted(glob.glob(os.path.join(nginx_dir, "*.conf*"))):
        with open(path) as f:
            text = f.read()
        for status, body in re.findall(r"return (\d+) '(\{\"error\".*?)(?:\\n)?';", text):
            where = f"{os.path.basename(path)}: return {status}"
            try:
                error = json.loads(body.replace("\\'", "'"))["error"]
            except (ValueError, KeyError) as e:
                failures.append(f"{where}: not an error body ({e}): {body}")
                continue
            code = error.get("code")
            if not error.get("message"):
                failures.append(f"{where}: no message")
            if code not in table:
                failures.append(f"{where}: code '{code}' is not in the error table")
            elif table[code] != int(status):
                failures.append(f"{where}: code '{code}' has status {table[code]} in the table")
            checked += 1
    if checked == 0:
        failures.append(f"no error bodies found under {nginx_dir}")
    for failure in failures:
        print("FAIL: " + failure)
    if failures:
        sys.exit(1)
    print(f"{checked} error bodies match the error table")


if __name__ == "__main__":
    main()
