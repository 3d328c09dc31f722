"""Runs the `sh` blocks of a markdown doc in order and checks each one's output against the
`json` or `text` block that follows it ("…" matches anything); shared by the doc checks of
docs/protocol.md and docs/rest.md."""
import json
import re
import subprocess


def start_server(args, log_path, what):
    """Starts a server that prints "listening on HOST:PORT"; returns (process, address)."""
    log = open(log_path, "ab")
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=log)
    line = proc.stdout.readline().decode()
    if not line.startswith("listening on "):
        raise SystemExit(f"{what} did not start: {line!r}")
    return proc, line[len("listening on "):].strip()


def stop_servers(procs, timeout):
    for proc in procs:
        proc.terminate()
        proc.wait(timeout=timeout)


def blocks(markdown):
    """(language, body) for each fenced block, in order."""
    return [(m.group(1), m.group(2))
            for m in re.finditer(r"^```(\w*)\n(.*?)^```$", markdown, re.S | re.M)]


def pattern(expected):
    return re.compile(".*".join(re.escape(part) for part in expected.split("…")), re.S)


def json_matches(expected, actual):
    if expected == "…":  # any value: counts that depend on timing, say
        return True
    if isinstance(expected, str) and "…" in expected:
        return isinstance(actual, str) and pattern(expected).fullmatch(actual) is not None
    if isinstance(expected, dict):
        return (isinstance(actual, dict) and expected.keys() == actual.keys()
                and all(json_matches(expected[k], actual[k]) for k in expected))
    if isinstance(expected, list):
        if expected == ["…"]:
            return isinstance(actual, list)
        return (isinstance(actual, list) and len(expected) == len(actual)
                and all(json_matches(e, a) for e, a in zip(expected, actual)))
    return expected == actual


def check(language, expected, output):
    if language == "json":
        try:
            actual = json.loads(output)
        except json.JSONDecodeError:
            return False
        return json_matches(json.loads(expected), actual)
    lines = [l.strip() for l in output.strip().splitlines()]
    wanted = [l.strip() for l in expected.strip().splitlines()]
    return len(lines) == len(wanted) and all(
        pattern(w).fullmatch(l) for w, l in zip(wanted, lines))


def run_sh_blocks(markdown, state, workdir, timeout):
    """Runs every `sh` block in bash with the variables of `state` (a file each block
    re-exports to, so later blocks see what earlier ones set); returns the failure count,
    counting a doc without any `sh` block as a failure."""
    failures = 0
    fenced = blocks(markdown)
    ran = 0
    for index, (language, body) in enumerate(fenced):
        if language != "sh":
            continue
        ran += 1
        script = f"set -euo pipefail\nset -a\nsource {state}\n{body}\nexport -p > {state}\n"
        result = subprocess.run(["bash", "-c", script], cwd=workdir, capture_output=True,
                                text=True, timeout=timeout)
        if result.returncode != 0:
            print(f"block {index} failed ({result.returncode}):\n{body}\n{result.stderr}")
            failures += 1
            continue
        following = fenced[index + 1] if index + 1 < len(fenced) else ("", "")
        if following[0] in ("json", "text") and not check(following[0], following[1],
                                                           result.stdout):
            print(f"block {index} printed:\n{result.stdout}\nexpected:\n{following[1]}")
            failures += 1
    print(f"ran {ran} sh blocks, {failures} failed")
    if ran == 0:
        failures += 1
    return failures
