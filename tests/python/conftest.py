"""pytest fixtures shared by the Python tests: real courier-executor and courier-serve
processes on free loopback ports or unix sockets, and the source tree's paths.

Environment (ctest sets both):

- ``COURIER_BIN_DIR``: the build's ``bin`` directory, holding ``courier-serve`` and
  ``courier-executor``;
- ``COURIER_SOURCE_DIR``: the repository's root (for ``samples/`` and the docs).

Servers are function-scoped: each test gets processes of its own, so no test sees another's
modules, sessions or counters (a courier-serve starts in a fraction of a second; the
compiled objects are shared through one cache directory for the whole run). A process's
stdout and stderr go to files in the test's temporary directory and are attached to the
report of a test that fails. At teardown every process still running gets ``SIGTERM``, then
``SIGKILL`` after 15 s; the test fails if one had to be killed or died by a signal.
"""

import contextlib
import io
import os
import pathlib
import re
import shutil
import signal
import subprocess
import time

import pytest

#: How long a server may take to print its ``listening on`` line.
START_TIMEOUT_S = 30.0
#: How long a server may take to exit after SIGTERM before it is killed.
STOP_TIMEOUT_S = 15.0


# Under a sanitized build the interpreter runs with the sanitizer's runtime preloaded (the
# extension needs it first); the programs the tests and the engine start link their own, and
# two runtimes in one process refuse to start. Unset here, before any starts.
os.environ.pop("LD_PRELOAD", None)


def _env_dir(variable, what):
    value = os.environ.get(variable)
    if not value:
        pytest.fail("{} is not set: it must name {} (ctest sets it)".format(variable, what),
                    pytrace=False)
    path = pathlib.Path(value)
    if not path.is_dir():
        pytest.fail("{}={} is not a directory ({})".format(variable, value, what),
                    pytrace=False)
    return path


@pytest.fixture(scope="session")
def bin_dir():
    """The build's binaries directory, from ``COURIER_BIN_DIR``."""
    return _env_dir("COURIER_BIN_DIR", "the build's bin directory")


@pytest.fixture(scope="session")
def source_dir():
    """The repository's root, from ``COURIER_SOURCE_DIR``."""
    return _env_dir("COURIER_SOURCE_DIR", "the repository's root")


@pytest.fixture(scope="session")
def samples_dir(source_dir):
    """The repository's ``samples/`` directory."""
    return source_dir / "samples"


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory):
    """One engine cache directory (mode 0700, as the server requires) for the run."""
    path = tmp_path_factory.mktemp("courier-cache")
    path.chmod(0o700)
    return path


class Certificates:
    """A throwaway CA (``ca_cert``) and a server certificate it signed for IP 127.0.0.1
    and DNS localhost (``server_cert``, ``server_key``), PEM files made with openssl."""

    _NEW_KEY = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]

    def __init__(self, directory):
        self.directory = directory
        self.ca_cert = directory / "ca.crt"
        self.server_cert = directory / "server.crt"
        self.server_key = directory / "server.key"
        (directory / "server.ext").write_text(
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n")
        self._openssl("req", "-x509", *self._NEW_KEY, "-keyout", "ca.key", "-out", "ca.crt",
                      "-subj", "/CN=Courier Python test CA", "-days", "2",
                      "-addext", "basicConstraints=critical,CA:TRUE",
                      "-addext", "keyUsage=critical,keyCertSign,cRLSign")
        self._openssl("req", *self._NEW_KEY, "-keyout", "server.key", "-out", "server.csr",
                      "-subj", "/CN=localhost")
        self._openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                      "-set_serial", "2", "-days", "2", "-extfile", "server.ext",
                      "-out", "server.crt")

    def _openssl(self, *args):
        done = subprocess.run(["openssl"] + list(args), cwd=self.directory,
                              stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=60)
        if done.returncode != 0:
            pytest.fail("making test certificates failed: openssl {}\n{}".format(
                " ".join(args), done.stderr), pytrace=False)


@pytest.fixture(scope="session")
def certificates(tmp_path_factory):
    """A test CA and a server certificate for 127.0.0.1 (see Certificates)."""
    if shutil.which("openssl") is None:
        pytest.fail("the openssl command is needed to make test certificates", pytrace=False)
    return Certificates(tmp_path_factory.mktemp("certificates"))


class ServerProcess:
    """A courier server process started with ``--listen``, up once it said where.

    ``listen`` is what it printed after ``listening on`` (``127.0.0.1:PORT``,
    ``unix:PATH`` or ``https://HOST:PORT``); ``url`` is that as an address for clients
    (``http://`` added to a plain ``HOST:PORT``); ``address`` is the form the engine's
    executor override takes (``HOST:PORT``, ``unix:PATH`` or ``https://HOST:PORT``).
    """

    def __init__(self, program, args, log_dir, label):
        self.program = pathlib.Path(program)
        self.args = list(args)
        self.label = label
        self.stdout_path = log_dir / (label + ".stdout")
        self.stderr_path = log_dir / (label + ".stderr")
        self.killed = False
        if not self.program.is_file():
            pytest.fail("{} does not exist: is the build complete?".format(self.program),
                        pytrace=False)
        with open(self.stdout_path, "wb") as out, open(self.stderr_path, "wb") as err:
            self.process = subprocess.Popen([str(self.program)] + self.args,
                                            stdin=subprocess.DEVNULL, stdout=out, stderr=err)
        self.listen = self._wait_listening()
        self.address = self.listen
        self.url = self.listen if self.listen.startswith(("unix:", "https://")) \
            else "http://" + self.listen

    @property
    def pid(self):
        return self.process.pid

    def _wait_listening(self):
        """The address of the ``listening on`` line, polled for at most START_TIMEOUT_S."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            for line in self.stdout_path.read_text(errors="replace").splitlines():
                if line.startswith("listening on "):
                    return line[len("listening on "):].strip()
            if self.process.poll() is not None:
                pytest.fail("{} exited with status {} before listening\n{}".format(
                    self.label, self.process.returncode, self.logs()), pytrace=False)
            if time.monotonic() > deadline:
                self.stop()
                pytest.fail("{} did not print 'listening on' within {} s\n{}".format(
                    self.label, START_TIMEOUT_S, self.logs()), pytrace=False)
            time.sleep(0.01)

    def stop(self):
        """SIGTERM, then SIGKILL after STOP_TIMEOUT_S; the exit status (negative: signal)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.killed = True
                self.process.kill()
                self.process.wait()
        return self.process.returncode

    def kill(self):
        """SIGKILL now, as a test means to (not a failure at teardown); the exit status."""
        self.killed_on_purpose = True
        self.process.kill()
        return self.process.wait()

    def failure(self):
        """Why the process's end is a failure, or None: killed, or ended by a signal (unless
        a test killed it)."""
        if getattr(self, "killed_on_purpose", False):
            return None
        if self.killed:
            return "{} did not exit within {} s of SIGTERM and was killed".format(
                self.label, STOP_TIMEOUT_S)
        status = self.process.returncode
        if status is not None and status < 0:
            return "{} died by signal {}".format(self.label, signal.Signals(-status).name)
        return None

    def logs(self):
        """The command line, stdout and stderr, for a report."""
        def read(path):
            try:
                return path.read_text(errors="replace")
            except OSError as e:
                return "<{}>".format(e)
        return "--- {} ({})\n--- stdout:\n{}--- stderr:\n{}".format(
            self.label, " ".join([str(self.program)] + self.args),
            read(self.stdout_path), read(self.stderr_path))


class _Servers:
    """The processes one test started, stopped and checked at its teardown."""

    def __init__(self, node, log_dir):
        self.node = node
        self.log_dir = log_dir
        self.started = []
        node.courier_servers = self.started

    def start(self, program, args, listen):
        """Starts `program --listen LISTEN args...` (each argument as str)."""
        args = ["--listen", listen] + [str(arg) for arg in args]
        label = "{}-{}".format(pathlib.Path(program).name, len(self.started) + 1)
        server = ServerProcess(program, args, self.log_dir, label)
        self.started.append(server)
        return server

    def starter(self, program, extra_args=lambda args: ()):
        """A factory ``start(*args, listen="127.0.0.1:0")`` of `program` servers, each
        given ``extra_args(args)`` after `args`."""
        def start(*args, listen="127.0.0.1:0"):
            return self.start(program, args + tuple(extra_args(args)), listen)
        return start

    def stop_all(self):
        failures = []
        for server in self.started:
            server.stop()
            failure = server.failure()
            if failure:
                failures.append(failure + "\n" + server.logs())
        if failures:
            pytest.fail("\n".join(failures), pytrace=False)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Attaches the output of the test's servers to its report when it fails."""
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        for server in getattr(item, "courier_servers", []):
            report.sections.append(("courier server " + server.label, server.logs()))


@pytest.fixture
def _servers(request, tmp_path):
    servers = _Servers(request.node, tmp_path)
    yield servers
    servers.stop_all()


@pytest.fixture
def start_serve(_servers, bin_dir, cache_dir):
    """A factory: ``start_serve(*args, listen="127.0.0.1:0")`` starts a courier-serve.

    It gets the run's ``--cache-dir`` unless ``args`` name one; it returns the
    ServerProcess once listening (``.url`` for clients). Call its ``stop()`` to end it
    early (e.g. to start another on the same unix socket).
    """
    return _servers.starter(
        bin_dir / "courier-serve",
        lambda args: () if "--cache-dir" in args else ("--cache-dir", cache_dir))


@pytest.fixture
def serve(start_serve):
    """A courier-serve on a free loopback port, with its defaults (process isolation)."""
    return start_serve()


@pytest.fixture
def start_executor(_servers, bin_dir):
    """A factory: ``start_executor(*args, listen="127.0.0.1:0")`` starts a
    courier-executor and returns its ServerProcess once listening (``.address`` for
    the engine's executor override, ``.url`` for HTTP clients)."""
    return _servers.starter(bin_dir / "courier-executor")


@pytest.fixture
def executor(start_executor):
    """A courier-executor on a free loopback port, with its defaults."""
    return start_executor()


@pytest.fixture
def run_readme_example(source_dir, monkeypatch):
    """A function running the ```python block of python/README.md's section `heading` in the
    source tree and checking what it prints: each ``print(...)  # text`` prints ``text``."""
    def run(heading):
        text = (source_dir / "python" / "README.md").read_text()
        section = text[text.index("\n## " + heading + "\n"):]
        code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
        expected = [m.group(1) for m in re.finditer(r"^\s*print\(.*\)  # (.*)$", code, re.M)]
        assert expected, "the example prints nothing to check"
        monkeypatch.chdir(source_dir)
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            exec(compile(code, "python/README.md", "exec"), {"__name__": "readme"})
        assert printed.getvalue().splitlines() == expected
    return run
