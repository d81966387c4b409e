"""Real Python programs calling into C through ctypes, in its own process and in
multiprocessing children started by fork and by spawn.

    python3 abs_calls.py ctypes N
        calls libc's abs() N times through ctypes.
    python3 abs_calls.py fork|spawn P K
        starts P multiprocessing children with that start method; each calls libc's
        abs() K times through ctypes and exits with a status made of its sums; the
        parent calls abs() K times too, joins them and checks their statuses.
    python3 abs_calls.py sigurg N
        blocks SIGURG (signal.pthread_sigmask), then loads libzstd.so.1 with
        ctypes.CDLL (not loaded before) and calls ZSTD_versionNumber() N times.

Prints one line of what it did (the same whether traced or not) and exits 0.
Exact counts: ctypes N, fork/spawn (P + 1) * K abs calls, sigurg N calls of
ZSTD_versionNumber; nothing else calls them.
"""

import ctypes
import multiprocessing
import signal
import sys


def abs_sum(k):
    libc = ctypes.CDLL("libc.so.6")
    return sum(libc.abs(-i) for i in range(k))


def child(k):
    # The exit status carries the result back, whatever the start method.
    sys.exit(abs_sum(k) % 251)


def main():
    mode = sys.argv[1]
    if mode == "ctypes":
        n = int(sys.argv[2])
        print(f"ctypes: {n} abs calls, sum {abs_sum(n)}")
    elif mode in ("fork", "spawn"):
        p, k = int(sys.argv[2]), int(sys.argv[3])
        ctx = multiprocessing.get_context(mode)
        procs = [ctx.Process(target=child, args=(k,)) for _ in range(p)]
        for proc in procs:
            proc.start()
        own = abs_sum(k)
        for proc in procs:
            proc.join()
        codes = sorted(proc.exitcode for proc in procs)
        ok = codes == [own % 251] * p
        print(f"{mode}: {p} children, {k} abs calls each and in the parent, exit codes {codes}, {'ok' if ok else 'WRONG'}")
    elif mode == "sigurg":
        n = int(sys.argv[2])
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGURG})
        zstd = ctypes.CDLL("libzstd.so.1")
        versions = {zstd.ZSTD_versionNumber() for _ in range(n)}
        blocked = signal.SIGURG in signal.pthread_sigmask(signal.SIG_BLOCK, set())
        print(f"sigurg: {n} calls, {len(versions)} version, SIGURG {'blocked' if blocked else 'not blocked'}")
    else:
        sys.exit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
