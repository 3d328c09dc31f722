"""courier.serve.Client against a hostile server: replies whose headers claim sizes they do
not send, frames whose header lines lie or overflow their bounds, JSON nested past the
interpreter's stack, bodies cut short and replies that are not HTTP. Each must end in a
ServeError naming what was wrong, without allocating what the reply claims (a claim of
128 TiB would be a MemoryError) and without hanging.

The server is http.server on 127.0.0.1:0 in a thread, answering every request with the raw
bytes the test set, then closing the connection.
"""

import http.server
import json
import threading

import numpy as np
import pytest

from courier.serve import Client, ServeError

FRAME = "application/x-courier-frame"
# 128 TiB of f64: 2**44 elements of 8 bytes.
HUGE_ELEMENTS = 1 << 44
HUGE_BYTES = HUGE_ELEMENTS * 8
# A client bound (in MiB) above every claim here: 1 EiB.
UNBOUNDED_MIB = 1 << 40


class HostileServer:
    """Answers each request, whatever it is, with ``reply`` (raw bytes), then closes."""

    def __init__(self):
        self.reply = b""
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def answer(self):
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                self.wfile.write(owner.reply)
                self.wfile.flush()
                self.close_connection = True

            do_GET = do_POST = do_PUT = do_DELETE = answer

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,),
                                       daemon=True)
        self.thread.start()
        self.url = "http://127.0.0.1:{}".format(self.httpd.server_address[1])

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(10)


@pytest.fixture
def hostile():
    server = HostileServer()
    yield server
    server.close()


def raw_reply(body, status=200, content_type="application/json", length=None, chunked=False,
              extra=""):
    """A reply's bytes: ``length`` is the Content-Length it claims (that of ``body`` when
    None, none at all when False); ``chunked`` sends ``body`` as it is, already chunked."""
    head = "HTTP/1.1 {} Hostile\r\nContent-Type: {}\r\nConnection: close\r\n".format(
        status, content_type)
    if chunked:
        head += "Transfer-Encoding: chunked\r\n"
    elif length is not False:
        head += "Content-Length: {}\r\n".format(len(body) if length is None else length)
    return (head + extra + "\r\n").encode() + body


def frame(outputs, payload=b"", **kwargs):
    """A frame reply with header line {"outputs": outputs} and ``payload`` after it."""
    line = json.dumps({"outputs": outputs}).encode() + b"\n"
    return raw_reply(line + payload, content_type=FRAME, **kwargs)


def f64s(count, offset=0, size=None):
    return {"dtype": "f64", "shape": [count], "offset": offset,
            "bytes": count * 8 if size is None else size}


def failure(call):
    """The ServeError ``call`` raises (any other exception fails the test)."""
    with pytest.raises(ServeError) as raised:
        call()
    return raised.value


def invoke(server, **client_options):
    with Client(server.url, timeout=10, **client_options) as client:
        return failure(lambda: client.invoke("m", "main", np.zeros(1)))


def health(server, **client_options):
    with Client(server.url, timeout=10, **client_options) as client:
        return failure(client.health)


# --- frame replies ------------------------------------------------------------------------

def test_a_frame_claiming_128_tib_beyond_its_content_length_is_refused_before_reading(
        hostile):
    hostile.reply = frame([f64s(HUGE_ELEMENTS)], b"\0" * 16)
    error = invoke(hostile)
    assert error.code == "bad_frame" and error.status == 200
    assert "declares {} bytes of outputs, and 16 bytes follow it".format(HUGE_BYTES) \
        in error.message


def test_a_frame_claiming_more_than_the_clients_bound_is_refused_before_reading(hostile):
    # No Content-Length to compare with: the client's own bound refuses it.
    hostile.reply = frame([f64s(HUGE_ELEMENTS)], b"\0" * 16, length=False)
    error = invoke(hostile)
    assert error.code == "payload_too_large"
    assert "outputs are {} bytes, more than the client reads (4096 MiB".format(HUGE_BYTES) \
        in error.message


def test_a_frame_claiming_128_tib_without_a_length_costs_only_what_arrives(hostile):
    # No Content-Length, and a client bound above the claim: the body ends when the
    # connection closes, 16 bytes in, and the output had grown to no more than those.
    hostile.reply = frame([f64s(HUGE_ELEMENTS)], b"\0" * 16, length=False)
    error = invoke(hostile, max_reply_mib=UNBOUNDED_MIB)
    assert error.code == "bad_frame"
    assert "the reply ends in output 0, 16 of its {} bytes read".format(HUGE_BYTES) \
        in error.message


def test_a_chunked_frame_claiming_128_tib_costs_only_what_arrives(hostile):
    line = json.dumps({"outputs": [f64s(HUGE_ELEMENTS)]}).encode() + b"\n"
    body = line + b"\0" * 16
    # One chunk that claims far more than it holds, then the connection closes.
    hostile.reply = raw_reply(b"%x\r\n" % (1 << 60) + body, content_type=FRAME, chunked=True)
    error = invoke(hostile, max_reply_mib=UNBOUNDED_MIB)
    assert error.code in ("bad_frame", "executor_lost")
    assert "output 0" in error.message or "connection lost during the reply" in error.message


def test_a_frame_past_the_clients_reply_bound_is_too_large(hostile):
    count = (2 << 20) // 8
    hostile.reply = frame([f64s(count)], b"\0" * (count * 8))
    error = invoke(hostile, max_reply_mib=1)
    assert error.code == "payload_too_large"
    assert "outputs are 2097152 bytes, more than the client reads (1 MiB" in error.message


def test_a_frame_whose_declared_bytes_do_not_fit_its_shape_is_refused(hostile):
    hostile.reply = frame([f64s(4, size=16)], b"\0" * 16)
    error = invoke(hostile)
    assert error.code == "bad_frame"
    assert "output 0 of the reply declares bytes 0..16, expected 0..32" in error.message


def test_a_frame_whose_offsets_leave_a_gap_is_refused(hostile):
    hostile.reply = frame([f64s(1), f64s(1, offset=16)], b"\0" * 24)
    error = invoke(hostile)
    assert error.code == "bad_frame"
    assert "output 1 of the reply declares bytes 16..24, expected 8..16" in error.message


def test_a_frame_cut_short_of_its_content_length_is_refused(hostile):
    hostile.reply = frame([f64s(4)], b"\0" * 10, length=len(json.dumps(
        {"outputs": [f64s(4)]})) + 1 + 32)
    error = invoke(hostile)
    assert error.code == "bad_frame"
    assert "the reply ends in output 0, 10 of its 32 bytes read" in error.message


def test_a_frame_with_bytes_past_its_outputs_is_refused(hostile):
    hostile.reply = frame([f64s(1)], b"\0" * 12, length=False)
    error = invoke(hostile)
    assert error.code == "bad_frame"
    assert "the reply holds bytes past its 1 outputs" in error.message


@pytest.mark.parametrize("outputs, what", [
    ([{"dtype": "f64", "shape": [1] * 65, "offset": 0, "bytes": 8}], "output 0 has shape"),
    ([{"dtype": "f64", "shape": [-1], "offset": 0, "bytes": -8}], "output 0 has shape"),
    ([{"dtype": "f64", "shape": [True], "offset": 0, "bytes": 8}], "output 0 has shape"),
    ([{"dtype": "f64", "shape": [1.5], "offset": 0, "bytes": 12}], "output 0 has shape"),
    ([{"dtype": "f64", "shape": "4", "offset": 0, "bytes": 32}], "output 0 has shape"),
    ([{"dtype": "f128", "shape": [1], "offset": 0, "bytes": 16}], "output 0 has dtype 'f128'"),
    ([{"dtype": ["f64"], "shape": [1], "offset": 0, "bytes": 8}], "output 0 has dtype"),
    ([{"dtype": "f64", "shape": [1], "offset": "0", "bytes": 8}], "not integers"),
    ([f64s(0)] * 4097, "it declares 4097 outputs, more than 4096"),
    ([7], "output 0 is not an object"),
], ids=["rank-65", "negative", "bool", "float", "string-shape", "unknown-dtype",
        "list-dtype", "string-offset", "too-many-outputs", "not-an-object"])
def test_a_frame_header_out_of_bounds_is_refused_naming_what(hostile, outputs, what):
    hostile.reply = frame(outputs)
    error = invoke(hostile)
    assert error.code == "bad_frame"
    assert error.message.startswith("the reply's frame header is not one: ")
    assert what in error.message


@pytest.mark.parametrize("line, what", [
    (b"[" * 200000 + b"\n", "its JSON nests too deeply"),
    (b'{"outputs": ' + b'{"a": ' * 100000 + b"1" + b"}" * 100001 + b"\n",
     "its JSON nests too deeply"),
    (b"not json\n", "Expecting value"),
    (b'{"outputs": {"dtype": "f64"}}\n', "it has no outputs list"),
    (b"[1, 2]\n", "it has no outputs list"),
    (b"x" * ((1 << 20) + 10), "no newline in its first 1048577 bytes"),
], ids=["nested-arrays", "nested-objects", "not-json", "outputs-object", "not-an-object",
        "no-newline"])
def test_a_frame_header_line_that_is_not_one_is_refused(hostile, line, what):
    hostile.reply = raw_reply(line, content_type=FRAME)
    error = invoke(hostile)
    assert error.code == "bad_frame"
    assert what in error.message


# --- JSON replies -------------------------------------------------------------------------

def test_json_nested_past_the_stack_is_refused_not_a_recursion_error(hostile):
    hostile.reply = raw_reply(b"[" * 200000)
    error = health(hostile)
    assert error.code == "internal"
    assert "the reply to a request is not a JSON object: its JSON nests too deeply" \
        in error.message


def test_a_json_reply_claiming_128_tib_is_refused_before_reading(hostile):
    hostile.reply = raw_reply(b'{"status": "ok"}', length=HUGE_BYTES)
    error = health(hostile)
    assert error.code == "payload_too_large"
    assert "the reply is {} bytes, more than the client reads (4096 MiB".format(HUGE_BYTES) \
        in error.message


def test_a_json_reply_without_a_length_is_read_up_to_the_bound(hostile):
    hostile.reply = raw_reply(b'{"pad": "' + b"x" * (2 << 20) + b'"}', length=False)
    error = health(hostile, max_reply_mib=1)
    assert error.code == "payload_too_large"
    assert "more than 1048576 bytes" in error.message


def test_a_json_reply_cut_short_of_its_content_length_is_a_lost_reply(hostile):
    hostile.reply = raw_reply(b'{"status": "ok"}', length=1000)
    error = health(hostile)
    assert error.code == "executor_lost"
    assert "connection lost during the reply" in error.message


def test_a_json_reply_that_is_not_an_object_is_refused(hostile):
    hostile.reply = raw_reply(b"[1, 2, 3]")
    error = health(hostile)
    assert error.code == "internal"
    assert "it is a JSON list, not an object" in error.message


def test_a_module_listing_without_a_list_is_refused(hostile):
    hostile.reply = raw_reply(b'{"modules": 5}')
    with Client(hostile.url, timeout=10) as client:
        error = failure(client.list)
    assert error.code == "internal"
    assert "no modules list" in error.message


@pytest.mark.parametrize("output, what", [
    ({"dtype": "f64", "shape": [HUGE_ELEMENTS], "data": [1.0, 2.0]},
     "its shape [{}] needs {} values, its data holds 2".format(HUGE_ELEMENTS, HUGE_ELEMENTS)),
    ({"dtype": "f64", "shape": [-2], "data": [1.0, 2.0]}, "not of non-negative integers"),
    ({"dtype": "f64", "shape": [2], "data": [[1.0], 2.0]}, "output 0 of the reply"),
    ({"dtype": "f64", "shape": [1], "data": ["one"]}, "output 0 of the reply"),
    ({"dtype": "i8", "shape": [1], "data": [1 << 70]}, "output 0 of the reply"),
    ({"dtype": "f64", "shape": [1], "data": {"a": 1}}, "output 0 of the reply"),
    ({"dtype": "f64", "shape": 1, "data": [1.0]}, "output 0 of the reply"),
], ids=["huge-shape", "negative-shape", "ragged", "string", "overflow", "object-data",
        "scalar-shape"])
def test_a_json_invoke_output_that_is_not_a_tensor_is_refused(hostile, output, what):
    hostile.reply = raw_reply(json.dumps({"outputs": [output]}).encode())
    with Client(hostile.url, timeout=10) as client:
        error = failure(lambda: client.invoke_json("m", "main", [1.0]))
    assert error.code == "internal"
    assert "output 0 of the reply is not a tensor" in error.message
    assert what in error.message


def test_a_json_invoke_reply_that_is_not_an_object_is_refused(hostile):
    hostile.reply = raw_reply(b'"outputs"')
    with Client(hostile.url, timeout=10) as client:
        error = failure(lambda: client.invoke_json("m", "main", [1.0]))
    assert error.code == "internal"


# --- error replies ------------------------------------------------------------------------

def test_an_error_reply_claiming_128_tib_is_read_no_further_than_an_error_body(hostile):
    hostile.reply = raw_reply(b"<html>busy</html>", status=503, length=HUGE_BYTES)
    error = health(hostile)
    assert error.code == "internal" and error.status == 503
    assert error.message == "HTTP 503 without a Courier error body"


def test_an_error_reply_nested_past_the_stack_is_no_courier_error(hostile):
    hostile.reply = raw_reply(b'{"error": ' * 100000, status=500)
    error = health(hostile)
    assert error.code == "internal" and error.status == 500
    assert error.message == "HTTP 500 without a Courier error body"


def test_an_error_reply_longer_than_any_error_body_is_no_courier_error(hostile):
    body = b'{"error": {"code": "unknown_module", "message": "' + b"x" * (2 << 20) + b'"}}'
    hostile.reply = raw_reply(body, status=404)
    error = health(hostile)
    assert error.code == "internal" and error.status == 404


def test_an_error_reply_with_diagnostics_that_are_not_a_list_keeps_its_code(hostile):
    hostile.reply = raw_reply(json.dumps({"error": {
        "code": "compile_failed", "message": "bad", "diagnostics": 5}}).encode(), status=422)
    error = health(hostile)
    assert error.code == "compile_failed" and error.diagnostics == []


@pytest.mark.parametrize("cause, read", [("kernel_crashed", "kernel_crashed"), (5, None),
                                          (None, None)])
def test_an_error_replys_cause_is_read_when_it_is_a_string(hostile, cause, read):
    error = {"code": "executor_failed", "message": "the executor failed"}
    if cause is not None:
        error["cause"] = cause
    hostile.reply = raw_reply(json.dumps({"error": error}).encode(), status=422)
    refused = health(hostile)
    assert refused.code == "executor_failed" and refused.cause == read


# --- replies that are not HTTP ------------------------------------------------------------

@pytest.mark.parametrize("reply, what", [
    (b"SSH-2.0-OpenSSH_9.2\r\n\r\n", "the reply is not HTTP"),
    (raw_reply(b"{}", extra="".join("X-H{}: v\r\n".format(i) for i in range(200))),
     "the reply is not HTTP"),
    (raw_reply(b"{}", extra="X-Long: " + "v" * 70000 + "\r\n"), "the reply is not HTTP"),
], ids=["not-http", "too-many-headers", "long-header"])
def test_a_reply_that_is_not_http_is_refused(hostile, reply, what):
    hostile.reply = reply
    error = health(hostile)
    assert error.code == "internal"
    assert what in error.message


def test_a_chunk_size_that_is_not_hex_ends_the_reply(hostile):
    # http.client reads it as a body cut short.
    hostile.reply = raw_reply(b"zz\r\n{}\r\n0\r\n\r\n", chunked=True)
    error = health(hostile)
    assert error.code == "executor_lost"
    assert "connection lost during the reply" in error.message
