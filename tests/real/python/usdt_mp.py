# multiprocessing children for python$target:::function-entry (tests/real_usdt.rs):
# `usdt_mp.py fork|spawn CHILDREN K`: the parent and each child call foo() K times.
import multiprocessing as mp
import sys


def foo():
    pass


def work(k):
    for _ in range(k):
        foo()


if __name__ == "__main__":
    start, children, k = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    ctx = mp.get_context(start)
    work(k)
    ps = [ctx.Process(target=work, args=(k,)) for _ in range(children)]
    for p in ps:
        p.start()
    for p in ps:
        p.join()
    print("done")
