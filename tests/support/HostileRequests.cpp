// Building hostile requests and reading the replies (see HostileRequests.h).
#include "tests/support/HostileRequests.h"

#include <nlohmann/json.hpp>
#include <zlib.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <stdexcept>

namespace courier::testing {

std::string gzipOfZeros(size_t inflated) {
  z_stream stream{};
  // 31: a gzip header and trailer around the deflate stream.
  if (deflateInit2(&stream, Z_BEST_COMPRESSION, Z_DEFLATED, 31, 9, Z_DEFAULT_STRATEGY) != Z_OK)
    throw std::runtime_error("deflateInit2 failed");
  const std::string zeros(1 << 20, '\0');
  std::string out;
  char buffer[1 << 16];
  size_t left = inflated;
  int flush = Z_NO_FLUSH;
  do {
    size_t piece = std::min(left, zeros.size());
    stream.next_in = reinterpret_cast<Bytef *>(const_cast<char *>(zeros.data()));
    stream.avail_in = static_cast<uInt>(piece);
    left -= piece;
    flush = left == 0 ? Z_FINISH : Z_NO_FLUSH;
    do {
      stream.next_out = reinterpret_cast<Bytef *>(buffer);
      stream.avail_out = sizeof(buffer);
      deflate(&stream, flush);
      out.append(buffer, sizeof(buffer) - stream.avail_out);
    } while (stream.avail_out == 0);
  } while (flush != Z_FINISH);
  deflateEnd(&stream);
  return out;
}

std::string encodedRequest(const std::string &method, const std::string &path,
                           const std::string &coding, const std::string &body) {
  std::string request = method + " " + path +
                        " HTTP/1.1\r\nHost: x\r\nContent-Encoding: " + coding +
                        "\r\nContent-Type: application/octet-stream\r\n";
  if (!body.empty())
    request += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  return request + "\r\n" + body;
}

RawReply parseRawReply(const std::string &bytes) {
  RawReply reply;
  for (size_t at = bytes.find("HTTP/1.1 "); at != std::string::npos;
       at = bytes.find("HTTP/1.1 ", at + 1))
    ++reply.responses;
  if (bytes.rfind("HTTP/1.1 ", 0) != 0)
    return reply;
  reply.status = std::atoi(bytes.c_str() + 9);
  size_t headEnd = bytes.find("\r\n\r\n");
  std::string head = bytes.substr(0, headEnd);
  reply.saysClose = (head + "\r\n").find("\r\nConnection: close\r\n") != std::string::npos;
  if (headEnd == std::string::npos)
    return reply;
  size_t length = 0;
  size_t field = head.find("\r\nContent-Length: ");
  if (field != std::string::npos)
    length = std::stoul(head.substr(field + 18));
  auto body = nlohmann::json::parse(bytes.substr(headEnd + 4, length), nullptr, false);
  if (body.is_object() && body.contains("error") && body["error"].is_object()) {
    reply.code = body["error"].value("code", "");
    reply.message = body["error"].value("message", "");
  }
  return reply;
}

long procStatusKiB(int pid, const std::string &field) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind(field + ":", 0) == 0)
      return std::stol(line.substr(field.size() + 1));
  return -1;
}

} // namespace courier::testing
