/*
 * Following-children workload: a daemon that forks workers which call target().
 *
 *   forker work W M [E]   fork W workers; each calls target() M times in a loop and
 *                         exits. With E > 0, every E-th worker first execs this binary
 *                         again ("forker child M FD") and runs the loop in the new image.
 *                         The daemon itself never calls target(): W*M calls in all.
 *                         Prints "forker: W workers, M calls each, total T calls,
 *                         loop_ns X, loop_wall_ns Z, wall_ns Y": X and Z are the sums
 *                         of the CPU and wall times of the workers' loops (each worker
 *                         writes its own to a pipe), Y the daemon's wall time from
 *                         first fork to last reap. FORKER_SERIAL set: the daemon waits
 *                         for each worker before forking the next.
 *   forker spawn F PATH   F times: fork, exec PATH with the one argument "nop" ("-":
 *                         no exec, the child just _exit()s), wait. Prints "forker: F
 *                         spawns of PATH, fork_exec_ns X", X the mean per fork+exec+wait.
 *   forker nop            exit at once (a small exec target that contains target()).
 *
 * Optional synchronisation with another copy, for showing whose calls a tracer counts
 * (paths are created when reached, and waited for by polling every millisecond):
 *   FORKER_TOUCH_START, FORKER_WAIT_START  before the work
 *   FORKER_TOUCH_END,   FORKER_WAIT_END    after the work
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static long clock_ns(clockid_t c) {
    struct timespec ts;
    clock_gettime(c, &ts);
    return ts.tv_sec * 1000000000L + ts.tv_nsec;
}
static long now_ns(void) { return clock_ns(CLOCK_MONOTONIC); }

/* O0: the first instruction is `push %rbp`, which the kernel emulates (a first
 * instruction it must single-step costs ~25 us per firing on a VM; see README.md). */
__attribute__((noinline, optimize("O0"))) long target(long x) { return x + 1; }

static volatile long sink;

/* The worker's loop; reports the CPU time it took, kernel time included (the breakpoint
 * traps run in the worker), and its wall time, in one 16-byte write (atomic on a pipe).
 * CPU time is the measure when workers overlap (their wall times would count the time
 * they wait for each other); wall time when a tracer stops the worker at each firing
 * (ptrace: the worker sleeps meanwhile), with FORKER_SERIAL set so that workers don't
 * overlap. */
static void run_loop(long m, int fd) {
    long c0 = clock_ns(CLOCK_THREAD_CPUTIME_ID), t0 = now_ns();
    for (long i = 0; i < m; i++) sink += target(i);
    long ns[2] = {clock_ns(CLOCK_THREAD_CPUTIME_ID) - c0, now_ns() - t0};
    if (write(fd, ns, sizeof ns) != sizeof ns) _exit(3);
    _exit(0);
}

static void touch(const char *env) {
    const char *p = getenv(env);
    if (p) close(open(p, O_CREAT | O_WRONLY, 0644));
}

static void await(const char *env) {
    const char *p = getenv(env);
    if (!p) return;
    for (int i = 0; i < 10000 && access(p, F_OK) != 0; i++) usleep(1000);
}

static void reap(long n) {
    for (long i = 0; i < n; i++)
        while (wait(NULL) < 0 && errno == EINTR) {
        }
}

int main(int argc, char **argv) {
    if (argc >= 2 && !strcmp(argv[1], "nop")) return 0;
    if (argc >= 4 && !strcmp(argv[1], "child")) run_loop(atol(argv[2]), atoi(argv[3]));

    if (argc >= 4 && !strcmp(argv[1], "work")) {
        long w = atol(argv[2]), m = atol(argv[3]), every = argc >= 5 ? atol(argv[4]) : 0;
        int fds[2];
        if (pipe(fds)) return perror("pipe"), 1;
        char mstr[32], fdstr[16];
        snprintf(mstr, sizeof mstr, "%ld", m);
        snprintf(fdstr, sizeof fdstr, "%d", fds[1]);
        touch("FORKER_TOUCH_START");
        await("FORKER_WAIT_START");
        int serial = getenv("FORKER_SERIAL") != NULL;
        long t0 = now_ns();
        for (long i = 0; i < w; i++) {
            pid_t pid = fork();
            if (pid < 0) return perror("fork"), 1;
            if (pid == 0) {
                close(fds[0]);
                if (every > 0 && i % every == every - 1) {
                    execl("/proc/self/exe", argv[0], "child", mstr, fdstr, (char *)NULL);
                    _exit(4);
                }
                run_loop(m, fds[1]);
            }
            if (serial) reap(1);
        }
        close(fds[1]);
        long loop = 0, loop_wall = 0, ns[2], got = 0;
        while (read(fds[0], ns, sizeof ns) == sizeof ns) loop += ns[0], loop_wall += ns[1], got++;
        if (!serial) reap(w);
        long wall = now_ns() - t0;
        touch("FORKER_TOUCH_END");
        await("FORKER_WAIT_END");
        if (got != w) fprintf(stderr, "forker: only %ld of %ld workers reported\n", got, w);
        printf("forker: %ld workers, %ld calls each, total %ld calls, loop_ns %ld, "
               "loop_wall_ns %ld, wall_ns %ld\n",
               w, m, w * m, loop, loop_wall, wall);
        return got == w ? 0 : 1;
    }

    if (argc >= 4 && !strcmp(argv[1], "spawn")) {
        long f = atol(argv[2]);
        const char *path = argv[3];
        int noexec = !strcmp(path, "-");
        long t0 = now_ns();
        for (long i = 0; i < f; i++) {
            pid_t pid = fork();
            if (pid < 0) return perror("fork"), 1;
            if (pid == 0) {
                if (noexec) _exit(0);
                execl(path, path, "nop", (char *)NULL);
                _exit(4);
            }
            int st;
            while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
            }
        }
        printf("forker: %ld spawns of %s, fork_exec_ns %ld\n", f, path, (now_ns() - t0) / (f ? f : 1));
        return 0;
    }

    fprintf(stderr, "usage: %s work W M [EXEC_EVERY] | spawn F PATH|- | nop\n", argv[0]);
    return 2;
}
