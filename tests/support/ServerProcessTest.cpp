// The server fixture itself: a process that never becomes a server is ended, and its scratch
// directory removed, by the constructor that gives up on it.
#include "tests/support/ServerProcess.h"

#include <catch2/catch.hpp>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <glob.h>
#include <stdexcept>
#include <string>
#include <unistd.h>

using namespace courier::testing;

namespace {

/// The scratch directories of fixtures named `name` that still exist.
size_t scratchDirectoriesOf(const std::string &name) {
  glob_t found{};
  size_t count = 0;
  if (::glob(("/tmp/" + name + "-test-*").c_str(), 0, nullptr, &found) == 0)
    count = found.gl_pathc;
  globfree(&found);
  return count;
}

/// A shell that writes its pid where the test can read it, prints `firstLine` and stays.
ServerSpec lingeringShell(const std::string &name, const std::string &pidFile,
                          const std::string &firstLine) {
  ServerSpec spec;
  spec.program = "/bin/sh";
  spec.name = name;
  // "--listen" stands in for the address ServerProcess would add: the shell's $0.
  spec.args = {"-c", "echo $$ > " + pidFile + "; echo '" + firstLine + "'; exec sleep 600",
               "--listen"};
  return spec;
}

void requireGivenUpAndCleanedAway(const std::string &firstLine, const std::string &expected) {
  std::string name = "fixture-" + std::to_string(::getpid());
  std::string pidFile = "/tmp/" + name + ".pid";
  std::string message;
  try {
    ServerProcess process(lingeringShell(name, pidFile, firstLine));
  } catch (const std::runtime_error &e) {
    message = e.what();
  }
  INFO(message);
  CHECK(message.find(expected) != std::string::npos);
  std::ifstream in(pidFile);
  pid_t pid = -1;
  in >> pid;
  std::filesystem::remove(pidFile);
  REQUIRE(pid > 0);
  bool running = ::kill(pid, 0) == 0;
  CHECK_FALSE(running);
  if (running)
    ::kill(pid, SIGKILL);
  CHECK(scratchDirectoriesOf(name) == 0);
}

} // namespace

TEST_CASE("a process whose first line is not an address is ended and its directory removed",
          "[support]") {
  requireGivenUpAndCleanedAway("hello", "unexpected first line from fixture-");
}

TEST_CASE("a process that announces an address but never answers health is ended and its "
          "directory removed",
          "[support]") {
  // Port 1 on loopback: nothing listens there, so every health check fails.
  requireGivenUpAndCleanedAway("listening on 127.0.0.1:1", "never became healthy");
}
