/* mt-confine: set the resource limits, join the cgroups, drop every capability, enter an inherited Landlock domain,
   load the syscall filter, then become the program.

   Usage: mt-confine RULESET_FD FILTER_FD LIMITS CGROUP_FDS PATH ARGV0 [ARG...]

   LIMITS is CPU_SECONDS,FILE_BYTES,ADDRESS_BYTES (0: leave that limit as inherited). CGROUP_FDS is "-" or a
   comma-separated list of descriptors open for writing on cgroup.procs files: writing "0" moves this process
   (and so everything it starts) into that cgroup, where the server set its process and memory limits. FILTER_FD
   is "-" or a sealed memfd holding the seccomp filter (classic BPF, built by sandbox/syscalls.py with libseccomp).

   The server spawns this without a preexec_fn, so CPython can vfork instead of forking the whole server; inside
   bubblewrap it is what bwrap runs. Here, in the child: limits (RLIMIT_CORE 0 too: no core file lands in a
   mount), cgroups, every capability dropped (the bounding set where this process may, securebits that keep uid 0
   from regaining any at exec where it may set them, ambient, inheritable, permitted, effective; then checked: a
   process that was privileged and still holds anything, or could regain it, never runs the program), no new
   privileges, enforce the ruleset the server built, load the filter as the last step, close the ruleset, filter
   and cgroup fds (the program must not add rules to a ruleset the server shares, nor move itself), then execve
   PATH with ARGV0 ARG...
   and the environment as given (less PWD, which bwrap adds). Any failure writes one line to stderr and exits 126: the program is never run
   unconfined. Built once per machine by sandbox/launcher.py; see docs/decisions/compiled-launcher.md. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef SYS_landlock_restrict_self
#define SYS_landlock_restrict_self 446 /* the same number on every architecture */
#endif
#ifndef PR_CAP_AMBIENT
#define PR_CAP_AMBIENT 47
#define PR_CAP_AMBIENT_CLEAR_ALL 4
#endif
#define SECBIT_NOROOT (1 << 0)
#define SECBIT_NOROOT_LOCKED (1 << 1)
#define SECBIT_NO_SETUID_FIXUP (1 << 2)
#define SECBIT_NO_SETUID_FIXUP_LOCKED (1 << 3)
#define SECBIT_KEEP_CAPS_LOCKED (1 << 5)
#define SECBIT_NO_CAP_AMBIENT_RAISE (1 << 6)
#define SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED (1 << 7)
#define MAX_FILTER 4096 /* BPF_MAXINSNS */

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

static int capget_all(struct __user_cap_data_struct data[2]) {
    struct __user_cap_header_struct header = {_LINUX_CAPABILITY_VERSION_3, 0};
    return (int)syscall(SYS_capget, &header, data);
}

/* The highest capability this kernel knows (/proc/sys/kernel/cap_last_cap; CAP_LAST_CAP where /proc is not). */
static int last_cap(void) {
    int fd = open("/proc/sys/kernel/cap_last_cap", O_RDONLY | O_CLOEXEC);
    char text[16] = {0};
    int last = CAP_LAST_CAP;
    if (fd >= 0) {
        ssize_t got = read(fd, text, sizeof text - 1);
        if (got > 0 && text[0] >= '0' && text[0] <= '9')
            last = atoi(text);
        close(fd);
    }
    return last > 63 ? 63 : last;
}

/* Drop every capability, then check nothing is left: see the usage above. */
static void drop_capabilities(void) {
    const char *why = "capabilities: could not drop every capability";
    struct __user_cap_data_struct data[2] = {{0}};
    if (capget_all(data) != 0)
        fail(why, errno);
    int held = (data[0].permitted | data[1].permitted) != 0;
    int privileged = held || geteuid() == 0 || getuid() == 0;
    int last = last_cap();
    const char *bounding = "capabilities: a root process could not drop its bounding set (it lacks CAP_SETPCAP)";
    for (int cap = 0; cap <= last; cap++)
        if (prctl(PR_CAPBSET_READ, cap, 0, 0, 0) == 1 && prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && privileged)
            fail(bounding, errno);
    /* needs CAP_SETPCAP, which a root process outside bubblewrap has; inside, the bounding set is empty already */
    prctl(PR_SET_SECUREBITS, SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP |
          SECBIT_NO_SETUID_FIXUP_LOCKED | SECBIT_KEEP_CAPS_LOCKED | SECBIT_NO_CAP_AMBIENT_RAISE |
          SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED, 0, 0, 0);
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0 && errno != EINVAL)
        fail(why, errno);
    struct __user_cap_header_struct header = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct none[2] = {{0}};
    if (syscall(SYS_capset, &header, none) != 0)
        fail(why, errno);
    if (capget_all(data) != 0)
        fail(why, errno);
    if (data[0].effective | data[1].effective | data[0].permitted | data[1].permitted | data[0].inheritable |
        data[1].inheritable)
        fail(why, EPERM);
    /* a non-root process keeps a bounding set it cannot drop: it holds nothing, and no new privileges (set next)
       keeps exec from granting anything */
    for (int cap = 0; privileged && cap <= last; cap++)
        if (prctl(PR_CAPBSET_READ, cap, 0, 0, 0) != 0)
            fail(bounding, EPERM);
}

/* Load the seccomp filter held by `fd` (classic BPF, read from offset 0). No new privileges is set already. */
static void load_filter(int fd) {
    static struct sock_filter program[MAX_FILTER];
    ssize_t got = pread(fd, program, sizeof program, 0);
    if (got <= 0 || got % (ssize_t)sizeof program[0] != 0)
        fail("syscalls: could not read the seccomp filter", got < 0 ? errno : EINVAL);
    struct sock_fprog prog = {(unsigned short)(got / (ssize_t)sizeof program[0]), program};
    if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) != 0)
        fail("syscalls: could not load the seccomp filter", errno);
}

static int descriptor(const char *arg, const char *what) {
    char *text = (char *)arg;
    unsigned long long fd = number(&text, '\0', what);
    if (fd > INT_MAX)
        fail(what, EBADF);
    return (int)fd;
}

int main(int argc, char **argv) {
    if (argc < 7)
        fail("mt-confine RULESET_FD FILTER_FD LIMITS CGROUP_FDS PATH ARGV0 [ARG...]", EINVAL);
    int fd = descriptor(argv[1], "Landlock: could not confine the program");
    int filter = strcmp(argv[2], "-") == 0 ? -1 : descriptor(argv[2], "syscalls: bad filter descriptor");

    char *text = argv[3];
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

    if (strcmp(argv[4], "-") != 0) {
        text = argv[4];
        while (*text != '\0') {
            unsigned long long group = number(&text, ',', "bad cgroup descriptors");
            errno = 0;
            if (group > INT_MAX || write((int)group, "0", 1) != 1)
                fail("could not join the command's cgroup", errno ? errno : EBADF);
            close((int)group);
        }
    }

    drop_capabilities();
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
        fail("Landlock: could not confine the program", errno);
    if (syscall(SYS_landlock_restrict_self, fd, 0) != 0)
        fail("Landlock: could not confine the program", errno);
    if (close(fd) != 0)
        fail("Landlock: could not close the ruleset", errno);
    if (filter >= 0) {
        load_filter(filter);
        if (close(filter) != 0)
            fail("syscalls: could not close the filter", errno);
    }
    /* bwrap sets PWD to the cwd it enters; the program gets exactly the environment the server gave (which never
       holds PWD: a shell sets its own). */
    unsetenv("PWD");
    execve(argv[5], argv + 6, environ);
    fail("could not start the program", errno);
    return 126;
}
