/* mt-confine: set the resource limits, join the cgroups, enter an inherited Landlock domain, then become the program.

   Usage: mt-confine RULESET_FD LIMITS CGROUP_FDS PATH ARGV0 [ARG...]

   LIMITS is CPU_SECONDS,FILE_BYTES,ADDRESS_BYTES (0: leave that limit as inherited). CGROUP_FDS is "-" or a
   comma-separated list of descriptors open for writing on cgroup.procs files: writing "0" moves this process
   (and so everything it starts) into that cgroup, where the server set its process and memory limits.

   The server spawns this without a preexec_fn, so CPython can vfork instead of forking the whole server; inside
   bubblewrap it is what bwrap runs. Here, in the child: limits (RLIMIT_CORE 0 too: no core file lands in a
   mount), cgroups, no new privileges, enforce the ruleset the server built, close the ruleset and cgroup fds (the
   program must not add rules to a ruleset the server shares, nor move itself), then execve PATH with ARGV0 ARG...
   and the environment as given (less PWD, which bwrap adds). Any failure writes one line to stderr and exits 126: the program is never run
   unconfined. Built once per machine by sandbox/launcher.py; see docs/decisions/compiled-launcher.md. */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef SYS_landlock_restrict_self
#define SYS_landlock_restrict_self 446 /* the same number on every architecture */
#endif

extern char **environ;

static void say(const char *text) {
    size_t left = strlen(text);
    while (left > 0) {
        ssize_t done = write(STDERR_FILENO, text, left);
        if (done <= 0)
            return;
        text += done;
        left -= (size_t)done;
    }
}

static void fail(const char *what, int error) {
    say("managed-tools: ");
    say(what);
    say(": ");
    say(strerror(error));
    say("; the program was not run.\n");
    _exit(126);
}

/* The next non-negative number of `*text`, which must end at `stop` or at the end; `*text` moves past it. */
static unsigned long long number(char **text, char stop, const char *what) {
    char *end = NULL;
    errno = 0;
    if (**text < '0' || **text > '9')
        fail(what, EINVAL);
    unsigned long long value = strtoull(*text, &end, 10);
    if (errno != 0 || (*end != '\0' && *end != stop))
        fail(what, EINVAL);
    *text = *end == stop ? end + 1 : end;
    return value;
}

static void limit(int resource, rlim_t soft, rlim_t hard) {
    struct rlimit wanted = {soft, hard};
    if (soft != 0 && setrlimit(resource, &wanted) != 0)
        fail("could not set a resource limit", errno);
}

int main(int argc, char **argv) {
    if (argc < 6)
        fail("mt-confine RULESET_FD LIMITS CGROUP_FDS PATH ARGV0 [ARG...]", EINVAL);
    char *text = argv[1];
    unsigned long long fd = number(&text, '\0', "Landlock: could not confine the program");
    if (fd > INT_MAX)
        fail("Landlock: could not confine the program", EBADF);

    text = argv[2];
    rlim_t cpu = (rlim_t)number(&text, ',', "bad limits");
    rlim_t fsize = (rlim_t)number(&text, ',', "bad limits");
    rlim_t as = (rlim_t)number(&text, '\0', "bad limits");
    /* CPU: SIGXCPU at the soft limit (a program may say so), SIGKILL a second later. */
    limit(RLIMIT_CPU, cpu, cpu + 1);
    limit(RLIMIT_FSIZE, fsize, fsize);
    limit(RLIMIT_AS, as, as);
    struct rlimit no_core = {0, 0};
    if (setrlimit(RLIMIT_CORE, &no_core) != 0)
        fail("could not set a resource limit", errno);

    if (strcmp(argv[3], "-") != 0) {
        text = argv[3];
        while (*text != '\0') {
            unsigned long long group = number(&text, ',', "bad cgroup descriptors");
            errno = 0;
            if (group > INT_MAX || write((int)group, "0", 1) != 1)
                fail("could not join the command's cgroup", errno ? errno : EBADF);
            close((int)group);
        }
    }

    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
        fail("Landlock: could not confine the program", errno);
    if (syscall(SYS_landlock_restrict_self, (int)fd, 0) != 0)
        fail("Landlock: could not confine the program", errno);
    if (close((int)fd) != 0)
        fail("Landlock: could not close the ruleset", errno);
    /* bwrap sets PWD to the cwd it enters; the program gets exactly the environment the server gave (which never
       holds PWD: a shell sets its own). */
    unsetenv("PWD");
    execve(argv[4], argv + 5, environ);
    fail("could not start the program", errno);
    return 126;
}
