// Worker control groups under cgroup2 (a delegated subtree with memory and pids enabled) or
// cgroup1 (the memory and pids hierarchies), found from /proc/self/cgroup.
#include "executor/WorkerCgroup.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/FormatVariadic.h"

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <optional>
#include <sstream>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

namespace courier::executor {

namespace {

/// Where groups are made: the directories of this process's own groups, one per hierarchy
/// the group needs, each with the files that bound it.
struct Hierarchies {
  const char *kind = "none";
  bool unified = false;
  std::string memory, pids; ///< The same directory under cgroup2.
};

std::string readFile(const std::string &path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

bool writeFile(const std::string &path, const std::string &value) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0)
    return false;
  bool written = ::write(fd, value.data(), value.size()) == static_cast<ssize_t>(value.size());
  ::close(fd);
  return written;
}

bool hasWord(llvm::StringRef text, llvm::StringRef word) {
  llvm::SmallVector<llvm::StringRef, 8> words;
  text.split(words, ' ', -1, false);
  for (llvm::StringRef each : words)
    if (each.trim() == word)
      return true;
  return false;
}

/// A number a control file holds ("max" reads as none).
std::optional<uint64_t> readNumber(const std::string &path) {
  uint64_t value = 0;
  if (llvm::StringRef(readFile(path)).trim().getAsInteger(10, value))
    return std::nullopt;
  return value;
}

/// The value of `key` in a control file of "key value" lines (memory.events, oom_control).
uint64_t readKey(const std::string &path, llvm::StringRef key) {
  llvm::SmallVector<llvm::StringRef, 16> lines;
  std::string text = readFile(path);
  llvm::StringRef(text).split(lines, '\n', -1, false);
  for (llvm::StringRef line : lines) {
    auto [name, value] = line.split(' ');
    uint64_t number = 0;
    if (name == key && !value.trim().getAsInteger(10, number))
      return number;
  }
  return 0;
}

bool writableDirectory(const std::string &path) {
  struct stat info;
  return ::stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode) &&
         ::access(path.c_str(), W_OK) == 0;
}

Hierarchies find() {
  Hierarchies found;
  std::string self = readFile("/proc/self/cgroup");
  llvm::SmallVector<llvm::StringRef, 16> lines;
  llvm::StringRef(self).split(lines, '\n', -1, false);
  std::string unifiedPath, memoryPath, pidsPath;
  bool haveMemory = false, havePids = false;
  for (llvm::StringRef line : lines) {
    auto [id, rest] = line.split(':');
    auto [controllers, path] = rest.split(':');
    if (id == "0" && controllers.empty())
      unifiedPath = path.str();
    llvm::SmallVector<llvm::StringRef, 4> names;
    controllers.split(names, ',');
    for (llvm::StringRef name : names) {
      if (name == "memory") {
        haveMemory = true;
        memoryPath = path.str();
      } else if (name == "pids") {
        havePids = true;
        pidsPath = path.str();
      }
    }
  }
  // cgroup2 mounted on its own: usable where this process's group hands memory and pids down
  // (the root group, or a subtree delegated to a service).
  if (!unifiedPath.empty() && ::access("/sys/fs/cgroup/cgroup.controllers", R_OK) == 0) {
    std::string base = "/sys/fs/cgroup" + (unifiedPath == "/" ? std::string() : unifiedPath);
    std::string handed = readFile(base + "/cgroup.subtree_control");
    if (hasWord(handed, "memory") && hasWord(handed, "pids") && writableDirectory(base)) {
      found.kind = "cgroup2";
      found.unified = true;
      found.memory = found.pids = base;
    }
    return found;
  }
  if (!haveMemory || !havePids)
    return found;
  auto under = [](const char *mount, const std::string &path) {
    return std::string(mount) + (path == "/" ? std::string() : path);
  };
  std::string memory = under("/sys/fs/cgroup/memory", memoryPath);
  std::string pids = under("/sys/fs/cgroup/pids", pidsPath);
  if (::access((memory + "/memory.limit_in_bytes").c_str(), R_OK) == 0 &&
      ::access((pids + "/cgroup.procs").c_str(), R_OK) == 0 && writableDirectory(memory) &&
      writableDirectory(pids)) {
    found.kind = "cgroup1";
    found.memory = memory;
    found.pids = pids;
  }
  return found;
}

const Hierarchies &hierarchies() {
  static const Hierarchies found = find();
  return found;
}

/// rmdir of a group whose last task was just reaped can race the kernel's release of it.
void removeDirectory(const std::string &path) {
  for (int attempt = 0; attempt < 50; ++attempt) {
    if (::rmdir(path.c_str()) == 0 || errno == ENOENT)
      return;
    if (errno != EBUSY)
      return;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

} // namespace

const char *WorkerCgroup::kind() { return hierarchies().kind; }

std::unique_ptr<WorkerCgroup> WorkerCgroup::adopt(pid_t pid) {
  const Hierarchies &where = hierarchies();
  if (llvm::StringRef(where.kind) == "none")
    return nullptr;
  std::string name = "/courier-worker-" + std::to_string(pid);
  std::vector<std::string> made;
  std::vector<std::string> bases = {where.memory};
  if (!where.unified)
    bases.push_back(where.pids);
  for (const std::string &base : bases) {
    std::string directory = base + name;
    // A group left by a server that died, whose worker's pid came round again, is empty.
    if (::mkdir(directory.c_str(), 0755) != 0 && errno == EEXIST) {
      removeDirectory(directory);
      ::mkdir(directory.c_str(), 0755);
    }
    if (!writeFile(directory + "/cgroup.procs", std::to_string(pid))) {
      for (const std::string &each : made)
        removeDirectory(each);
      removeDirectory(directory);
      return nullptr;
    }
    made.push_back(directory);
  }
  return std::unique_ptr<WorkerCgroup>(new WorkerCgroup(std::move(made)));
}

WorkerCgroup::~WorkerCgroup() {
  for (const std::string &directory : directories)
    removeDirectory(directory);
}

llvm::Error WorkerCgroup::limit(uint64_t extraBytes, uint64_t extraTasks) {
  bool unified = directories.size() == 1;
  const std::string &memory = directories.front();
  const std::string &pids = directories.back();
  auto set = [](const std::string &file, uint64_t value) -> llvm::Error {
    if (writeFile(file, std::to_string(value)))
      return llvm::Error::success();
    return llvm::createStringError(
        llvm::formatv("setting {0} to {1}: {2}", file, value, std::strerror(errno)).str());
  };
  if (extraBytes) {
    std::string usage = memory + (unified ? "/memory.current" : "/memory.usage_in_bytes");
    std::optional<uint64_t> used = readNumber(usage);
    if (!used)
      return llvm::createStringError("reading " + usage);
    if (llvm::Error error =
            set(memory + (unified ? "/memory.max" : "/memory.limit_in_bytes"), *used + extraBytes))
      return error;
  }
  std::optional<uint64_t> tasks = readNumber(pids + "/pids.current");
  if (!tasks)
    return llvm::createStringError("reading " + pids + "/pids.current");
  return set(pids + "/pids.max", *tasks + extraTasks);
}

bool WorkerCgroup::killedForMemory() const {
  const std::string &memory = directories.front();
  if (directories.size() == 1)
    return readKey(memory + "/memory.events", "oom_kill") > 0;
  return readKey(memory + "/memory.oom_control", "oom_kill") > 0;
}

} // namespace courier::executor
