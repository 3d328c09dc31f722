// Splitting and checking "host:port", "https://host:port" and "unix:/path" addresses.
#include "transport/HostPort.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"

#include <arpa/inet.h>

namespace courier::transport {

llvm::Expected<HostPort> parseHostPort(llvm::StringRef address, PortZero zero) {
  auto bad = [](const char *why) { return llvm::createStringError(why); };
  bool tls = address.consume_front(kHttpsPrefix);
  if (tls && address.starts_with(kUnixSocketPrefix))
    return bad("a unix socket's address takes no https:// (its file mode guards it)");
  if (address.starts_with(kUnixSocketPrefix)) {
    llvm::StringRef path = address.drop_front(kUnixSocketPrefix.size());
    if (!path.starts_with("/"))
      return bad("a unix socket's path must be absolute");
    if (path.size() > 107)
      return bad("a unix socket's path is at most 107 bytes");
    if (path.contains('\0'))
      return bad("a unix socket's path contains a NUL byte");
    return HostPort{path.str(), 0, true};
  }
  size_t colon = address.rfind(':');
  if (colon == llvm::StringRef::npos)
    return bad("no port");
  llvm::StringRef host = address.take_front(colon);
  llvm::StringRef port = address.drop_front(colon + 1);
  if (host.starts_with("[") != host.ends_with("]"))
    return bad("unbalanced brackets around the host");
  bool bracketed = host.starts_with("[");
  if (bracketed)
    host = host.drop_front().drop_back();
  if (host.empty())
    return bad("no host");
  if (host.contains('/') || host.contains(' ') || host.contains('[') || host.contains(']'))
    return bad("the host contains '/', a space or a stray bracket");
  if (!bracketed && host.contains(':'))
    return bad("an IPv6 host must be in brackets");
  unsigned value = 0;
  unsigned lowest = zero == PortZero::Allowed ? 0 : 1;
  if (port.empty() || !llvm::all_of(port, llvm::isDigit) || port.getAsInteger(10, value) ||
      value < lowest || value > 65535)
    return bad(zero == PortZero::Allowed ? "the port must be a number from 0 to 65535"
                                         : "the port must be a number from 1 to 65535");
  return HostPort{host.str(), value, false, tls};
}

bool isLoopbackHost(const std::string &host) {
  if (host == "localhost")
    return true;
  in_addr v4;
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1)
    return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6;
  if (inet_pton(AF_INET6, host.c_str(), &v6) == 1)
    return IN6_IS_ADDR_LOOPBACK(&v6);
  return false;
}

} // namespace courier::transport
