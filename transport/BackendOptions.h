// How a program reaches its executors, whichever backend it takes: the options every backend
// is made with (transport/Backend.h). Installed: the engine's options embed them (jit/Engine.h).
#ifndef COURIER_TRANSPORT_BACKENDOPTIONS_H
#define COURIER_TRANSPORT_BACKENDOPTIONS_H

// Its siblings by name alone: they resolve from this header's own directory, here and where
// it is installed (include/courier/transport/).
#include "SharedMemoryMode.h"
#include "TlsOptions.h"

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace courier::transport {

/// Options shared by every backend; the local backend ignores the network ones.
struct BackendOptions {
  std::chrono::milliseconds connectTimeout{2000};
  std::chrono::milliseconds requestTimeout{60000};
  std::string bearerToken;          ///< Sent as "Authorization: Bearer <token>" when non-empty.
  std::vector<std::string> plugins; ///< Shared libraries the local executor loads for `call`.
  TlsClientOptions tls;             ///< For "https://" addresses.
  SharedMemory sharedMemory = SharedMemory::Auto;
  /// The newest control page version of a same-host channel to ask for; 0: the newest this
  /// build speaks. An older one is for comparing versions and for testing an older client.
  uint32_t sharedMemoryPageVersion = 0;
};

} // namespace courier::transport

#endif // COURIER_TRANSPORT_BACKENDOPTIONS_H
