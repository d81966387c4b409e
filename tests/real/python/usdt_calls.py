# Known Python calls for python$target:::function-entry (tests/real_usdt.rs): foo 18,
# bar 11, <lambda> 10, <module> 1 (functions of this file only).
def foo():
    pass


def bar():
    foo()


for i in range(5):
    bar()
for i in range(3):
    foo()
# Calls from C (map, sorted's key) enter the interpreter afresh.
list(map(lambda x: foo(), range(4)))
print(sorted(range(6), key=lambda x: (bar(), -x)[1]))
