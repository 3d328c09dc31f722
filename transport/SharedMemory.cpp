// Shared memory, descriptor passing, field encoding and futex doorbells between processes on
// one host.
#include "transport/SharedMemory.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <fcntl.h>
#include <linux/futex.h>
#include <linux/sockios.h>
#include <poll.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace courier::transport {

namespace {
llvm::Error systemError(const llvm::Twine &what) {
  return llvm::createStringError(std::error_code(errno, std::generic_category()),
                                 what + ": " + std::strerror(errno));
}
} // namespace

UniqueFd &UniqueFd::operator=(UniqueFd &&other) noexcept {
  if (this != &other)
    reset(other.release());
  return *this;
}

void UniqueFd::reset(int next) {
  if (fd >= 0)
    ::close(fd);
  fd = next;
}

SharedBuffer::SharedBuffer(SharedBuffer &&other) noexcept { *this = std::move(other); }

SharedBuffer &SharedBuffer::operator=(SharedBuffer &&other) noexcept {
  if (this == &other)
    return *this;
  if (base)
    ::munmap(base, mapped);
  file = std::move(other.file);
  base = std::exchange(other.base, nullptr);
  length = std::exchange(other.length, 0);
  mapped = std::exchange(other.mapped, 0);
  return *this;
}

SharedBuffer::~SharedBuffer() {
  if (base)
    ::munmap(base, mapped);
}

llvm::Expected<SharedBuffer> SharedBuffer::create(uint64_t size, const char *name) {
  UniqueFd fd(::memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd)
    return systemError("creating shared memory");
  if (::ftruncate(fd.get(), static_cast<off_t>(size)) != 0)
    return systemError(llvm::formatv("sizing shared memory to {0} bytes", size));
  return map(std::move(fd), size);
}

llvm::Expected<SharedBuffer> SharedBuffer::mapAll(UniqueFd fd, bool requireSealed) {
  struct stat info;
  if (::fstat(fd.get(), &info) != 0)
    return systemError("inspecting shared memory");
  return map(std::move(fd), static_cast<uint64_t>(info.st_size), requireSealed);
}

llvm::Error SharedBuffer::sealSize() {
  if (::fcntl(file.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
    return systemError("sealing shared memory");
  return llvm::Error::success();
}

llvm::Expected<SharedBuffer> SharedBuffer::map(UniqueFd fd, uint64_t size, bool requireSealed) {
  if (requireSealed) {
    int seals = ::fcntl(fd.get(), F_GET_SEALS);
    if (seals < 0 || !(seals & F_SEAL_SHRINK))
      return llvm::createStringError("shared memory that is not sealed against shrinking");
  }
  struct stat info;
  if (::fstat(fd.get(), &info) != 0)
    return systemError("inspecting shared memory");
  if (!S_ISREG(info.st_mode) || static_cast<uint64_t>(info.st_size) < size)
    return llvm::createStringError(
        llvm::formatv("shared memory holds {0} bytes, {1} expected", uint64_t(info.st_size), size)
            .str());
  SharedBuffer buffer;
  buffer.mapped = std::max<uint64_t>(size, 1);
  void *base = ::mmap(nullptr, buffer.mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (base == MAP_FAILED)
    return systemError(llvm::formatv("mapping {0} bytes of shared memory", size));
  buffer.base = static_cast<char *>(base);
  buffer.length = size;
  buffer.file = std::move(fd);
  return std::move(buffer);
}

ByteWriter &ByteWriter::u64(uint64_t value) {
  char raw[8];
  for (int i = 0; i < 8; ++i)
    raw[i] = static_cast<char>(value >> (8 * i));
  bytes.append(raw, 8);
  return *this;
}

ByteWriter &ByteWriter::str(llvm::StringRef text) {
  u64(text.size());
  bytes.append(text.data(), text.size());
  return *this;
}

uint8_t ByteReader::u8() {
  if (!good || pos >= bytes.size()) {
    good = false;
    return 0;
  }
  return static_cast<uint8_t>(bytes[pos++]);
}

uint64_t ByteReader::u64() {
  if (!good || bytes.size() - pos < 8) {
    good = false;
    return 0;
  }
  uint64_t value = 0;
  for (int i = 0; i < 8; ++i)
    value |= uint64_t(static_cast<unsigned char>(bytes[pos + i])) << (8 * i);
  pos += 8;
  return value;
}

uint64_t ByteReader::count(uint64_t minItemBytes) {
  uint64_t n = u64();
  if (good && minItemBytes && n > (bytes.size() - pos) / minItemBytes)
    good = false;
  return good ? n : 0;
}

llvm::StringRef ByteReader::str() {
  uint64_t size = u64();
  if (!good || size > bytes.size() - pos) {
    good = false;
    return {};
  }
  llvm::StringRef text = bytes.substr(pos, size);
  pos += size;
  return text;
}

llvm::StringRef ByteReader::rest() {
  if (!good)
    return {};
  llvm::StringRef text = bytes.substr(pos);
  pos = bytes.size();
  return text;
}

llvm::Expected<uint64_t> unreceivedBytes(int socket) {
  int pending = 0;
  if (::ioctl(socket, SIOCOUTQ, &pending) != 0)
    return llvm::createStringError(llvm::Twine("SIOCOUTQ: ") + std::strerror(errno));
  return static_cast<uint64_t>(std::max(pending, 0));
}

llvm::Error sendMessage(int socket, llvm::StringRef bytes, llvm::ArrayRef<int> fds) {
  if (fds.size() > kMaxMessageFds)
    return llvm::createStringError("too many descriptors for one message");
  struct iovec iov {
    const_cast<char *>(bytes.data()), bytes.size()
  };
  struct msghdr msg {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxMessageFds)];
  if (!fds.empty()) {
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    struct cmsghdr *header = CMSG_FIRSTHDR(&msg);
    header->cmsg_level = SOL_SOCKET;
    header->cmsg_type = SCM_RIGHTS;
    header->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(header), fds.data(), sizeof(int) * fds.size());
  }
  while (true) {
    ssize_t sent = ::sendmsg(socket, &msg, MSG_NOSIGNAL);
    if (sent == static_cast<ssize_t>(bytes.size()))
      return llvm::Error::success();
    if (sent < 0 && errno == EINTR)
      continue;
    if (sent < 0)
      return systemError("sending on a local channel");
    return llvm::createStringError("short send on a local channel");
  }
}

int pollUntil(int fd, short events, std::chrono::steady_clock::time_point until) {
  struct pollfd ready {
    fd, events, 0
  };
  while (true) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - std::chrono::steady_clock::now());
    // Round up, so a deadline a fraction of a millisecond away is still waited for.
    int polled =
        ::poll(&ready, 1, static_cast<int>(std::clamp<int64_t>(left.count() + 1, 0, INT_MAX)));
    if (polled >= 0 || errno != EINTR)
      return polled;
  }
}

llvm::Expected<ReceiveStatus>
receiveMessage(int socket, Message &out, size_t maxBytes,
               std::optional<std::chrono::steady_clock::time_point> deadline,
               std::chrono::microseconds spin) {
  out.bytes.clear();
  out.fds.clear();
  if (spin.count() > 0) {
    auto until = std::chrono::steady_clock::now() + spin;
    if (deadline)
      until = std::min(until, *deadline);
    struct pollfd ready {
      socket, POLLIN, 0
    };
    // Yielding rather than pausing: on a busy machine the peer may need this very core.
    while (::poll(&ready, 1, 0) == 0 && std::chrono::steady_clock::now() < until)
      ::sched_yield();
  }
  // Without a deadline a blocking receive does what a poll and then a receive would, with
  // one system call fewer.
  if (deadline) {
    int polled = pollUntil(socket, POLLIN, *deadline);
    if (polled < 0)
      return systemError("waiting on a local channel");
    if (polled == 0)
      return ReceiveStatus::TimedOut;
  }
  // One receive buffer per thread: sizing a fresh string for the largest message would
  // clear 100 KiB on every small reply.
  thread_local std::vector<char> buffer;
  if (buffer.size() < maxBytes)
    buffer.resize(maxBytes);
  struct iovec iov {
    buffer.data(), maxBytes
  };
  struct msghdr msg {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxMessageFds)];
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t got;
  do {
    got = ::recvmsg(socket, &msg, MSG_CMSG_CLOEXEC);
  } while (got < 0 && errno == EINTR);
  if (got < 0) {
    if (errno == ECONNRESET)
      return ReceiveStatus::Closed;
    return systemError("receiving from a local channel");
  }
  for (struct cmsghdr *header = CMSG_FIRSTHDR(&msg); header; header = CMSG_NXTHDR(&msg, header))
    if (header->cmsg_level == SOL_SOCKET && header->cmsg_type == SCM_RIGHTS) {
      size_t n = (header->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < n; ++i) {
        int fd;
        std::memcpy(&fd, CMSG_DATA(header) + i * sizeof(int), sizeof(int));
        out.fds.emplace_back(fd);
      }
    }
  if (got == 0 && out.fds.empty())
    return ReceiveStatus::Closed;
  // The control buffer is padded to alignment, so one descriptor past the bound can fit it.
  if ((msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) || out.fds.size() > kMaxMessageFds)
    return llvm::createStringError("oversized message on a local channel");
  out.bytes.assign(buffer.data(), static_cast<size_t>(got));
  return ReceiveStatus::Message;
}

llvm::Expected<AlignedBytes> copyAligned(llvm::StringRef bytes) {
  if (bytes.empty())
    return AlignedBytes();
  AlignedBytes copy(
      static_cast<char *>(std::aligned_alloc(kPayloadAlignment, alignPayload(bytes.size()))));
  if (!copy)
    return llvm::createStringError("out of memory for " + llvm::Twine(bytes.size()) +
                                   " bytes of inputs");
  std::memcpy(copy.get(), bytes.data(), bytes.size());
  return std::move(copy);
}

namespace doorbell {

void ring(std::atomic<uint32_t> &word) {
  // Shared (not FUTEX_PRIVATE_FLAG): the waiter is another process mapping the same page.
  ::syscall(SYS_futex, reinterpret_cast<uint32_t *>(&word), FUTEX_WAKE, INT_MAX, nullptr, nullptr,
            0);
}

void sleep(std::atomic<uint32_t> &word, uint32_t seen, std::chrono::nanoseconds timeout) {
  if (timeout.count() <= 0)
    return;
  struct timespec relative {
    static_cast<time_t>(timeout.count() / 1000000000),
        static_cast<long>(timeout.count() % 1000000000)
  };
  ::syscall(SYS_futex, reinterpret_cast<uint32_t *>(&word), FUTEX_WAIT, seen, &relative, nullptr,
            0);
}

void set(std::atomic<uint32_t> &word, uint32_t value, const std::atomic<uint32_t> &sleeping) {
  // Sequentially consistent with the waiter's two steps below: either it sees the new value
  // before it sleeps, or this sees its flag and wakes it.
  word.store(value, std::memory_order_seq_cst);
  if (sleeping.load(std::memory_order_seq_cst) != 0)
    ring(word);
}

void sleep(std::atomic<uint32_t> &word, uint32_t seen, std::chrono::nanoseconds timeout,
           std::atomic<uint32_t> &sleeping) {
  sleeping.store(1, std::memory_order_seq_cst);
  if (word.load(std::memory_order_seq_cst) == seen)
    sleep(word, seen, timeout);
  sleeping.store(0, std::memory_order_relaxed);
}

namespace {
inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}
} // namespace

int spinEither(const std::atomic<uint32_t> &first, uint32_t firstSeen,
               const std::atomic<uint32_t> &second, uint32_t secondSeen,
               std::chrono::nanoseconds spin, std::chrono::nanoseconds pauseFirst) {
  auto changed = [&] {
    if (first.load(std::memory_order_acquire) != firstSeen)
      return 1;
    return second.load(std::memory_order_acquire) != secondSeen ? 2 : 0;
  };
  if (int which = changed())
    return which;
  auto start = std::chrono::steady_clock::now();
  auto pauseUntil = start + std::min(pauseFirst, spin);
  auto until = start + spin;
  bool pausing = pauseFirst.count() > 0;
  for (unsigned i = 0;; ++i) {
    if (int which = changed())
      return which;
    // Pausing, the clock is read every 16 polls; yielding, after every yield, which on a
    // machine with more runnable threads than cores hands the core away for as long as the
    // others take: the spin then ends after one yield rather than switching sixteen times.
    if (!pausing || (i & 15) == 15) {
      auto now = std::chrono::steady_clock::now();
      if (now >= until)
        return 0;
      pausing = now < pauseUntil;
    }
    // After the pause phase, yielding: on a busy machine the peer may need this very core.
    if (pausing)
      cpuRelax();
    else
      ::sched_yield();
  }
}

bool spin(const std::atomic<uint32_t> &word, uint32_t seen, std::chrono::nanoseconds spin,
          std::chrono::nanoseconds pauseFirst) {
  return spinEither(word, seen, word, seen, spin, pauseFirst) != 0;
}

void sleepEither(std::atomic<uint32_t> &first, uint32_t firstSeen, std::atomic<uint32_t> &firstFlag,
                 std::atomic<uint32_t> &second, uint32_t secondSeen,
                 std::atomic<uint32_t> &secondFlag, std::chrono::nanoseconds timeout) {
  if (timeout.count() <= 0)
    return;
  firstFlag.store(1, std::memory_order_seq_cst);
  secondFlag.store(1, std::memory_order_seq_cst);
  if (first.load(std::memory_order_seq_cst) == firstSeen &&
      second.load(std::memory_order_seq_cst) == secondSeen) {
#ifdef SYS_futex_waitv
    // Where the kernel (or a container's filter) refuses futex_waitv, it is not tried again.
    static std::atomic<bool> waitvRefused{false};
    long rc = -1;
    errno = ENOSYS;
    if (!waitvRefused.load(std::memory_order_relaxed)) {
      struct futex_waitv waiters[2] = {};
      waiters[0].val = firstSeen;
      waiters[0].uaddr = reinterpret_cast<uintptr_t>(&first);
      waiters[0].flags = FUTEX_32;
      waiters[1].val = secondSeen;
      waiters[1].uaddr = reinterpret_cast<uintptr_t>(&second);
      waiters[1].flags = FUTEX_32;
      struct timespec until {};
      ::clock_gettime(CLOCK_MONOTONIC, &until);
      int64_t nanos = static_cast<int64_t>(until.tv_nsec) + timeout.count() % 1000000000;
      until.tv_sec += static_cast<time_t>(timeout.count() / 1000000000 + nanos / 1000000000);
      until.tv_nsec = static_cast<long>(nanos % 1000000000);
      rc = ::syscall(SYS_futex_waitv, waiters, 2, 0, &until, CLOCK_MONOTONIC);
    }
    if (rc < 0 && (errno == ENOSYS || errno == EPERM || errno == EINVAL))
      waitvRefused.store(true, std::memory_order_relaxed);
    if (rc < 0 && waitvRefused.load(std::memory_order_relaxed))
#endif
      // Without it: the first word only, waking every millisecond to look at the second.
      sleep(first, firstSeen,
            std::min<std::chrono::nanoseconds>(timeout, std::chrono::milliseconds(1)));
  }
  firstFlag.store(0, std::memory_order_relaxed);
  secondFlag.store(0, std::memory_order_relaxed);
}

} // namespace doorbell

} // namespace courier::transport
