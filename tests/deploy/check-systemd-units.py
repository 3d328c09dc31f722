#!/usr/bin/env python3
"""Checks the systemd units of deploy/systemd against systemd and against the binaries.

    check-systemd-units.py DEPLOY_SYSTEMD_DIR BIN_DIR

For each unit, alone and with its tls.conf drop-in, in a scratch copy whose /usr/local/bin
paths point at BIN_DIR and whose /etc/courier files exist:
- `systemd-analyze verify` reports nothing (it exits 0 even on an unknown key or a bad
  value, so any line it prints is a failure);
- `systemd-analyze security --offline=yes` rates the unit's exposure at most 2.0;
- every flag of every ExecStart line and of the env file's arguments is one the binary's
  --help names, and the binary exists;
- `systemctl stop` drains: SIGTERM goes to the server alone (KillMode=mixed), so its workers
  finish the calls in flight, and the rest get SIGKILL once it has exited.
Exits 77 (skipped) when systemd-analyze is absent."""
import os
import re
import shutil
import subprocess
import sys
import tempfile

UNITS = {
    "courier-executor.service": ("courier-executor", "executor.env"),
    "courier-serve.service": ("courier-serve", "serve.env"),
}


def fail(message):
    print("FAIL: " + message)
    sys.exit(1)


def flags_of(command_line):
    return set(re.findall(r"(?<!\S)(--[a-z][a-z0-9-]*)", command_line))


def check_flags(source, line, binary):
    if not os.access(binary, os.X_OK):
        fail(f"{source}: {binary} is not an executable")
    help_text = subprocess.run([binary, "--help"], capture_output=True, text=True)
    names = flags_of(help_text.stdout + help_text.stderr)
    unknown = sorted(flags_of(line) - names)
    if unknown:
        fail(f"{source}: {os.path.basename(binary)} --help names no {', '.join(unknown)}")


def service_settings(paths):
    """The [Service] settings of a unit and its drop-ins, the last assignment winning."""
    settings = {}
    for path in paths:
        section = None
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line.startswith("[") and line.endswith("]"):
                    section = line[1:-1]
                elif section == "Service" and "=" in line and not line.startswith(("#", ";")):
                    key, value = line.split("=", 1)
                    settings[key.strip()] = value.strip()
    return settings


def check_stop_drains(unit, paths):
    settings = service_settings(paths)
    expected = {"KillSignal": "SIGTERM", "KillMode": "mixed"}
    for key, value in expected.items():
        if settings.get(key) != value:
            fail(f"{unit}: {key} is {settings.get(key, 'unset')}, not {value}: systemctl stop "
                 "must send SIGTERM to the server alone, which drains while its workers finish")
    if settings.get("SendSIGKILL", "yes") not in ("yes", "true", "on", "1"):
        fail(f"{unit}: SendSIGKILL is {settings['SendSIGKILL']}: what is left after the drain "
             "must be killed")


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    source_dir, bin_dir = sys.argv[1], os.path.abspath(sys.argv[2])
    analyze = shutil.which("systemd-analyze")
    if not analyze:
        print("systemd-analyze is not installed: the unit checks are skipped")
        sys.exit(77)
    with tempfile.TemporaryDirectory(prefix="courier-units-") as scratch:
        units_dir = os.path.join(scratch, "units")
        etc_dir = os.path.join(scratch, "etc")
        shutil.copytree(source_dir, units_dir)
        os.mkdir(etc_dir)
        for root, _, files in os.walk(units_dir):
            for name in files:
                path = os.path.join(root, name)
                with open(path) as f:
                    text = f.read()
                text = text.replace("/usr/local/bin/", bin_dir + "/")
                text = text.replace("/etc/courier/", etc_dir + "/")
                with open(path, "w") as f:
                    f.write(text)
        for name in ("executor", "serve"):
            for suffix in (".token", ".crt", ".key"):
                open(os.path.join(etc_dir, name + suffix), "w").close()
            shutil.copy(os.path.join(units_dir, name + ".env"), etc_dir)

        for unit, (program, env_file) in UNITS.items():
            unit_path = os.path.join(units_dir, unit)
            dropin = os.path.join(units_dir, unit + ".d", "tls.conf")
            if not os.path.exists(dropin):
                fail(f"{unit} has no tls.conf drop-in")
            binary = os.path.join(bin_dir, program)
            with open(env_file_path := os.path.join(units_dir, env_file)) as f:
                for line in f:
                    if "_ARGS=" in line and not line.startswith("#"):
                        check_flags(env_file_path, line, binary)
            for path in (unit_path, dropin):
                with open(path) as f:
                    for line in f:
                        if line.startswith("ExecStart=") and line.strip() != "ExecStart=":
                            if not line.startswith("ExecStart=" + binary + " "):
                                fail(f"{path}: ExecStart does not run {program}: {line}")
                            check_flags(path, line, binary)

            check_stop_drains(unit, (unit_path, dropin))

            # With the drop-in beside it (unit.d/ in the same directory) and without.
            for label, hide in (("with tls.conf", False), ("alone", True)):
                hidden = dropin + ".hidden"
                if hide:
                    os.rename(dropin, hidden)
                try:
                    verify = subprocess.run([analyze, "verify", "--man=no", unit_path],
                                            capture_output=True, text=True, cwd=units_dir)
                finally:
                    if hide:
                        os.rename(hidden, dropin)
                said = (verify.stdout + verify.stderr).strip()
                if verify.returncode != 0 or said:
                    fail(f"systemd-analyze verify {unit} ({label}) said:\n{said}")
            security = subprocess.run(
                [analyze, "security", "--offline=yes", "--threshold=20", unit_path],
                capture_output=True, text=True, cwd=units_dir)
            if security.returncode != 0:
                fail(f"{unit} is exposed more than 2.0:\n{security.stdout}{security.stderr}")
            rating = re.search(r"Overall exposure level for \S+: ([0-9.]+)", security.stdout)
            print(f"{unit}: verified, exposure {rating.group(1) if rating else '?'}")
    print("all units verified")


if __name__ == "__main__":
    main()
