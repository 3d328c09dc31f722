// Starts a server with --listen 127.0.0.1:PORT (or its own --listen), reads the bound address
// it prints, and polls /v1/health until it answers; never sleeps in place of a readiness check.
#include "tests/support/ServerProcess.h"

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <dirent.h>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <poll.h>
#include <sstream>
#include <stdexcept>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace courier::testing {

namespace {

std::string readLine(int fd, std::chrono::milliseconds timeout, const std::string &name) {
  std::string line;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0)
      throw std::runtime_error(name + " printed no address in time");
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left.count())) <= 0)
      continue;
    char c;
    ssize_t n = read(fd, &c, 1);
    if (n <= 0)
      throw std::runtime_error(name + " exited before printing its address: " + line);
    if (c == '\n')
      return line;
    line.push_back(c);
  }
}

std::string makeTempDir(const std::string &name) {
  std::string pattern = "/tmp/" + name + "-test-XXXXXX";
  if (!mkdtemp(pattern.data()))
    throw std::runtime_error("cannot create a temporary directory");
  return pattern;
}

/// Forks and execs `args` with stdout to a pipe (returned) and stderr appended to `logPath`.
pid_t spawn(std::vector<std::string> args, const std::string &logPath, int &stdoutFd) {
  std::vector<char *> argv;
  for (std::string &arg : args)
    argv.push_back(arg.data());
  argv.push_back(nullptr);
  int out[2];
  if (pipe(out) != 0)
    throw std::runtime_error("pipe failed");
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid == 0) {
    // A test or benchmark that dies (an exit past its destructors, a crash) takes its
    // servers with it rather than leaving them running; the servers are started from the
    // thread that owns them, which lives as long as they do.
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)
      _exit(127);
    dup2(out[1], STDOUT_FILENO);
    int log = open(logPath.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    dup2(log, STDERR_FILENO);
    close(out[0]);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(out[1]);
  stdoutFd = out[0];
  return pid;
}

/// Waits for `pid` to exit until `deadline`, then SIGKILLs it; returns its wait status.
int reap(pid_t pid, std::chrono::steady_clock::time_point deadline) {
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return status;
}

std::string readFile(const std::string &path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

} // namespace

ServerProcess::ServerProcess(ServerSpec specIn) : spec(std::move(specIn)) {
  dir = makeTempDir(spec.name);
  try {
    std::vector<std::string> args = {spec.program};
    if (std::find(spec.args.begin(), spec.args.end(), "--listen") == spec.args.end()) {
      args.push_back("--listen");
      args.push_back("127.0.0.1:" + std::to_string(spec.port));
    }
    if (!spec.token.empty()) {
      std::ofstream(dir + "/token") << spec.token << "\n";
      args.push_back("--token-file");
      args.push_back(dir + "/token");
    }
    for (std::string arg : spec.args) {
      if (size_t at = arg.find("{dir}"); at != std::string::npos)
        arg.replace(at, 5, dir);
      args.push_back(std::move(arg));
    }
    int out = -1;
    pid = spawn(args, dir + "/" + spec.name + ".log", out);
    std::string line;
    try {
      line = readLine(out, std::chrono::seconds(20), spec.name);
    } catch (const std::exception &e) {
      close(out);
      throw std::runtime_error(std::string(e.what()) + "\n" + log());
    }
    close(out);
    const std::string prefix = "listening on ";
    if (line.compare(0, prefix.size(), prefix) != 0)
      throw std::runtime_error("unexpected first line from " + spec.name + ": " + line);
    addressText = line.substr(prefix.size());
    if (addressText.compare(0, 5, "unix:") == 0)
      socket = addressText.substr(5);
    else
      boundPort = std::stoi(addressText.substr(addressText.rfind(':') + 1));

    std::unique_ptr<httplib::Client> http = client();
    http->set_connection_timeout(std::chrono::seconds(1));
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (true) {
      httplib::Result res = http->Get("/v1/health");
      if (res && res->status == 200)
        break;
      if (std::chrono::steady_clock::now() > deadline)
        throw std::runtime_error(spec.name + " at " + addressText + " never became healthy");
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  } catch (...) {
    // A constructor that throws gets no destructor: end the process it started (with SIGTERM
    // first, so that a pool script stops its own servers) and remove the directory here.
    terminate(SIGTERM, std::chrono::seconds(15));
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
    throw;
  }
}

ServerProcess::~ServerProcess() {
  // A clean shutdown takes milliseconds; the patience is for a loaded machine.
  terminate(SIGTERM, std::chrono::seconds(15));
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
}

int ServerProcess::terminate(int signal, std::chrono::seconds patience) {
  if (pid <= 0)
    return -1;
  ::kill(pid, signal);
  int status = reap(pid, std::chrono::steady_clock::now() + patience);
  pid = -1;
  return status;
}

void ServerProcess::kill() {
  if (pid <= 0)
    return;
  ::kill(pid, SIGKILL);
  int status;
  waitpid(pid, &status, 0);
  pid = -1;
}

void ServerProcess::signal(int signal) {
  if (pid > 0)
    ::kill(pid, signal);
}

void ServerProcess::freeze() {
  signal(SIGSTOP);
  // Each thread's state is the third field of /proc/PID/task/TID/stat; 'T' is stopped.
  auto allStopped = [&] {
    std::string tasks = "/proc/" + std::to_string(pid) + "/task";
    DIR *dir = opendir(tasks.c_str());
    if (!dir)
      return false;
    bool stopped = true;
    while (dirent *entry = readdir(dir)) {
      if (entry->d_name[0] == '.')
        continue;
      std::string stat = readFile(tasks + "/" + entry->d_name + "/stat");
      size_t close = stat.rfind(')');
      if (close == std::string::npos || close + 2 >= stat.size() || stat[close + 2] != 'T')
        stopped = false;
    }
    closedir(dir);
    return stopped;
  };
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!allStopped() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

std::unique_ptr<httplib::Client> ServerProcess::client() const {
  std::unique_ptr<httplib::Client> http;
  if (addressText.compare(0, 8, "https://") == 0) {
    http = std::make_unique<httplib::Client>(addressText, spec.tlsClientCert, spec.tlsClientKey);
    // Without a CA, only reachability is checked (a test of a certificate clients refuse).
    if (spec.tlsCaFile.empty())
      http->enable_server_certificate_verification(false);
    else
      http->set_ca_cert_path(spec.tlsCaFile);
  } else {
    http = socket.empty() ? std::make_unique<httplib::Client>("127.0.0.1", boundPort)
                          : std::make_unique<httplib::Client>(socket, 80);
  }
  if (!socket.empty())
    http->set_address_family(AF_UNIX);
  http->set_tcp_nodelay(true);
  http->set_keep_alive(true);
  http->set_read_timeout(std::chrono::seconds(60));
  if (!spec.token.empty())
    http->set_bearer_token_auth(spec.token);
  return http;
}

std::string ServerProcess::metrics() const {
  httplib::Result res = client()->Get("/metrics");
  return res && res->status == 200 ? res->body : std::string();
}

double ServerProcess::metric(const std::string &name) const {
  std::istringstream lines(metrics());
  std::string line;
  while (std::getline(lines, line))
    if (line.compare(0, name.size() + 1, name + " ") == 0)
      return std::stod(line.substr(name.size() + 1));
  return -1;
}

double ServerProcess::awaitMetricAtMost(const std::string &name, double bound) const {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  double value = metric(name);
  while (value > bound && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    value = metric(name);
  }
  return value;
}

std::string procFile(pid_t pid, const std::string &name) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/" + name, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::vector<pid_t> childrenOf(pid_t pid) {
  std::vector<pid_t> children;
  std::string tasks = "/proc/" + std::to_string(pid) + "/task";
  if (DIR *dir = ::opendir(tasks.c_str())) {
    while (dirent *entry = ::readdir(dir)) {
      if (entry->d_name[0] == '.')
        continue;
      std::ifstream in(tasks + "/" + entry->d_name + "/children");
      pid_t child;
      while (in >> child)
        children.push_back(child);
    }
    ::closedir(dir);
  }
  return children;
}

double cpuSecondsOfTree(pid_t pid) {
  double ticks = 0;
  std::vector<pid_t> pending{pid};
  while (!pending.empty()) {
    pid_t next = pending.back();
    pending.pop_back();
    std::string stat = procFile(next, "stat");
    // The fields after the command name, which may hold spaces, start past its ')': state is
    // the third field, utime and stime the 14th and 15th.
    size_t close = stat.rfind(')');
    if (close == std::string::npos)
      continue;
    std::istringstream fields(stat.substr(close + 1));
    std::string field;
    for (int i = 3; i <= 15 && fields >> field; ++i)
      if (i >= 14)
        ticks += std::stod(field);
    for (pid_t child : childrenOf(next))
      pending.push_back(child);
  }
  return ticks / double(::sysconf(_SC_CLK_TCK));
}

std::vector<pid_t> liveChildrenOf(pid_t pid) {
  std::vector<pid_t> live;
  for (pid_t child : childrenOf(pid)) {
    std::string stat = procFile(child, "stat");
    size_t close = stat.rfind(')');
    if (close != std::string::npos && close + 2 < stat.size() && stat[close + 2] != 'Z')
      live.push_back(child);
  }
  return live;
}

std::string ServerProcess::log() const { return readFile(dir + "/" + spec.name + ".log"); }

std::vector<std::string> ServerProcess::logLines() const {
  std::vector<std::string> lines;
  std::istringstream in(log());
  for (std::string line; std::getline(in, line);)
    lines.push_back(line);
  return lines;
}

std::string
ServerProcess::awaitLogLine(const std::function<bool(const std::string &)> &wanted) const {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (true) {
    for (const std::string &line : logLines())
      if (wanted(line))
        return line;
    if (std::chrono::steady_clock::now() > deadline)
      return "";
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

std::pair<int, std::string> runServerToExit(const std::string &program,
                                            const std::vector<std::string> &extra) {
  std::string name = program.substr(program.rfind('/') + 1);
  std::string dir = makeTempDir(name);
  std::vector<std::string> args = {program};
  args.insert(args.end(), extra.begin(), extra.end());
  int out = -1;
  pid_t pid = spawn(args, dir + "/" + name + ".log", out);
  int status = reap(pid, std::chrono::steady_clock::now() + std::chrono::seconds(20));
  close(out);
  std::string log = readFile(dir + "/" + name + ".log");
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, log};
}

std::pair<int, std::string> runCommand(const std::string &command) {
  FILE *pipe = popen((command + " 2>&1").c_str(), "r");
  if (!pipe)
    throw std::runtime_error("cannot run " + command);
  std::string output;
  char buffer[512];
  while (size_t n = std::fread(buffer, 1, sizeof(buffer), pipe))
    output.append(buffer, n);
  int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

} // namespace courier::testing
