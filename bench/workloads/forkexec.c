/*
 * Fork+exec workload for bench/proc.sh.
 *   forkexec N PATH
 * N times, one after the other: fork, execv(PATH, {PATH, NULL}) in the child (which
 * _exit(127)s if the exec fails), waitpid in the parent. The whole loop is timed with
 * CLOCK_MONOTONIC and reported as "forkexec: N in T ns". Exits 1 if a fork failed or a
 * child did not exit 0, 2 on bad usage.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc != 3 || atol(argv[1]) < 0) {
        fprintf(stderr, "usage: forkexec N PATH\n");
        return 2;
    }
    long n = atol(argv[1]);
    char *path = argv[2];
    char *child_argv[] = {path, NULL};
    int failed = 0;
    fflush(NULL);
    long t0 = now_ns();
    for (long i = 0; i < n; i++) {
        pid_t pid = fork();
        if (pid < 0) {
            perror("forkexec: fork");
            return 1;
        }
        if (pid == 0) {
            execv(path, child_argv);
            _exit(127);
        }
        int st;
        pid_t r;
        do {
            r = waitpid(pid, &st, 0);
        } while (r < 0 && errno == EINTR);
        if (r != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) failed++;
    }
    long t1 = now_ns();
    printf("forkexec: %ld in %ld ns\n", n, t1 - t0);
    if (failed) {
        fprintf(stderr, "forkexec: %d children failed\n", failed);
        return 1;
    }
    return 0;
}
