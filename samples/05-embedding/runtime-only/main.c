// Opens a session on the in-process executor through the C ABI lowered host code calls
// (courier/ExecutorABI.h), opens it again (the same session comes back) and closes it.
#include <courier/ExecutorABI.h>

#include <stdio.h>

int main(void) {
  int64_t session = __catalyst__executor__open("local");
  int64_t again = __catalyst__executor__open("local");
  if (session == 0 || again != session) {
    fprintf(stderr, "opening a session on \"local\" failed\n");
    return 1;
  }
  if (__catalyst__executor__close(session) != 0) {
    fprintf(stderr, "closing the session failed\n");
    return 1;
  }
  printf("a session on \"local\" opened once and closed\n");
  return 0;
}
