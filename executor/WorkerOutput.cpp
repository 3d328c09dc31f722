// One thread reads every worker's output pipe (poll over all of them and a wake-up pipe for
// new ones) and hands whole lines to the sink.
#include "executor/WorkerOutput.h"

#include "transport/Log.h"

#include <cerrno>
#include <fcntl.h>
#include <mutex>
#include <poll.h>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

namespace courier::executor {

namespace {

class OutputRelay {
public:
  explicit OutputRelay(WorkerOutputSink sink) : sink(std::move(sink)) {
    int ends[2];
    if (::pipe2(ends, O_CLOEXEC | O_NONBLOCK) == 0) {
      wakeRead = ends[0];
      wakeWrite = ends[1];
    }
    // The relay lives as long as the process: it is never destroyed (see relay()), and its
    // thread may still be reading a worker's last words when main() returns.
    std::thread([this] { run(); }).detach();
  }

  void add(pid_t worker, int fd) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      arriving.push_back(Pipe{worker, fd, {}});
    }
    char byte = 1;
    if (wakeWrite >= 0)
      (void)!::write(wakeWrite, &byte, 1);
  }

private:
  struct Pipe {
    pid_t worker;
    int fd;
    std::string partial;
    /// The last piece handed over was cut at the line limit: a newline that comes next
    /// ends that line, and is no empty line of its own.
    bool cut = false;
  };

  void run() {
    std::vector<Pipe> pipes;
    std::vector<pollfd> polled;
    std::vector<char> buffer(64 * 1024);
    while (true) {
      {
        std::lock_guard<std::mutex> lock(mutex);
        for (Pipe &pipe : arriving)
          pipes.push_back(std::move(pipe));
        arriving.clear();
      }
      polled.assign(1, pollfd{wakeRead, POLLIN, 0});
      for (const Pipe &pipe : pipes)
        polled.push_back(pollfd{pipe.fd, POLLIN, 0});
      if (::poll(polled.data(), polled.size(), -1) < 0) {
        if (errno == EINTR)
          continue;
        return;
      }
      if (polled[0].revents & POLLIN)
        while (::read(wakeRead, buffer.data(), buffer.size()) > 0) {
        }
      for (size_t i = pipes.size(); i-- > 0;) {
        if (!polled[i + 1].revents)
          continue;
        Pipe &pipe = pipes[i];
        ssize_t got = ::read(pipe.fd, buffer.data(), buffer.size());
        if (got > 0) {
          take(pipe, llvm::StringRef(buffer.data(), static_cast<size_t>(got)));
          continue;
        }
        if (got < 0 && (errno == EINTR || errno == EAGAIN))
          continue;
        // Closed: the worker is gone. Its last line may lack a newline.
        if (!pipe.partial.empty())
          sink(pipe.worker, pipe.partial);
        ::close(pipe.fd);
        pipes.erase(pipes.begin() + static_cast<ptrdiff_t>(i));
      }
    }
  }

  /// Hands over each whole line of `bytes` (with what came before it), keeping the rest;
  /// what grows past the line limit goes in pieces.
  void take(Pipe &pipe, llvm::StringRef bytes) {
    while (!bytes.empty()) {
      if (pipe.cut && bytes.front() == '\n') {
        pipe.cut = false;
        bytes = bytes.drop_front();
        continue;
      }
      size_t room = kWorkerOutputLineMax - pipe.partial.size();
      size_t newline = bytes.find('\n');
      if (newline != llvm::StringRef::npos && newline <= room) {
        pipe.partial.append(bytes.data(), newline);
        bytes = bytes.drop_front(newline + 1);
        pipe.cut = false;
      } else if (bytes.size() >= room) {
        pipe.partial.append(bytes.data(), room);
        bytes = bytes.drop_front(room);
        pipe.cut = true;
      } else {
        pipe.partial.append(bytes.data(), bytes.size());
        pipe.cut = false;
        return;
      }
      llvm::StringRef line(pipe.partial);
      if (line.ends_with("\r"))
        line = line.drop_back();
      sink(pipe.worker, line);
      pipe.partial.clear();
    }
  }

  WorkerOutputSink sink;
  int wakeRead = -1, wakeWrite = -1;
  std::mutex mutex;
  std::vector<Pipe> arriving;
};

WorkerOutputSink &pendingSink() {
  static WorkerOutputSink sink;
  return sink;
}

OutputRelay *&relay() {
  static OutputRelay *theRelay = nullptr;
  return theRelay;
}

std::once_flag relayStarted;

} // namespace

void setWorkerOutputSink(WorkerOutputSink sink) { pendingSink() = std::move(sink); }

void logWorkerOutput() {
  setWorkerOutputSink([](pid_t worker, llvm::StringRef line) {
    // The line is the kernel's to choose. In text it is always quoted, so that it cannot
    // pass for a line or a message of the server's (those never begin with a quote); JSON
    // keeps it as the message, a string.
    if (transport::logFormat() == transport::LogFormat::Text)
      transport::logEvent(transport::LogLevel::Info,
                          transport::textLogValue(line, transport::LogQuoting::Always),
                          {{"worker", int64_t(worker)}});
    else
      transport::logEvent(transport::LogLevel::Info, line, {{"worker", int64_t(worker)}});
  });
}

bool workerOutputRelayed() { return static_cast<bool>(pendingSink()); }

void relayWorkerOutput(pid_t worker, int fd) {
  std::call_once(relayStarted, [] { relay() = new OutputRelay(pendingSink()); });
  relay()->add(worker, fd);
}

} // namespace courier::executor
