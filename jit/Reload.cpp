// Hot reload: modules replaced while they serve calls, and the inotify watcher that
// triggers replacements when files change.
#include "jit/Engine.h"
#include "jit/Internal.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <poll.h>
#include <sys/inotify.h>
#include <thread>
#include <unistd.h>

namespace courier {

struct ReloadableModule::Impl {
  Impl(Engine &engine, std::string name) : engine(engine), name(std::move(name)) {}
  Engine &engine;
  std::string name;
  /// Serialises reloads: two concurrent replacements must not race on `version`.
  std::mutex reloadMutex;
  mutable std::mutex currentMutex;
  std::shared_ptr<Module> current;
  uint64_t version = 0;
};

ReloadableModule::ReloadableModule(Engine &engine, std::string name)
    : impl(std::make_unique<Impl>(engine, std::move(name))) {}

ReloadableModule::~ReloadableModule() = default;

llvm::Expected<uint64_t> ReloadableModule::reloadFile(llvm::StringRef path) {
  llvm::Expected<std::unique_ptr<llvm::MemoryBuffer>> file = readSourceFile(path);
  if (!file)
    return file.takeError();
  return reload((*file)->getBuffer(), path);
}

llvm::Expected<uint64_t> ReloadableModule::reload(llvm::StringRef text,
                                                  llvm::StringRef sourceName) {
  std::lock_guard<std::mutex> reloading(impl->reloadMutex);
  // The new version is compiled, linked and set up while the old one keeps serving.
  CompileOptions compileOptions;
  compileOptions.sourceName = sourceName.str();
  llvm::Expected<std::shared_ptr<Module>> next =
      impl->engine.compile(text, impl->name, compileOptions);
  if (!next)
    return next.takeError();
  std::shared_ptr<Module> previous;
  uint64_t version;
  {
    std::lock_guard<std::mutex> lock(impl->currentMutex);
    previous = std::move(impl->current);
    impl->current = std::move(*next);
    version = ++impl->version;
  }
  // `previous` is unloaded here unless calls still hold it; the last one unloads it.
  return version;
}

std::shared_ptr<Module> ReloadableModule::current() const {
  std::lock_guard<std::mutex> lock(impl->currentMutex);
  return impl->current;
}

uint64_t ReloadableModule::version() const {
  std::lock_guard<std::mutex> lock(impl->currentMutex);
  return impl->version;
}

const std::string &ReloadableModule::name() const { return impl->name; }

llvm::Expected<std::vector<Tensor>> ReloadableModule::invoke(llvm::StringRef entry,
                                                             llvm::ArrayRef<Tensor> inputs,
                                                             const InvokeOptions &options) const {
  std::shared_ptr<Module> pinned = current();
  if (!pinned)
    return llvm::createStringError("module '%s' has no version loaded", impl->name.c_str());
  return pinned->invoke(entry, inputs, options);
}

llvm::Expected<std::vector<Tensor>> ReloadableModule::invoke(llvm::StringRef entry,
                                                             llvm::ArrayRef<TensorRef> inputs,
                                                             const InvokeOptions &options) const {
  std::shared_ptr<Module> pinned = current();
  if (!pinned)
    return llvm::createStringError("module '%s' has no version loaded", impl->name.c_str());
  return pinned->invoke(entry, inputs, options);
}

//===- FileWatcher --------------------------------------------------------------------===//

struct FileWatcher::Impl {
  int inotify = -1;
  int stopPipe[2] = {-1, -1};
  std::string directory;
  std::string file; ///< Empty when watching every matching file of the directory.
  std::string extension;
  Callback onChange;
  std::chrono::milliseconds debounce;
  std::thread thread;

  ~Impl() {
    if (thread.joinable()) {
      char byte = 0;
      (void)!::write(stopPipe[1], &byte, 1);
      thread.join();
    }
    for (int fd : {inotify, stopPipe[0], stopPipe[1]})
      if (fd >= 0)
        ::close(fd);
  }

  bool matches(llvm::StringRef name) const {
    if (!file.empty())
      return name == file;
    return extension.empty() || llvm::sys::path::extension(name) == extension;
  }

  void run() {
    using Clock = std::chrono::steady_clock;
    // Changed file -> when it is reported unless another event for it comes first: `settle`
    // after a completed write (closed after writing, or renamed into place), `debounce` after
    // a file was only created, whose writer has yet to close it.
    std::map<std::string, Clock::time_point> pending;
    std::chrono::milliseconds settle = std::min(debounce, kSettle);
    alignas(inotify_event) char buffer[16 * 1024];
    while (true) {
      int timeout = -1;
      if (!pending.empty()) {
        auto first = std::min_element(pending.begin(), pending.end(), [](auto &a, auto &b) {
                       return a.second < b.second;
                     })->second;
        // Rounded up: a wake a fraction of a millisecond early would find nothing due.
        auto wait = std::chrono::ceil<std::chrono::milliseconds>(first - Clock::now());
        timeout = static_cast<int>(std::clamp<int64_t>(wait.count(), 0, 1 << 30));
      }
      pollfd fds[2] = {{inotify, POLLIN, 0}, {stopPipe[0], POLLIN, 0}};
      int ready = ::poll(fds, 2, timeout);
      if (ready < 0 && errno != EINTR)
        return;
      if (fds[1].revents)
        return;
      if (ready > 0 && (fds[0].revents & POLLIN)) {
        ssize_t n = ::read(inotify, buffer, sizeof(buffer));
        for (ssize_t offset = 0; n > 0 && offset < n;) {
          auto *event = reinterpret_cast<inotify_event *>(buffer + offset);
          offset += sizeof(inotify_event) + event->len;
          if (event->len == 0 || !matches(event->name))
            continue;
          llvm::SmallString<256> path(directory);
          llvm::sys::path::append(path, event->name);
          bool written = event->mask & (IN_CLOSE_WRITE | IN_MOVED_TO);
          pending[std::string(path)] = Clock::now() + (written ? settle : debounce);
        }
      }
      auto now = Clock::now();
      for (auto it = pending.begin(); it != pending.end();) {
        if (now < it->second) {
          ++it;
          continue;
        }
        std::string path = it->first;
        it = pending.erase(it);
        onChange(path);
      }
    }
  }
};

FileWatcher::FileWatcher(std::unique_ptr<Impl> impl) : impl(std::move(impl)) {}
FileWatcher::~FileWatcher() = default;

llvm::Expected<std::unique_ptr<FileWatcher>>
FileWatcher::create(const std::string &path, llvm::StringRef extension, Callback onChange,
                    std::chrono::milliseconds debounce) {
  auto impl = std::make_unique<Impl>();
  impl->extension = extension.str();
  impl->onChange = std::move(onChange);
  impl->debounce = debounce;
  if (llvm::sys::fs::is_directory(path)) {
    impl->directory = path;
  } else if (llvm::sys::fs::exists(path)) {
    impl->directory = llvm::sys::path::parent_path(path).str();
    if (impl->directory.empty())
      impl->directory = ".";
    impl->file = llvm::sys::path::filename(path).str();
  } else {
    return llvm::createStringError("cannot watch '%s': no such file or directory", path.c_str());
  }
  impl->inotify = ::inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
  if (impl->inotify < 0 || ::pipe(impl->stopPipe) != 0)
    return llvm::createStringError("cannot watch '%s': %s", path.c_str(), std::strerror(errno));
  // Writes end in IN_CLOSE_WRITE; editors that save by rename produce IN_MOVED_TO.
  if (::inotify_add_watch(impl->inotify, impl->directory.c_str(),
                          IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE) < 0)
    return llvm::createStringError("cannot watch '%s': %s", impl->directory.c_str(),
                                   std::strerror(errno));
  Impl *raw = impl.get();
  impl->thread = std::thread([raw] { raw->run(); });
  return std::unique_ptr<FileWatcher>(new FileWatcher(std::move(impl)));
}

} // namespace courier
