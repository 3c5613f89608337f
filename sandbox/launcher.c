/* mt-confine: enter an inherited Landlock domain, then become the program.

   Usage: mt-confine RULESET_FD PATH ARGV0 [ARG...]

   The server spawns this without a preexec_fn, so CPython can vfork instead of forking the whole server. Here,
   in the child: no new privileges, enforce the ruleset the server built, close the ruleset fd (the program must
   not add rules to a ruleset the server shares), then execve PATH with ARGV0 ARG... and the environment as given.
   Any failure writes one line to stderr and exits 126: the program is never run unconfined.
   Built once per machine by sandbox/launcher.py; see docs/decisions/compiled-launcher.md. */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
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

int main(int argc, char **argv) {
    if (argc < 4)
        fail("mt-confine RULESET_FD PATH ARGV0 [ARG...]", EINVAL);
    char *end = NULL;
    errno = 0;
    long fd = strtol(argv[1], &end, 10);
    if (errno != 0 || end == argv[1] || *end != '\0' || fd < 0 || fd > INT_MAX)
        fail("Landlock: could not confine the program", EBADF);
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
        fail("Landlock: could not confine the program", errno);
    if (syscall(SYS_landlock_restrict_self, (int)fd, 0) != 0)
        fail("Landlock: could not confine the program", errno);
    if (close((int)fd) != 0)
        fail("Landlock: could not close the ruleset", errno);
    execve(argv[2], argv + 3, environ);
    fail("could not start the program", errno);
    return 126;
}
