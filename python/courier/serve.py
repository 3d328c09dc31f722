"""A client for courier-serve's REST API (docs/rest.md), on the standard library and NumPy.

    from courier.serve import Client, ServeError

    with Client("http://127.0.0.1:8080") as client:
        client.submit("scale", open("samples/02-local-kernel/app.mlir").read())
        (y,) = client.invoke("scale", "main", numpy.arange(4.0))

Addresses are ``http://HOST:PORT``, ``https://HOST:PORT`` (verified with ``context``, an
``ssl.SSLContext``, else the system's CAs) or ``unix:/PATH``; an ``http(s)`` address may
carry a path prefix (a proxy's). Every failure is a `ServeError` whose ``code`` says what
went wrong; see its docstring for the codes the client adds to the server's.

Connections. A client keeps its connection alive between requests. Before reusing it the
client checks that the server has not closed it meanwhile (courier-serve closes a
connection idle for 5 s, and every connection when it restarts) and opens a new one if so.
If a reused connection fails anyway (the server closed it while the request was on its
way), the request is sent once more on a new connection only when the server cannot have
acted on it: sending failed, so it never received the whole request; or it is a ``GET``,
``PUT`` or ``DELETE`` (idempotent: sending it twice leaves what sending it once leaves,
though a twice-applied ``PUT`` shows a version one higher) and the connection closed before
the reply's status line, so no byte of a reply came back. A ``POST`` (submit, invoke) that
was sent whole and then lost is not sent again: it fails with ``executor_lost``, as the
front door's nginx says of a request an instance took and dropped. A new connection that
cannot be made fails at once with ``unavailable``.

Threads. A client may be shared by any number of threads. Each request takes a connection
of its own from the client's pool for as long as it runs, opening one if none is idle, so
concurrent calls run concurrently; up to ``max_idle`` connections are kept alive for the
next ones (one thread calling in turn uses one connection).

Tensors. `Client.invoke` sends raw-bytes frames: each input as its little-endian,
row-major bytes, sent from the array's own memory when it already is so (a strided or
big-endian array is packed once first), and each output read straight from the socket
into a NumPy array of its own. `Client.invoke_json` sends and reads JSON tensors instead.
See `Client.invoke` for dtypes, ``bf16`` and scalars.

Replies. The client believes no size a reply states before the bytes arrive: a body is read
in pieces of at most 1 MiB and an output array grows with the bytes received, so a server
that claims terabytes costs what it sends, up to ``max_reply_mib``. A frame's header is
checked (at most 4096 outputs of rank 64 at most, shapes of non-negative integers that
account for every byte and no more) before any output is read, and JSON of any nesting is
read without exhausting the interpreter's stack. A reply that breaks any of this is a
`ServeError` naming what was wrong: ``bad_frame`` for a frame, ``internal`` for the rest,
``payload_too_large`` for one over ``max_reply_mib``.
"""

import http.client
import json
import math
import select
import socket
import ssl
import threading
import urllib.parse

import numpy as np

__all__ = ["Client", "ServeError", "DTYPES"]

FRAME_CONTENT_TYPE = "application/x-courier-frame"

#: Courier's element types and the little-endian NumPy dtype each travels as. ``bf16`` has
#: no NumPy dtype: its values travel as their 16-bit patterns (see `Client.invoke`).
DTYPES = {
    "f16": np.dtype("<f2"),
    "f32": np.dtype("<f4"),
    "f64": np.dtype("<f8"),
    "bf16": np.dtype("<u2"),
    "i1": np.dtype("?"),
    "i8": np.dtype("i1"),
    "i16": np.dtype("<i2"),
    "i32": np.dtype("<i4"),
    "i64": np.dtype("<i8"),
    "ui8": np.dtype("u1"),
    "ui16": np.dtype("<u2"),
    "ui32": np.dtype("<u4"),
    "ui64": np.dtype("<u8"),
}

# The Courier name of each NumPy dtype (by kind and size) that maps to one.
_COURIER_NAMES = {
    (dtype.kind, dtype.itemsize): name for name, dtype in DTYPES.items() if name != "bf16"
}

# The longest header line a frame reply may have (docs/protocol.md: at most 1 MiB), and the
# most outputs and the highest rank its header may declare (transport/Wire.h).
_MAX_HEADER_LINE = 1 << 20
_MAX_FRAME_TENSORS = 4096
_MAX_FRAME_RANK = 64
# The most bytes a reply is read in at once, and the first allocation for an output: what a
# reply claims is allocated only as its bytes arrive.
_READ_PIECE = 1 << 20
# The most bytes of an error reply read: a Courier error body is far smaller, and one that
# is not still gets its status's code.
_MAX_ERROR_BODY = 1 << 20

_IDEMPOTENT = frozenset(("GET", "HEAD", "PUT", "DELETE"))


class ServeError(Exception):
    """A request that failed: the server's error, or the client's own.

    ``code`` is the REST error code (docs/rest.md, "Errors"), the field to decide on;
    ``message`` (also the str()) is for people; ``status`` is the HTTP status, ``None``
    when no reply came; ``diagnostics`` lists, for ``compile_failed``, dicts with ``file``,
    ``line``, ``column``, ``severity`` and ``message`` (else it is empty); ``cause`` is,
    behind ``executor_failed`` or ``executor_unavailable``, the executor's own code
    (``unknown_entry``, ``kernel_crashed``, ...), ``None`` when the server sent none.

    Besides the server's codes, the client raises (``status`` ``None``, or the status of a
    reply that came but could not be read):

    - ``unavailable``: the server could not be reached (refused, no such socket, no route),
      or the connection was lost while the request was being sent;
    - ``tls_failed``: the TLS handshake failed (certificate not trusted, not a TLS server);
    - ``executor_lost``: the request was sent and the connection was lost before the whole
      reply came back (an invoke or submit may have run);
    - ``deadline_exceeded``: no reply within the client's ``timeout``;
    - ``invalid_input``: an input the client cannot send (a dtype Courier has no type
      for, or a ``dtypes`` entry that does not fit), refused before anything is sent;
    - ``bad_frame``: a frame reply whose header line is malformed or out of bounds, or
      whose bytes do not match it;
    - ``payload_too_large``: a reply longer than the client's ``max_reply_mib``;
    - ``internal``: a reply that is not what the API promises (not HTTP, not JSON, JSON of
      the wrong shape, or an error status without a Courier error body, e.g. a proxy's
      page; ``401``, ``502`` and ``504`` pages are ``unauthorized``, ``executor_lost`` and
      ``deadline_exceeded``).
    """

    def __init__(self, code, message, status=None, diagnostics=(), cause=None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status
        self.diagnostics = list(diagnostics)
        self.cause = cause

    def __repr__(self):
        return "ServeError(code={!r}, status={!r}, message={!r})".format(
            self.code, self.status, self.message)


class _UnixHTTPConnection(http.client.HTTPConnection):
    """An HTTPConnection to a unix-domain socket at ``path``."""

    def __init__(self, path, timeout):
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(self.timeout)
            sock.connect(self.unix_path)
        except BaseException:
            sock.close()
            raise
        self.sock = sock


class _Lost(Exception):
    """A reused connection failed where sending the request again is safe."""


def _parse_json(body):
    """``body`` parsed as JSON; ValueError (with what was wrong) when it is not, or nests
    deeper than the interpreter's stack allows."""
    try:
        return json.loads(body)
    except RecursionError:
        raise ValueError("its JSON nests too deeply") from None


def _read_body(response, limit, what):
    """The reply's body, read in pieces of at most _READ_PIECE bytes, so that a length it
    claims costs only what arrives; ServeError ``payload_too_large`` past ``limit`` bytes."""
    def too_large(size):
        return ServeError("payload_too_large", "{} is {} bytes, more than the client reads "
                          "({} MiB, its max_reply_mib)".format(what, size, limit >> 20),
                          response.status)
    if response.length is not None and response.length > limit:
        raise too_large(response.length)
    pieces = []
    size = 0
    while True:
        piece = response.read(min(_READ_PIECE, limit + 1 - size))
        if not piece:
            if response.length:
                # http.client returns what came of a body cut short of its Content-Length.
                raise http.client.IncompleteRead(b"".join(pieces), response.length)
            return b"".join(pieces)
        pieces.append(piece)
        size += len(piece)
        if size > limit:
            raise too_large("more than {}".format(limit))


def _error_from_reply(status, body):
    """The ServeError of an error reply: the one place the client reads an error body."""
    try:
        error = _parse_json(body)["error"]
        code = error["code"]
        message = error["message"]
        if not isinstance(code, str) or not isinstance(message, str):
            raise TypeError
    except (ValueError, KeyError, TypeError):
        # Not a Courier error body: a proxy's own page, described by its status as the
        # engine's executor client does.
        code = {401: "unauthorized", 502: "executor_lost", 504: "deadline_exceeded"}
        return ServeError(code.get(status, "internal"),
                          "HTTP {} without a Courier error body".format(status), status)
    diagnostics = error.get("diagnostics")
    if not isinstance(diagnostics, list):
        diagnostics = []
    cause = error.get("cause")
    if not isinstance(cause, str):
        cause = None
    return ServeError(code, message, status, diagnostics, cause)


def _is_dropped(sock):
    """True if the server closed (or wrote unasked to) a kept-alive connection."""
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(0))


def _little_endian_contiguous(array):
    """``array`` C-contiguous and little-endian: itself when it already is so."""
    dtype = array.dtype.newbyteorder("<") if array.dtype.byteorder == ">" else array.dtype
    if array.flags.c_contiguous and dtype == array.dtype:
        return array
    return np.array(array, dtype=dtype, order="C")


def _bf16_bits(values):
    """float32 values rounded to the nearest bf16, ties to even, as uint16 bit patterns."""
    floats = np.asarray(values, dtype="<f4")
    bits = floats.view("<u4").astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype("<u2")
    nan = np.isnan(floats)
    # A NaN stays a NaN (quiet), whatever its low bits: rounding could carry it to infinity.
    rounded[nan] = ((bits[nan] >> 16) | 0x40).astype("<u2")
    return rounded


def _bf16_to_float32(bits):
    """bf16 bit patterns widened, exactly, to float32."""
    return (np.asarray(bits, dtype="<u2").astype("<u4") << 16).view("<f4")


def _exactly(index, value, dtype, dtype_name):
    """Numbers or nested lists as an array of ``dtype``, as the engine converts them: rounded
    to a float dtype, refused when an integer or bool dtype cannot hold them exactly."""
    try:
        given = np.asarray(value)
        if dtype.kind == "f" or given.dtype.kind not in "biuf":
            return np.asarray(value, dtype=dtype)
        with np.errstate(invalid="ignore", over="ignore"):
            array = given.astype(dtype)
            exact = np.array_equal(array.astype(given.dtype), given)
    except (TypeError, ValueError, OverflowError) as e:
        raise ServeError("invalid_input", "input {}: cannot be {}: {}".format(
            index, dtype_name, e)) from None
    if not exact:
        raise ServeError("invalid_input", "input {}: holds a number {} cannot hold exactly"
                         .format(index, dtype_name))
    return array


def _to_tensor(index, value, dtype_name):
    """Input ``index`` as (Courier dtype name, C-contiguous little-endian array).

    NumPy arrays and scalars keep their dtype; Python ``bool``, ``int`` and ``float`` are
    ``i1``, ``i64`` and ``f64``, as NumPy takes them; ``dtype_name`` (a Courier dtype, or
    None) converts a value that is not a NumPy array to it and must match one that is.
    """
    if dtype_name is not None and dtype_name not in DTYPES:
        raise ServeError("invalid_input", "input {}: unknown dtype {!r} (dtypes: {})".format(
            index, dtype_name, ", ".join(DTYPES)))
    if dtype_name == "bf16":
        if isinstance(value, np.ndarray) and value.dtype == np.uint16:
            return "bf16", _little_endian_contiguous(value)
        if isinstance(value, np.ndarray) and value.dtype.kind != "f":
            raise ServeError("invalid_input", "input {}: a bf16 input is uint16 bit "
                             "patterns or floats to round, not {}".format(index, value.dtype))
        return "bf16", _bf16_bits(value)
    if isinstance(value, np.ndarray):
        array = value
    elif dtype_name is not None:
        array = _exactly(index, value, DTYPES[dtype_name], dtype_name)
    else:
        array = np.asarray(value)
    name = _COURIER_NAMES.get((array.dtype.kind, array.dtype.itemsize))
    if name is None:
        raise ServeError("invalid_input", "input {}: dtype {} has no Courier element type "
                         "(dtypes: {})".format(index, array.dtype, ", ".join(DTYPES)))
    if dtype_name is not None and name != dtype_name:
        raise ServeError("invalid_input", "input {}: dtypes says {} but the array is {} "
                         "({}): convert it with astype".format(index, dtype_name, name,
                                                               array.dtype))
    return name, _little_endian_contiguous(array)


def _json_number(value):
    """A float as JSON can carry it: NaN and the infinities as their strings."""
    if math.isfinite(value):
        return value
    return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")


def _json_tensor(index, value, dtype_name):
    """Input ``index`` as a JSON tensor of docs/rest.md."""
    if not isinstance(value, np.ndarray) and dtype_name is None:
        # Nested lists and numbers as they are: the server takes the entry's dtype.
        if isinstance(value, float):
            return _json_number(value)
        if isinstance(value, (list, tuple)):
            value = np.asarray(value)
            if value.dtype.kind == "f":
                return np.vectorize(_json_number, otypes=[object])(value).tolist()
            return value.tolist()
        if not isinstance(value, np.generic):
            return value
    name, array = _to_tensor(index, value, dtype_name)
    flat = array.reshape(-1)
    if name == "bf16":
        flat = _bf16_to_float32(flat)
    data = flat.tolist()
    if flat.dtype.kind == "f" and not np.isfinite(flat).all():
        data = [_json_number(x) for x in data]
    return {"dtype": name, "shape": list(array.shape), "data": data}


def _output_array(index, output, bf16_bits):
    """A JSON reply's output ``index`` as a NumPy array."""
    try:
        name = output["dtype"]
        shape = tuple(output["shape"])
        data = output["data"]
        dtype = DTYPES[name]
        if not all(type(d) is int and d >= 0 for d in shape):
            raise ValueError("its shape {} is not of non-negative integers".format(
                list(shape)))
        # The data is already in memory, parsed: the shape must account for it exactly.
        # float() reads the "NaN" and "Infinity" strings JSON carries them as.
        array = np.array(data, dtype="<f4" if name == "bf16" else dtype)
        if array.size != math.prod(shape):
            raise ValueError("its shape {} needs {} values, its data holds {}".format(
                list(shape), math.prod(shape), array.size))
        array = array.reshape(shape)
    except (KeyError, TypeError, ValueError, OverflowError) as e:
        raise ServeError("internal", "output {} of the reply is not a tensor: {}".format(
            index, e)) from None
    if name == "bf16" and bf16_bits:
        return _bf16_bits(array)
    return array


class Client:
    """A courier-serve client: ``Client(url, token=None, timeout=60.0, context=None)``.

    ``url`` is ``http://HOST:PORT``, ``https://HOST:PORT`` or ``unix:/PATH``; ``token`` is
    sent as ``Authorization: Bearer <token>`` on every request; ``timeout`` (seconds)
    bounds connecting and each wait for the server's bytes; ``context`` is the
    ``ssl.SSLContext`` of an ``https`` address; ``max_idle`` is how many connections stay
    open between requests; ``max_reply_mib`` bounds the bytes of one reply (a frame's
    outputs or a JSON body): a longer one fails with ``payload_too_large``. A client is a
    context manager; `close` closes its connections.
    """

    def __init__(self, url, token=None, timeout=60.0, context=None, max_idle=4,
                 max_reply_mib=4096):
        parsed = urllib.parse.urlsplit(url)
        self.url = url
        self._timeout = timeout
        self._prefix = ""
        if parsed.scheme == "unix":
            if not parsed.path.startswith("/"):
                raise ValueError("unix address {!r}: the socket's path must be absolute"
                                 .format(url))
            path = parsed.path
            self._connect = lambda: _UnixHTTPConnection(path, timeout)
        elif parsed.scheme in ("http", "https") and parsed.hostname:
            host, port = parsed.hostname, parsed.port
            self._prefix = parsed.path.rstrip("/")
            if parsed.scheme == "https":
                context = context or ssl.create_default_context()
                self._connect = lambda: http.client.HTTPSConnection(
                    host, port, timeout=timeout, context=context)
            else:
                if context is not None:
                    raise ValueError("an ssl context needs an https:// address, not {!r}"
                                     .format(url))
                self._connect = lambda: http.client.HTTPConnection(host, port,
                                                                   timeout=timeout)
        else:
            raise ValueError("{!r} is not a courier-serve address (http://HOST:PORT, "
                             "https://HOST:PORT or unix:/PATH)".format(url))
        self._headers = {"Authorization": "Bearer " + token} if token is not None else {}
        self._max_idle = max_idle
        self._max_reply = int(max_reply_mib) << 20
        self._idle = []
        self._lock = threading.Lock()
        # Each module's entries' input dtypes, from its description: {name: {entry: [dtype]}}.
        self._signatures = {}

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    def close(self):
        """Closes the idle connections; a request that runs closes its own when done."""
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    # --- probes -------------------------------------------------------------------------

    def health(self):
        """``GET /v1/health``: the server's status dict (``status``, ``version``, ...)."""
        return self._json("GET", "/v1/health")

    def ready(self):
        """``GET /v1/ready``: the readiness dict; `ServeError` ``not_ready`` or
        ``draining`` (status 503) while the server is not ready."""
        return self._json("GET", "/v1/ready")

    def metrics(self):
        """``GET /metrics``: the Prometheus text, as a str."""
        return self._request("GET", "/metrics", [b""], 0, None,
                             lambda response: self._read_text(response, "the metrics"))

    # --- modules ------------------------------------------------------------------------

    def submit(self, name, mlir, opt_level=None, executor=None):
        """``POST /v1/modules``: compiles ``mlir`` as module ``name``; its description.

        ``opt_level`` (0-3) and ``executor`` (``"local"``, ``"host:port"``,
        ``"unix:PATH"``) are the module's options, the server's defaults when None.
        """
        body = {"name": name, "mlir": mlir}
        options = self._options(opt_level, executor)
        if options:
            body["options"] = options
        self._forget_signature(name)
        return self._json("POST", "/v1/modules", body)

    def replace(self, name, mlir, opt_level=None, executor=None):
        """``PUT /v1/modules/{name}``: hot-reloads (or creates) ``name``; its description.

        Without ``opt_level`` and ``executor`` the module keeps its options.
        """
        body = {"mlir": mlir}
        options = self._options(opt_level, executor)
        if options:
            body["options"] = options
        self._forget_signature(name)
        return self._json("PUT", self._module_path(name), body)

    def describe(self, name):
        """``GET /v1/modules/{name}``: the module's description dict."""
        return self._json("GET", self._module_path(name))

    def list(self):
        """``GET /v1/modules``: a list of every module's description (dicts, as `describe`
        returns them), sorted by name."""
        modules = self._json("GET", "/v1/modules").get("modules")
        if not isinstance(modules, list):
            raise ServeError("internal", "the reply to a module listing has no modules list")
        return modules

    def delete(self, name):
        """``DELETE /v1/modules/{name}``; returns None."""
        self._forget_signature(name)
        self._json("DELETE", self._module_path(name))

    # --- invoke -------------------------------------------------------------------------

    def invoke(self, name, entry, *inputs, dtypes=None, bf16_bits=True):
        """Runs ``entry`` of module ``name`` on ``inputs``; its outputs, NumPy arrays.

        Inputs and outputs travel as a raw-bytes frame. An input is a NumPy array (any
        layout: a strided or big-endian one is packed once, a C-contiguous little-endian
        one is sent from its own memory) or scalar, which keep their dtype, or a Python
        ``bool``, ``int``, ``float`` or nested list, typed as NumPy types it (``i1``,
        ``i64``, ``f64``). An input that is not a NumPy array or scalar takes the dtype of
        the entry's input, as the engine types it (``[1.5, 2.5]`` for an ``f32`` input is
        sent as f32): the client reads the module's entries once (``describe``) and again
        after it replaces the module or the server refuses a call it typed so.
        ``dtypes``, one Courier dtype name or None per input, names the dtype instead
        (``dtypes=["f32"]`` sends ``2.5`` as an f32 scalar) and must match a NumPy array
        given: an array is never cast behind your back.

        ``bf16`` has no NumPy dtype, and travels as in the engine: as uint16 bit patterns.
        An input for a ``bf16`` input (or named ``"bf16"`` in ``dtypes``) is either a
        uint16 array (or scalar), taken as bit patterns, or floats, rounded to the nearest bf16 (ties to
        even, as the server rounds JSON numbers). A bf16 output comes back as its uint16
        bit patterns, or widened (exactly) to float32 with ``bf16_bits=False``.

        Each output is read from the socket into an array of its own, of the dtype and
        shape the reply declares (little-endian, writable, owning its memory).
        """
        if dtypes is not None and len(dtypes) != len(inputs):
            raise ServeError("invalid_input", "dtypes names {} inputs, the call has {}".format(
                len(dtypes), len(inputs)))
        given = list(dtypes) if dtypes is not None else [None] * len(inputs)
        # Numbers and lists, and uint16 arrays (bf16 bit patterns for a bf16 input).
        untyped = [i for i, value in enumerate(inputs)
                   if given[i] is None and (not isinstance(value, (np.ndarray, np.generic))
                                            or np.asarray(value).dtype == np.uint16)]
        if not untyped:
            return self._invoke_frame(name, entry, inputs, given, bf16_bits)
        # Typed by a signature read before: if the server refuses the inputs, the module may
        # have changed under another client; its entries are read again, once.
        for fresh in (False, True):
            signature, cached = self._entry_signature(name, entry, fresh)
            typed = list(given)
            if signature is not None and len(signature) == len(inputs):
                for i in untyped:
                    if signature[i] == "bf16" or not isinstance(inputs[i],
                                                                (np.ndarray, np.generic)):
                        typed[i] = signature[i]
            try:
                return self._invoke_frame(name, entry, inputs, typed, bf16_bits)
            except ServeError as e:
                if not cached or e.code not in ("invalid_input", "unknown_entry"):
                    raise
        raise AssertionError("unreachable")

    def _entry_signature(self, name, entry, fresh):
        """(the dtype of each input of ``entry`` of module ``name``, or None when it has no
        such entry; whether it came from the client's memory rather than the server now)."""
        with self._lock:
            entries = None if fresh else self._signatures.get(name)
        cached = entries is not None
        if entries is None:
            description = self.describe(name)
            entries = {}
            for described in description.get("entries") or []:
                try:
                    entries[described["name"]] = [i["dtype"] for i in described["inputs"]]
                except (KeyError, TypeError):
                    raise ServeError("internal", "the description of module {!r} has an "
                                     "entry that is not one".format(name)) from None
            with self._lock:
                self._signatures[name] = entries
        signature = entries.get(entry)
        if signature is not None and not all(d in DTYPES for d in signature):
            signature = None  # a dtype this client does not know: the server types it
        return signature, cached

    def _forget_signature(self, name):
        with self._lock:
            self._signatures.pop(name, None)

    def _invoke_frame(self, name, entry, inputs, dtypes, bf16_bits):
        header = []
        payload = []
        size = 0
        for index, value in enumerate(inputs):
            dtype_name, array = _to_tensor(index, value, dtypes[index])
            header.append({"dtype": dtype_name, "shape": list(array.shape)})
            if array.nbytes:
                payload.append(memoryview(array.reshape(-1).view(np.uint8)))
                size += array.nbytes
        line = json.dumps({"inputs": header}, separators=(",", ":")).encode() + b"\n"
        body = [line] + payload
        return self._request("POST", self._invoke_path(name, entry), body, len(line) + size,
                             FRAME_CONTENT_TYPE,
                             lambda response: self._read_frame(response, bf16_bits))

    def invoke_json(self, name, entry, *inputs, dtypes=None, bf16_bits=True):
        """As `invoke`, with JSON tensors (the KServe-like path); its outputs, NumPy arrays.

        NumPy arrays and scalars travel with their dtype and shape; Python numbers and
        nested lists as they are, taking the entry's dtype on the server, unless
        ``dtypes`` names one. NaN and the infinities travel as ``"NaN"``, ``"Infinity"``
        and ``"-Infinity"``. ``bf16`` is as in `invoke`.
        """
        if dtypes is not None and len(dtypes) != len(inputs):
            raise ServeError("invalid_input", "dtypes names {} inputs, the call has {}".format(
                len(dtypes), len(inputs)))
        tensors = [_json_tensor(index, value, dtypes[index] if dtypes is not None else None)
                   for index, value in enumerate(inputs)]
        reply = self._json("POST", self._invoke_path(name, entry), {"inputs": tensors})
        outputs = reply.get("outputs") if isinstance(reply, dict) else None
        if not isinstance(outputs, list):
            raise ServeError("internal", "the invoke reply has no outputs list")
        return [_output_array(i, output, bf16_bits) for i, output in enumerate(outputs)]

    # --- the one place requests are made ------------------------------------------------

    @staticmethod
    def _options(opt_level, executor):
        options = {}
        if opt_level is not None:
            options["optLevel"] = opt_level
        if executor is not None:
            options["executor"] = executor
        return options

    def _module_path(self, name):
        return "/v1/modules/" + urllib.parse.quote(name, safe="")

    def _invoke_path(self, name, entry):
        return self._module_path(name) + "/invoke/" + urllib.parse.quote(entry, safe="")

    def _json(self, method, path, body=None):
        """A JSON request; the reply's JSON (None for an empty 204)."""
        data = b"" if body is None else json.dumps(body, allow_nan=False).encode()
        content_type = None if body is None else "application/json"
        return self._request(method, path, [data], len(data), content_type, self._read_json)

    def _read_json(self, response):
        body = _read_body(response, self._max_reply, "the reply")
        if response.status == 204:
            return None
        try:
            reply = _parse_json(body)
            if not isinstance(reply, dict):
                raise ValueError("it is a JSON {}, not an object".format(type(reply).__name__))
        except ValueError as e:
            raise ServeError("internal", "the reply to a request is not a JSON object: "
                             "{}".format(e), response.status) from None
        return reply

    def _read_text(self, response, what):
        body = _read_body(response, self._max_reply, what)
        try:
            return body.decode()
        except UnicodeDecodeError as e:
            raise ServeError("internal", "{} are not UTF-8: {}".format(what, e),
                             response.status) from None

    def _request(self, method, path, body, length, content_type, read):
        """Sends ``body`` (a list of byte buffers, ``length`` bytes in all) and returns
        ``read(response)`` for a 2xx reply; raises the reply's ServeError otherwise."""
        conn = self._take()
        try:
            try:
                result = self._attempt(conn, method, path, body, length, content_type, read)
            except _Lost:
                conn.close()
                conn = self._connect()
                result = self._attempt(conn, method, path, body, length, content_type, read,
                                       reused=False)
        except BaseException:
            conn.close()
            raise
        # An error reply read whole leaves the connection as good as a success does.
        self._give_back(conn)
        if isinstance(result, ServeError):
            raise result
        return result

    def _attempt(self, conn, method, path, body, length, content_type, read, reused=None):
        """One try of a request on ``conn``: ``read``'s result, or the ServeError of an error
        reply read whole; raises _Lost when sending it again is safe, ServeError else."""
        if reused is None:
            reused = conn.sock is not None
        where = "{} {}{} on {}".format(method, self._prefix, path, self.url)
        sent = False
        try:
            if conn.sock is None:
                conn.connect()
            conn.putrequest(method, self._prefix + path, skip_accept_encoding=True)
            for key, value in self._headers.items():
                conn.putheader(key, value)
            if content_type is not None:
                conn.putheader("Content-Type", content_type)
            if method in ("POST", "PUT", "PATCH") or length:
                conn.putheader("Content-Length", str(length))
            conn.endheaders(body[0] if body else None)
            for chunk in body[1:]:
                conn.send(chunk)
            sent = True
            response = conn.getresponse()
        except ssl.SSLError as e:
            raise ServeError("tls_failed", "{}: TLS failed: {}".format(where, e)) from None
        except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError) as e:
            if reused and (not sent or method in _IDEMPOTENT):
                raise _Lost() from None
            if not sent:
                raise ServeError("unavailable", "{}: connection lost while sending the request "
                                 "({})".format(where, e)) from None
            # A TLS server closes a plaintext connection without a word; one that answered
            # on this connection before speaks plaintext.
            plaintext_tcp = type(conn) is http.client.HTTPConnection
            hint = " (a server serving TLS needs an https:// address)" \
                if plaintext_tcp and not reused else ""
            raise ServeError("executor_lost", "{}: connection lost before the reply{}; the "
                             "request may have run".format(where, hint)) from None
        except socket.timeout:
            if not sent and conn.sock is None:
                raise ServeError("unavailable", "{}: connecting timed out after {} s".format(
                    where, self._timeout)) from None
            raise ServeError("deadline_exceeded", "{}: no reply within the client's timeout "
                             "({} s)".format(where, self._timeout)) from None
        except OSError as e:
            if reused and not sent:
                raise _Lost() from None
            raise ServeError("unavailable", "{}: cannot connect ({})".format(
                where, e.strerror or e)) from None
        except http.client.HTTPException as e:
            # A status line or headers http.client refuses (over 100 headers, a line over
            # 64 KiB, no HTTP version): not a reply at all.
            raise ServeError("internal", "{}: the reply is not HTTP ({}: {})".format(
                where, type(e).__name__, e)) from None
        try:
            if not 200 <= response.status < 300:
                body = response.read(_MAX_ERROR_BODY)
                if response.read(1):
                    # Longer than any Courier error body: not one, and not read further.
                    body = b""
                    conn.close()
                return _error_from_reply(response.status, body)
            return read(response)
        except socket.timeout:
            raise ServeError("deadline_exceeded", "{}: the reply stalled past the client's "
                             "timeout ({} s)".format(where, self._timeout)) from None
        except (http.client.IncompleteRead, ConnectionError) as e:
            raise ServeError("executor_lost", "{}: connection lost during the reply ({}); the "
                             "request may have run".format(where, e)) from None
        except (http.client.HTTPException, ValueError) as e:
            # A chunk size that is not hex, and the like.
            raise ServeError("internal", "{}: the reply's body is not HTTP ({}: {})".format(
                where, type(e).__name__, e), response.status) from None

    def _read_frame(self, response, bf16_bits):
        """A frame reply's outputs, each read from the socket into an array of its own."""
        content_type = response.getheader("Content-Type", "")
        if not content_type.startswith(FRAME_CONTENT_TYPE):
            raise ServeError("internal", "a frame invoke answered {!r}, not a frame".format(
                content_type), response.status)
        specs = self._frame_outputs(response)
        arrays = []
        for index, (dtype, name, shape, size) in enumerate(specs):
            array = self._read_output(response, index, dtype, shape, size)
            if name == "bf16" and not bf16_bits:
                array = _bf16_to_float32(array)
            arrays.append(array)
        if response.read(1):
            raise ServeError("bad_frame", "the reply holds bytes past its {} outputs".format(
                len(arrays)), response.status)
        return arrays

    def _frame_outputs(self, response):
        """The frame reply's header line as (dtype, name, shape, bytes) per output, each
        checked before anything is allocated for it: bounded counts and ranks, shapes that
        need exactly the declared bytes, at consecutive offsets, which add up to what the
        reply's Content-Length leaves (when it has one) and to no more than max_reply_mib."""
        def bad(what):
            return ServeError("bad_frame", "the reply's frame header is not one: " + what,
                              response.status)
        line = response.readline(_MAX_HEADER_LINE + 1)
        if not line.endswith(b"\n"):
            raise bad("no newline in its first {} bytes".format(len(line)))
        try:
            header = _parse_json(line)
        except ValueError as e:
            raise bad(str(e)) from None
        outputs = header.get("outputs") if isinstance(header, dict) else None
        if not isinstance(outputs, list):
            raise bad("it has no outputs list")
        if len(outputs) > _MAX_FRAME_TENSORS:
            raise bad("it declares {} outputs, more than {}".format(len(outputs),
                                                                   _MAX_FRAME_TENSORS))
        specs = []
        offset = 0
        for index, out in enumerate(outputs):
            if not isinstance(out, dict):
                raise bad("output {} is not an object".format(index))
            name, shape = out.get("dtype"), out.get("shape")
            at, size = out.get("offset"), out.get("bytes")
            if not isinstance(name, str) or name not in DTYPES:
                raise bad("output {} has dtype {!r}".format(index, name))
            if not isinstance(shape, list) or len(shape) > _MAX_FRAME_RANK or \
                    not all(type(d) is int and d >= 0 for d in shape):
                raise bad("output {} has shape {!r}, not up to {} non-negative integers"
                          .format(index, shape, _MAX_FRAME_RANK))
            if type(at) is not int or type(size) is not int:
                raise bad("output {} has offset {!r} and bytes {!r}, not integers".format(
                    index, at, size))
            dtype = DTYPES[name]
            expected = math.prod(shape) * dtype.itemsize
            if at != offset or size != expected:
                raise ServeError("bad_frame", "output {} of the reply declares bytes {}..{}, "
                                 "expected {}..{}".format(index, at, at + size, offset,
                                                          offset + expected),
                                 response.status)
            offset += size
            specs.append((dtype, name, tuple(shape), size))
        if response.length is not None and offset != response.length:
            raise ServeError("bad_frame", "the reply's frame header declares {} bytes of "
                             "outputs, and {} bytes follow it".format(offset, response.length),
                             response.status)
        if offset > self._max_reply:
            raise ServeError("payload_too_large", "the reply's outputs are {} bytes, more "
                             "than the client reads ({} MiB, its max_reply_mib)".format(
                                 offset, self._max_reply >> 20), response.status)
        return specs

    @staticmethod
    def _read_output(response, index, dtype, shape, size):
        """Output ``index``: ``size`` bytes read into an array of its own, which grows with
        the bytes that arrive (by doubling, from _READ_PIECE) rather than being allocated at
        the size the header claims."""
        array = np.empty(0, dtype)
        filled = 0
        while filled < size:
            room = min(size, max(2 * filled, _READ_PIECE))
            array.resize(room // dtype.itemsize, refcheck=False)
            with memoryview(array.view(np.uint8)) as view:
                while filled < room:
                    got = response.readinto(view[filled:room])
                    if not got:
                        raise ServeError("bad_frame", "the reply ends in output {}, {} of its "
                                         "{} bytes read".format(index, filled, size),
                                         response.status)
                    filled += got
        array.shape = shape
        return array

    def _take(self):
        """An idle connection the server has not closed, else a new one (not yet open)."""
        while True:
            with self._lock:
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                return self._connect()
            if conn.sock is not None and not _is_dropped(conn.sock):
                return conn
            conn.close()

    def _give_back(self, conn):
        with self._lock:
            if conn.sock is not None and len(self._idle) < self._max_idle:
                self._idle.append(conn)
                return
        conn.close()
