// What one session has loaded on its kernel host, for the executor core's sessions and the
// in-process backend's alike. Loads and unloads go one at a time, so the set matches what the
// host has loaded; a launch of a loaded object looks under a shared lock, never waiting for a
// load of another (which may wait for a long launch on the session's worker); once the session
// is closed, nothing more loads.
#ifndef COURIER_EXECUTOR_SESSIONOBJECTS_H
#define COURIER_EXECUTOR_SESSIONOBJECTS_H

#include "transport/ErrorCode.h"

#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <mutex>
#include <set>
#include <shared_mutex>
#include <string>
#include <vector>

namespace courier::executor {

class SessionObjects {
public:
  /// `session` names the session in messages.
  explicit SessionObjects(std::string session) : session(std::move(session)) {}

  /// Loads `sha` once: `load` runs unless it is loaded already, alone among loads and unloads.
  /// A load that fails leaves it unloaded. `unknown_session` once the session is closed; a
  /// load that succeeded as it closed is undone by `undo` first.
  llvm::Error attach(llvm::StringRef sha, llvm::function_ref<llvm::Error()> load,
                     llvm::function_ref<void()> undo) {
    llvm::Expected<bool> loaded = contains(sha);
    if (!loaded || *loaded)
      return loaded.takeError();
    std::lock_guard<std::mutex> serial(serialMutex);
    loaded = contains(sha);
    if (!loaded || *loaded)
      return loaded.takeError();
    if (llvm::Error error = load())
      return error;
    std::unique_lock<std::shared_mutex> lock(mutex);
    if (closed) {
      undo();
      return closedError();
    }
    objects.insert(sha.str());
    return llvm::Error::success();
  }

  /// Forgets `sha`, then runs `unload`; false (and nothing runs) if it is not loaded.
  /// Forgotten first: a launch of it meanwhile loads it again rather than finding it gone.
  bool detach(llvm::StringRef sha, llvm::function_ref<void()> unload) {
    std::lock_guard<std::mutex> serial(serialMutex);
    {
      std::unique_lock<std::shared_mutex> lock(mutex);
      auto it = objects.find(sha);
      if (it == objects.end())
        return false;
      objects.erase(it);
    }
    unload();
    return true;
  }

  /// Closes the session: nothing more loads. What it had loaded, now forgotten.
  std::vector<std::string> close() {
    std::unique_lock<std::shared_mutex> lock(mutex);
    closed = true;
    std::vector<std::string> held(objects.begin(), objects.end());
    objects.clear();
    return held;
  }

  /// Runs `start` unless the session is closed (`unknown_session`), which it keeps from
  /// closing meanwhile.
  template <typename Start> auto whileOpen(Start start) -> decltype(start()) {
    std::shared_lock<std::shared_mutex> lock(mutex);
    if (closed)
      return closedError();
    return start();
  }

  bool open() const {
    std::shared_lock<std::shared_mutex> lock(mutex);
    return !closed;
  }

  /// What is loaded, sorted.
  std::vector<std::string> list() const {
    std::shared_lock<std::shared_mutex> lock(mutex);
    return {objects.begin(), objects.end()};
  }

private:
  /// Whether `sha` is loaded; `unknown_session` once closed.
  llvm::Expected<bool> contains(llvm::StringRef sha) const {
    std::shared_lock<std::shared_mutex> lock(mutex);
    if (closed)
      return closedError();
    return objects.find(sha) != objects.end();
  }

  llvm::Error closedError() const {
    return transport::makeCodedError(transport::ErrorCode::UnknownSession,
                                     "session '" + session + "' was closed");
  }

  const std::string session;
  /// Taken by loads and unloads, before `mutex`.
  std::mutex serialMutex;
  mutable std::shared_mutex mutex;
  std::set<std::string, std::less<>> objects; ///< Under `mutex`.
  bool closed = false;                        ///< Under `mutex`.
};

} // namespace courier::executor

#endif // COURIER_EXECUTOR_SESSIONOBJECTS_H
