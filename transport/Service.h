// What a server offers the process that runs it, whatever it serves: its address, serving
// until stopped, draining and stopping. courier-executor's server (executor/ExecutorServer.h)
// and courier-serve's (serve/RestService.h) are both one, over transport/HttpService.h.
#ifndef COURIER_TRANSPORT_SERVICE_H
#define COURIER_TRANSPORT_SERVICE_H

#include "llvm/Support/Error.h"

#include <string>

namespace courier::transport {

class Service {
public:
  virtual ~Service();

  /// "host:port" actually bound ("https://host:port" with TLS), or "unix:PATH".
  virtual std::string address() const = 0;
  /// Serves requests on the calling thread until stop() is called.
  virtual llvm::Error run() = 0;
  /// Drains, then stops: /v1/ready answers 503 and nothing new is taken on while requests in
  /// flight finish, up to the drain timeout. Safe from any thread.
  virtual void drainAndStop() = 0;
  /// Ends a drain's wait at once, so drainAndStop() stops now; safe from any thread.
  virtual void cutDrainShort() = 0;
  /// Stops serving; safe from any thread, and before or during run().
  virtual void stop() = 0;
};

} // namespace courier::transport

#endif // COURIER_TRANSPORT_SERVICE_H
