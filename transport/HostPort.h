// The one parser of "host:port" addresses: executor addresses, --listen, the HTTP client's
// target and courier-serve's per-module executor all go through it, so they accept and
// refuse the same spellings.
#ifndef COURIER_TRANSPORT_HOSTPORT_H
#define COURIER_TRANSPORT_HOSTPORT_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <string>

namespace courier::transport {

struct HostPort {
  std::string host; ///< Without the brackets of an IPv6 literal.
  unsigned port = 0;
};

/// Whether port 0 is allowed: a server may listen on it (the system picks a free port), a
/// client cannot connect to it.
enum class PortZero { Refused, Allowed };

/// Parses "host:port" or "[v6-host]:port": a non-empty host without '/' or spaces, an IPv6
/// host in brackets, a decimal port up to 65535. The error says only what is wrong ("no
/// port", ...), for the caller to put after the address and what it was for.
llvm::Expected<HostPort> parseHostPort(llvm::StringRef address, PortZero zero = PortZero::Refused);

} // namespace courier::transport

#endif // COURIER_TRANSPORT_HOSTPORT_H
