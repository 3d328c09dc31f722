/* Runs courier-executor where seccomp filters cannot be installed (both the seccomp system
 * call and prctl(PR_SET_SECCOMP) fail), as on a kernel built without seccomp or inside a
 * container that forbids it: the executor must say so and refuse to serve, unless told
 * --no-sandbox. Arguments are passed through to the executor. */
#include <errno.h>
#include <seccomp.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <unistd.h>

int main(int argc, char **argv) {
  (void)argc;
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
    perror("without-seccomp: no-new-privs");
    return 125;
  }
  scmp_filter_ctx filter = seccomp_init(SCMP_ACT_ALLOW);
  struct scmp_arg_cmp setSeccomp = {0, SCMP_CMP_EQ, PR_SET_SECCOMP, 0};
  if (!filter || seccomp_rule_add(filter, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(seccomp), 0) != 0 ||
      seccomp_rule_add_array(filter, SCMP_ACT_ERRNO(EINVAL), SCMP_SYS(prctl), 1, &setSeccomp) !=
          0 ||
      seccomp_load(filter) != 0) {
    fprintf(stderr, "without-seccomp: cannot install the filter\n");
    return 125;
  }
  seccomp_release(filter);
  argv[0] = COURIER_EXECUTOR_PATH;
  execv(COURIER_EXECUTOR_PATH, argv);
  perror("without-seccomp: exec");
  return 126;
}
