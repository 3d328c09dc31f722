// Starts courier-executor with --listen 127.0.0.1:PORT, reads the bound address it prints,
// and polls /v1/health until it answers.
#include "tests/transport/ExecutorProcess.h"

#include <httplib.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <poll.h>
#include <sstream>
#include <stdexcept>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace courier::testing {

namespace {

std::string readLine(int fd, std::chrono::milliseconds timeout) {
  std::string line;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0)
      throw std::runtime_error("courier-executor printed no address in time");
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left.count())) <= 0)
      continue;
    char c;
    ssize_t n = read(fd, &c, 1);
    if (n <= 0)
      throw std::runtime_error("courier-executor exited before printing its address: " + line);
    if (c == '\n')
      return line;
    line.push_back(c);
  }
}

httplib::Headers authHeaders(const std::string &token) {
  httplib::Headers headers;
  if (!token.empty())
    headers.emplace("Authorization", "Bearer " + token);
  return headers;
}

} // namespace

ExecutorProcess::ExecutorProcess(ExecutorConfig configIn) : config(std::move(configIn)) {
  char pattern[] = "/tmp/courier-executor-test-XXXXXX";
  if (!mkdtemp(pattern))
    throw std::runtime_error("cannot create a temporary directory");
  directory = pattern;

  std::vector<std::string> args = {COURIER_EXECUTOR_PATH, "--listen",
                                   "127.0.0.1:" + std::to_string(config.port)};
  if (!config.token.empty()) {
    std::ofstream(directory + "/token") << config.token << "\n";
    args.push_back("--token-file");
    args.push_back(directory + "/token");
  }
  args.insert(args.end(), config.extraArgs.begin(), config.extraArgs.end());
  std::vector<char *> argv;
  for (std::string &arg : args)
    argv.push_back(arg.data());
  argv.push_back(nullptr);

  int out[2];
  if (pipe(out) != 0)
    throw std::runtime_error("pipe failed");
  std::string logPath = directory + "/executor.log";
  pid = fork();
  if (pid == 0) {
    dup2(out[1], STDOUT_FILENO);
    int log = open(logPath.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    dup2(log, STDERR_FILENO);
    close(out[0]);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(out[1]);
  std::string line = readLine(out[0], std::chrono::seconds(20));
  close(out[0]);
  const std::string prefix = "listening on ";
  if (line.compare(0, prefix.size(), prefix) != 0)
    throw std::runtime_error("unexpected first line from courier-executor: " + line);
  addressText = line.substr(prefix.size());
  boundPort = std::stoi(addressText.substr(addressText.rfind(':') + 1));

  httplib::Client client("127.0.0.1", boundPort);
  client.set_connection_timeout(std::chrono::seconds(1));
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (true) {
    httplib::Result res = client.Get("/v1/health", authHeaders(config.token));
    if (res && res->status == 200)
      break;
    if (std::chrono::steady_clock::now() > deadline)
      throw std::runtime_error("courier-executor at " + addressText + " never became healthy");
  }
}

ExecutorProcess::~ExecutorProcess() {
  stop(SIGTERM);
  std::error_code ignored;
  std::filesystem::remove_all(directory, ignored);
}

int ExecutorProcess::stop(int signal) {
  if (pid <= 0)
    return -1;
  ::kill(pid, signal);
  // A clean shutdown takes milliseconds; SIGKILL whatever is still there after 10 s.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  int status = 0;
  bool forced = false;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      forced = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  pid = -1;
  return !forced && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

void ExecutorProcess::signal(int signal) {
  if (pid > 0)
    ::kill(pid, signal);
}

void ExecutorProcess::kill() {
  if (pid <= 0)
    return;
  ::kill(pid, SIGKILL);
  int status;
  waitpid(pid, &status, 0);
  pid = -1;
}

std::string ExecutorProcess::metrics() const {
  httplib::Client client("127.0.0.1", boundPort);
  httplib::Result res = client.Get("/metrics", authHeaders(config.token));
  return res && res->status == 200 ? res->body : std::string();
}

double ExecutorProcess::metric(const std::string &name) const {
  std::istringstream lines(metrics());
  std::string line;
  while (std::getline(lines, line))
    if (line.compare(0, name.size() + 1, name + " ") == 0)
      return std::stod(line.substr(name.size() + 1));
  return -1;
}

double ExecutorProcess::awaitMetricAtMost(const std::string &name, double bound) const {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  double value = metric(name);
  while (value > bound && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    value = metric(name);
  }
  return value;
}

std::string ExecutorProcess::log() const {
  std::ifstream in(directory + "/executor.log");
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

} // namespace courier::testing
