#!/usr/bin/env python3
"""Runs commands against a fresh courier-executor, for lit tests of the host side.

    with-executor.py [--show-log] EXECUTOR [EXECUTOR-ARGS...] -- COMMAND... [--then COMMAND...]...

Starts EXECUTOR on a free loopback port (or where EXECUTOR-ARGS' own --listen says, such as
a unix socket), waits until it is bound, runs each COMMAND in turn
with every "{executor}" in it replaced by the executor's address, and prints each command's
stdout and stderr (merged, in order) followed by "exit status N" or "killed by SIGNAME".
Ends by printing "the executor is still serving" if its health check answers; otherwise
says why, prints the executor's log and exits 1. With --show-log, the executor's log (its
standard error, where its workers' output goes) follows "executor log:" at the end."""
import http.client
import os
import signal
import socket
import subprocess
import sys
import tempfile
import urllib.request


def split(argv):
    if "--" not in argv:
        raise SystemExit(__doc__)
    at = argv.index("--")
    executor, rest = argv[:at], argv[at + 1:]
    commands, current = [], []
    for arg in rest:
        if arg == "--then":
            commands.append(current)
            current = []
        else:
            current.append(arg)
    commands.append(current)
    if not executor or not all(commands):
        raise SystemExit(__doc__)
    return executor, commands


class UnixConnection(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("localhost", timeout=10)
        self.path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(10)
        self.sock.connect(self.path)


def healthy(address):
    try:
        if address.startswith("unix:"):
            connection = UnixConnection(address[len("unix:"):])
            connection.request("GET", "/v1/health")
            return connection.getresponse().status == 200
        with urllib.request.urlopen(f"http://{address}/v1/health", timeout=10) as reply:
            return reply.status == 200
    except OSError:
        return False


def main():
    show_log = sys.argv[1:2] == ["--show-log"]
    executor, commands = split(sys.argv[2 if show_log else 1:])
    with tempfile.TemporaryFile() as log:
        listen = [] if "--listen" in executor else ["--listen", "127.0.0.1:0"]
        proc = subprocess.Popen(executor + listen + ["--quiet"],
                                stdout=subprocess.PIPE, stderr=log, text=True)
        try:
            line = proc.stdout.readline().strip()
            if not line.startswith("listening on "):
                raise SystemExit(f"{executor[0]} did not start: {line!r}")
            address = line[len("listening on "):]
            for command in commands:
                command = [arg.replace("{executor}", address) for arg in command]
                done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True, timeout=120)
                sys.stdout.write(done.stdout)
                if done.returncode < 0:
                    print(f"killed by {signal.Signals(-done.returncode).name}")
                else:
                    print(f"exit status {done.returncode}")
            sys.stdout.flush()
            if proc.poll() is not None or not healthy(address):
                log.seek(0)
                sys.stdout.write(log.read().decode(errors="replace"))
                state = "exited" if proc.poll() is not None else "stopped answering"
                raise SystemExit(f"the executor {state} (status {proc.poll()})")
            print("the executor is still serving")
            if show_log:
                log.seek(0)
                print("executor log:")
                sys.stdout.write(log.read().decode(errors="replace"))
        finally:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


if __name__ == "__main__":
    main()
