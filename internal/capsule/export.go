package capsule

/*
#include <stdint.h>
*/
import "C"

// recgoCapsuleRelease is the Go side of the capsule destructor (in its own file: a file with
// //export may only declare C in its preamble, and capsule.go defines the destructor there).
//
//export recgoCapsuleRelease
func recgoCapsuleRelease(h C.uintptr_t) { releaseHandle(uintptr(h)) }
