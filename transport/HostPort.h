// The one parser of server addresses, "host:port", "https://host:port" or "unix:/path":
// executor addresses, --listen, the HTTP client's target and courier-serve's per-module
// executor all go through it, so they accept and refuse the same spellings.
#ifndef COURIER_TRANSPORT_HOSTPORT_H
#define COURIER_TRANSPORT_HOSTPORT_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <string>

namespace courier::transport {

struct HostPort {
  std::string host;  ///< Without the brackets of an IPv6 literal; a unix socket's path.
  unsigned port = 0; ///< 0 for a unix socket.
  bool unixSocket = false;
  bool tls = false; ///< "https://": the client speaks TLS and verifies the server.
};

/// What starts the address of an executor that speaks TLS: "https://10.0.0.7:7443".
inline constexpr llvm::StringLiteral kHttpsPrefix = "https://";

/// What starts a unix-domain socket's address: "unix:/run/courier/executor.sock".
inline constexpr llvm::StringLiteral kUnixSocketPrefix = "unix:";

/// Whether port 0 is allowed: a server may listen on it (the system picks a free port), a
/// client cannot connect to it.
enum class PortZero { Refused, Allowed };

/// Parses "host:port" or "[v6-host]:port": a non-empty host without '/' or spaces, an IPv6
/// host in brackets, a decimal port up to 65535. "unix:PATH" names a unix-domain socket by
/// its absolute path (at most 107 bytes, the size of sockaddr_un's sun_path). Either TCP form
/// may start with "https://" (TLS); a unix socket cannot. The error says
/// only what is wrong ("no port", ...), for the caller to put after the address and what it
/// was for.
llvm::Expected<HostPort> parseHostPort(llvm::StringRef address, PortZero zero = PortZero::Refused);

/// True when `host` names only this machine (127.0.0.0/8, ::1, localhost).
bool isLoopbackHost(const std::string &host);

} // namespace courier::transport

#endif // COURIER_TRANSPORT_HOSTPORT_H
