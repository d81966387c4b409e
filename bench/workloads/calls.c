/*
 * Per-firing overhead workloads: each mode calls one function N times.
 *   calls lea N      f_lea's first instruction is `lea` (the kernel single-steps it)
 *   calls push N     f_push's first instruction is `push` (the kernel emulates it)
 *   calls malloc N   malloc+free pairs (libc's malloc entry)
 *   calls threads N  4 threads share N calls of f_push
 *   calls ret N      f_lea again, for return probes
 * Prints the number of calls made and the loop's duration in ns ("N calls T ns"), so a
 * tracer's count can be checked and its per-call overhead measured without its start-up.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

__attribute__((noinline)) long f_lea(long x) { return x * 2 + 1; }

__attribute__((noinline, optimize("O0"))) long f_push(long x) { return x + 1; }

static volatile long sink;
static long per_thread;

static void *worker(void *arg) {
    (void)arg;
    for (long i = 0; i < per_thread; i++) sink += f_push(i);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s lea|push|malloc|threads|ret N\n", argv[0]);
        return 2;
    }
    long n = atol(argv[2]);
    const char *mode = argv[1];
    long t0 = now_ns();
    if (!strcmp(mode, "lea") || !strcmp(mode, "ret")) {
        for (long i = 0; i < n; i++) sink += f_lea(i);
    } else if (!strcmp(mode, "push")) {
        for (long i = 0; i < n; i++) sink += f_push(i);
    } else if (!strcmp(mode, "malloc")) {
        for (long i = 0; i < n; i++) {
            void *p = malloc(32 + (i & 63));
            sink += (long)(p != NULL);
            free(p);
        }
    } else if (!strcmp(mode, "threads")) {
        pthread_t t[4];
        per_thread = n / 4;
        for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, worker, NULL);
        for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
        n = per_thread * 4;
    } else {
        fprintf(stderr, "unknown mode %s\n", mode);
        return 2;
    }
    printf("%ld calls %ld ns\n", n, now_ns() - t0);
    return 0;
}
