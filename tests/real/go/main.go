// realgo: goroutines whose stacks grow, and functions called an exact number of times.
//
//	realgo G N DEPTH
//
// Each of G goroutines makes N rounds. A round calls main.work once through
// main.level1 -> main.level2 (a fixed call chain, for ustack()) and cAbs once (libc's
// abs through cgo in the cgo build, Go's own in the static one), then recurses DEPTH
// levels deep through main.deep, whose frames (a 512-byte array each) make the
// goroutine's stack grow far past its first 2 KiB (each growth runs main.deep's entry
// again, after runtime.morestack), and calls main.work once more at the bottom. So
// main.work runs 2*G*N times, main.level1, main.level2 and cAbs G*N times, main.deep
// returns G*N*(DEPTH+1) times. Prints "realgo: G goroutines, N rounds, depth DEPTH,
// checksum C" and exits 0.
package main

import (
	"fmt"
	"os"
	"strconv"
	"sync"
)

//go:noinline
func work(x uint64) uint64 {
	return x*0x9e3779b97f4a7c15 ^ x>>7
}

//go:noinline
func level2(x uint64) uint64 {
	return work(x) + 1
}

//go:noinline
func level1(x uint64) uint64 {
	return level2(x) ^ 3
}

//go:noinline
func deep(depth int, x uint64) uint64 {
	var pad [512]byte
	pad[depth%len(pad)] = byte(x)
	if depth == 0 {
		return work(x) + uint64(pad[0])
	}
	return deep(depth-1, x+1) ^ uint64(pad[depth%len(pad)])
}

func main() {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: realgo G N DEPTH")
		os.Exit(2)
	}
	g, err1 := strconv.Atoi(os.Args[1])
	n, err2 := strconv.Atoi(os.Args[2])
	depth, err3 := strconv.Atoi(os.Args[3])
	if err1 != nil || err2 != nil || err3 != nil {
		fmt.Fprintln(os.Stderr, "usage: realgo G N DEPTH")
		os.Exit(2)
	}
	sums := make([]uint64, g)
	var wg sync.WaitGroup
	for i := 0; i < g; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			var s uint64
			for r := 0; r < n; r++ {
				x := uint64(i*n + r)
				s += level1(x) + uint64(cAbs(-r))
				s ^= deep(depth, x)
			}
			sums[i] = s
		}(i)
	}
	wg.Wait()
	var c uint64
	for _, s := range sums {
		c = c<<5 | c>>59
		c ^= s
	}
	fmt.Printf("realgo: %d goroutines, %d rounds, depth %d, checksum %016x\n", g, n, depth, c)
}
