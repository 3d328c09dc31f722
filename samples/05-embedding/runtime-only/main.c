// Opens a session through the C ABI lowered host code calls (courier/ExecutorABI.h), opens it
// again (the same session comes back) and closes it. The executor is the first argument:
// a remote courier-executor ("host:port", "unix:PATH"), or "local" (the default), the
// in-process executor, which a program has when it links Courier::Executor too.
#include <courier/ExecutorABI.h>

#include <stdio.h>

int main(int argc, char **argv) {
  const char *address = argc > 1 ? argv[1] : "local";
  int64_t session = __catalyst__executor__open(address);
  if (session == 0) {
    fprintf(stderr, "opening a session on %s failed\n", address);
    return 1;
  }
  if (__catalyst__executor__open(address) != session) {
    fprintf(stderr, "opening the session again gave another session\n");
    return 1;
  }
  if (__catalyst__executor__close(session) != 0) {
    fprintf(stderr, "closing the session failed\n");
    return 1;
  }
  printf("a session opened once and closed\n");
  return 0;
}
