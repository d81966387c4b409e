//go:build !cgo

package main

// cAbs is abs in Go where cgo is off (the static build).
func cAbs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}
