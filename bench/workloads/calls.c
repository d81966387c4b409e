/*
 * Per-firing overhead workloads: each mode calls one function N times.
 *   calls lea N      f_lea's first instruction is `lea` (the kernel single-steps it)
 *   calls push N     f_push's first instruction is `push` (the kernel emulates it)
 *   calls malloc N   malloc+free pairs (libc's malloc entry)
 *   calls threads N  4 threads share N calls of f_push
 *   calls ret N      f_lea again, for return probes
 *   calls hot N T    T threads (default 2) each calling f_hot N times (work at the firing)
 *   calls pair N T   T threads each calling f_pair N times (entry and return both patched)
 * Prints the number of calls made and the loop's duration in ns ("N calls T ns"), so a
 * tracer's count can be checked and its per-call overhead measured without its start-up,
 * then its own CPU time ("cpu T ns"), so that a tracer's can be told from it.
 */
#include <sys/resource.h>
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

/* Three instructions (mov, xor, ret), the tiny function. */
__attribute__((noinline)) long f_hot(long x) { return x ^ 5; }

/* Long enough that its entry and its return are each patched in place. */
__attribute__((noinline)) long f_pair(long i) {
    long x = i * 3 + 1;
    x ^= x >> 7;
    x += i & 0xff;
    __asm__ volatile("" : "+r"(x));
    return x ^ (i << 2);
}

static volatile long sink;
static long per_thread;

static void *hot(void *arg) {
    long s = 0;
    for (long i = 0; i < per_thread; i++) s += arg ? f_pair(i) : f_hot(i);
    sink += s;
    return NULL;
}

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
    } else if (!strcmp(mode, "hot") || !strcmp(mode, "pair")) {
        int threads = argc > 3 ? atoi(argv[3]) : 2;
        pthread_t t[64];
        if (threads < 1 || threads > 64) return 2;
        per_thread = n;
        for (int i = 0; i < threads; i++) pthread_create(&t[i], NULL, hot, mode[0] == 'p' ? (void *)1 : NULL);
        for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
        n = per_thread * threads;
    } else {
        fprintf(stderr, "unknown mode %s\n", mode);
        return 2;
    }
    printf("%ld calls %ld ns\n", n, now_ns() - t0);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("cpu %ld ns\n", (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000000L +
                               (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000L);
    return 0;
}
