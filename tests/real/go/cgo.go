//go:build cgo

package main

// #include <stdlib.h>
//
// // Through a pointer: gcc would inline a direct call of abs.
// static int (*volatile abs_fn)(int) = abs;
// static int call_abs(int x) { return abs_fn(x); }
import "C"

// cAbs is libc's abs, called through cgo: a Go program that calls into C.
func cAbs(x int) int {
	return int(C.call_abs(C.int(x)))
}
