// Starts courier-serve with --listen 127.0.0.1:0, reads the bound address it prints, and
// polls /v1/health until it answers.
#include "tests/serve/ServeProcess.h"

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
      throw std::runtime_error("courier-serve printed no address in time");
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left.count())) <= 0)
      continue;
    char c;
    ssize_t n = read(fd, &c, 1);
    if (n <= 0)
      throw std::runtime_error("courier-serve exited before printing its address: " + line);
    if (c == '\n')
      return line;
    line.push_back(c);
  }
}

std::string makeTempDir() {
  char pattern[] = "/tmp/courier-serve-test-XXXXXX";
  if (!mkdtemp(pattern))
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
  pid_t pid = fork();
  if (pid == 0) {
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

std::string readFile(const std::string &path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

} // namespace

ServeProcess::ServeProcess(ServeConfig configIn) : config(std::move(configIn)) {
  dir = makeTempDir();
  std::vector<std::string> args = {COURIER_SERVE_PATH, "--listen", "127.0.0.1:0", "--cache-dir",
                                   dir + "/cache"};
  if (!config.token.empty()) {
    std::ofstream(dir + "/token") << config.token << "\n";
    args.push_back("--token-file");
    args.push_back(dir + "/token");
  }
  args.insert(args.end(), config.extraArgs.begin(), config.extraArgs.end());
  int out = -1;
  pid = spawn(args, dir + "/serve.log", out);
  std::string line;
  try {
    line = readLine(out, std::chrono::seconds(20));
  } catch (const std::exception &e) {
    close(out);
    throw std::runtime_error(std::string(e.what()) + "\n" + log());
  }
  close(out);
  const std::string prefix = "listening on ";
  if (line.compare(0, prefix.size(), prefix) != 0)
    throw std::runtime_error("unexpected first line from courier-serve: " + line);
  addressText = line.substr(prefix.size());
  boundPort = std::stoi(addressText.substr(addressText.rfind(':') + 1));

  std::unique_ptr<httplib::Client> http = client();
  http->set_connection_timeout(std::chrono::seconds(1));
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (true) {
    httplib::Result res = http->Get("/v1/health");
    if (res && res->status == 200)
      break;
    if (std::chrono::steady_clock::now() > deadline)
      throw std::runtime_error("courier-serve at " + addressText + " never became healthy");
  }
}

ServeProcess::~ServeProcess() {
  terminate();
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
}

int ServeProcess::terminate() {
  if (pid <= 0)
    return -1;
  ::kill(pid, SIGTERM);
  // A clean shutdown takes milliseconds; SIGKILL whatever is still there after 15 s.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  pid = -1;
  return status;
}

std::unique_ptr<httplib::Client> ServeProcess::client() const {
  auto http = std::make_unique<httplib::Client>("127.0.0.1", boundPort);
  http->set_tcp_nodelay(true);
  http->set_keep_alive(true);
  http->set_read_timeout(std::chrono::seconds(60));
  if (!config.token.empty())
    http->set_bearer_token_auth(config.token);
  return http;
}

double ServeProcess::metric(const std::string &name) const {
  httplib::Result res = client()->Get("/metrics");
  if (!res || res->status != 200)
    return -1;
  std::istringstream lines(res->body);
  std::string line;
  while (std::getline(lines, line))
    if (line.compare(0, name.size() + 1, name + " ") == 0)
      return std::stod(line.substr(name.size() + 1));
  return -1;
}

std::string ServeProcess::log() const { return readFile(dir + "/serve.log"); }

std::pair<int, std::string> runServeToExit(const std::vector<std::string> &extra) {
  std::string dir = makeTempDir();
  std::vector<std::string> args = {COURIER_SERVE_PATH};
  args.insert(args.end(), extra.begin(), extra.end());
  int out = -1;
  pid_t pid = spawn(args, dir + "/serve.log", out);
  int status = 0;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  close(out);
  std::string log = readFile(dir + "/serve.log");
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, log};
}

} // namespace courier::testing
