/* mt-netbridge: inside a command's network namespace, 127.0.0.1:PORT forwarded to the egress proxy's unix socket.

   Usage: mt-netbridge PORT -- PROGRAM [ARG...]

   The socket is the spawn's own channel, named in $MANAGED_TOOLS_EGRESS_SOCKET (sandbox/egress.py), which is taken
   out of the environment before PROGRAM runs; without it PROGRAM runs with no way out at all. The listener is
   bound and listening before anything else happens, then this process forks: the parent execs PROGRAM (which keeps
   the pid the server watches, and its exit status), the child forwards. So the listener is up before PROGRAM's
   first instruction, and the forwarder ends with PROGRAM: when its parent changes it stops (and the PID namespace
   or the process group goes anyway). Bounded: MAX_PAIRS connections at once, BUFFER bytes held each way per
   connection. It runs inside every layer of the command's domain (it is the domain's prefix). Built once per
   machine by sandbox/launcher.py, as the launcher is; see docs/decisions/egress-bridge.md. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define MAX_PAIRS 64
#define BUFFER 65536
#define POLL_MS 500
#define SOCKET_ENV "MANAGED_TOOLS_EGRESS_SOCKET"

struct way {  /* bytes read from src and not yet written to dst */
    int src, dst, eof, shut;
    size_t len;
    char buf[BUFFER];
};

struct pair {
    struct way out, back;  /* out: the command's side to the proxy; back: the proxy to the command */
};

static struct pair *pairs[MAX_PAIRS];

static void drop(int i) {
    close(pairs[i]->out.src);
    close(pairs[i]->back.src);
    free(pairs[i]);
    pairs[i] = NULL;
}

static void accept_one(int listener, const struct sockaddr_un *target) {
    int client = accept4(listener, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (client < 0)
        return;
    int slot = 0;
    while (slot < MAX_PAIRS && pairs[slot] != NULL)
        slot++;
    int proxy = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct pair *p = slot < MAX_PAIRS ? calloc(1, sizeof *p) : NULL;
    if (p == NULL || proxy < 0 || connect(proxy, (const struct sockaddr *)target, sizeof *target) != 0) {
        free(p);
        close(client);
        if (proxy >= 0)
            close(proxy);
        return;
    }
    fcntl(proxy, F_SETFL, fcntl(proxy, F_GETFL) | O_NONBLOCK);
    p->out.src = p->back.dst = client;
    p->out.dst = p->back.src = proxy;
    pairs[slot] = p;
}

/* What `fd` (the source of `reads`, the destination of `writes`) waits for now; 0: nothing. */
static short wanted(const struct way *reads, const struct way *writes) {
    return (short)((!reads->eof && reads->len < BUFFER ? POLLIN : 0) | (writes->len ? POLLOUT : 0));
}

/* One end is ready: read into the way it is the source of, write out the way it is the destination of. */
static int step(struct way *reads, struct way *writes, short revents) {
    if (revents & (POLLERR | POLLNVAL))
        return -1;
    if (revents & (POLLIN | POLLHUP) && !reads->eof && reads->len < BUFFER) {
        ssize_t got = recv(reads->src, reads->buf + reads->len, BUFFER - reads->len, 0);
        if (got < 0 && errno != EAGAIN && errno != EINTR)
            return -1;
        if (got == 0)
            reads->eof = 1;
        if (got > 0)
            reads->len += (size_t)got;
    }
    if (revents & POLLOUT && writes->len) {
        ssize_t sent = send(writes->dst, writes->buf, writes->len, MSG_NOSIGNAL);
        if (sent < 0 && errno != EAGAIN && errno != EINTR)
            return -1;
        if (sent > 0) {
            memmove(writes->buf, writes->buf + sent, writes->len - (size_t)sent);
            writes->len -= (size_t)sent;
        }
    }
    return 0;
}

static void half_close(struct way *way) {
    if (way->eof && !way->len && !way->shut) {
        shutdown(way->dst, SHUT_WR);  /* pass the half-close on */
        way->shut = 1;
    }
}

static void forward(int listener, const struct sockaddr_un *target, pid_t parent) {
    struct pollfd fds[1 + 2 * MAX_PAIRS];
    while (getppid() == parent) {
        fds[0] = (struct pollfd){.fd = listener, .events = POLLIN};
        for (int i = 0; i < MAX_PAIRS; i++) {
            struct pair *p = pairs[i];
            short client = p ? wanted(&p->out, &p->back) : 0, proxy = p ? wanted(&p->back, &p->out) : 0;
            fds[1 + 2 * i] = (struct pollfd){.fd = client ? p->out.src : -1, .events = client};
            fds[2 + 2 * i] = (struct pollfd){.fd = proxy ? p->back.src : -1, .events = proxy};
        }
        if (poll(fds, 1 + 2 * MAX_PAIRS, POLL_MS) <= 0)
            continue;
        if (fds[0].revents & POLLIN)
            accept_one(listener, target);
        for (int i = 0; i < MAX_PAIRS; i++) {
            struct pair *p = pairs[i];
            if (p == NULL || (fds[1 + 2 * i].fd < 0 && fds[2 + 2 * i].fd < 0))
                continue;
            if (step(&p->out, &p->back, fds[1 + 2 * i].revents) != 0 ||
                step(&p->back, &p->out, fds[2 + 2 * i].revents) != 0) {
                drop(i);
                continue;
            }
            half_close(&p->out);
            half_close(&p->back);
            if (p->out.shut && p->back.shut)
                drop(i);
        }
    }
}

/* Listen on 127.0.0.1:`port`, then fork the forwarder to `path`; returns in the parent (-1: nothing started). */
static int start(int port, const char *path) {
    struct sockaddr_un target = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof target.sun_path) {
        errno = ENAMETOOLONG;
        return -1;
    }
    strcpy(target.sun_path, path);
    int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), on = 1;
    struct sockaddr_in address = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (listener < 0 || setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on) != 0 ||
        bind(listener, (struct sockaddr *)&address, sizeof address) != 0 || listen(listener, MAX_PAIRS) != 0)
        return -1;
    pid_t parent = getpid(), child = fork();
    if (child < 0)
        return -1;
    if (child == 0) {
        int null = open("/dev/null", O_RDWR);
        for (int fd = 0; fd < 3; fd++)  /* never hold the command's pipes open after it ends */
            dup2(null, fd);
        forward(listener, &target, parent);
        _exit(0);
    }
    close(listener);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 4 || strcmp(argv[2], "--") != 0) {
        fprintf(stderr, "usage: mt-netbridge PORT -- PROGRAM [ARG...]\n");
        return 126;
    }
    const char *socket_path = getenv(SOCKET_ENV);
    char *path = socket_path != NULL && *socket_path ? strdup(socket_path) : NULL;
    unsetenv(SOCKET_ENV);
    if (path != NULL && start(atoi(argv[1]), path) != 0) {
        fprintf(stderr, "managed-tools: could not start the network bridge: %s; the program was not run.\n",
                strerror(errno));
        return 126;
    }
    free(path);
    execvp(argv[3], argv + 3);
    fprintf(stderr, "%s: %s\n", argv[3], strerror(errno));
    return errno == ENOENT ? 127 : 126;
}
