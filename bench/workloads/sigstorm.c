/*
 * Signal workload for bench/proc.sh: a process that signals itself N times.
 *   sigstorm N
 * Installs a SIGUSR1 handler (which counts), then calls kill(getpid(), SIGUSR1) N times
 * in a loop; each signal is handled before kill returns. The loop is timed with
 * CLOCK_MONOTONIC and reported as "sigstorm: N signals in T ns". Exits 1 if the handler
 * did not run exactly N times, 2 on bad usage.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t handled;

static void on_usr1(int sig) {
    (void)sig;
    handled++;
}

static long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc != 2 || atol(argv[1]) < 0) {
        fprintf(stderr, "usage: sigstorm N\n");
        return 2;
    }
    long n = atol(argv[1]);
    struct sigaction sa = {0};
    sa.sa_handler = on_usr1;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGUSR1, &sa, NULL)) {
        perror("sigstorm: sigaction");
        return 1;
    }
    pid_t me = getpid();
    long t0 = now_ns();
    for (long i = 0; i < n; i++) kill(me, SIGUSR1);
    long t1 = now_ns();
    printf("sigstorm: %ld signals in %ld ns\n", n, t1 - t0);
    if (handled != n) {
        fprintf(stderr, "sigstorm: the handler ran %ld times, not %ld\n", (long)handled, n);
        return 1;
    }
    return 0;
}
