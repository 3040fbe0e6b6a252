//go:build cgo && !purego

package blas

// #include <stddef.h>
// #include <stdint.h>
// void frognanoBlasRunJob(uintptr_t dojob, int i, void *jobdata, size_t elsize, int arg);
import "C"

import (
	"sync"
	"sync/atomic"
	"unsafe"
)

// jobsRun counts the jobs the callback has run, jobsRunning those running
// now and jobsPeak the most ever running at once: for the tests.
var jobsRun, jobsRunning, jobsPeak atomic.Int64

// frognanoBlasJobs is the parallel instance's threads callback: OpenBLAS
// hands it the numjobs jobs of one split product, which wait for each
// other's packed panels and so must all run at once. Job 0 runs on the
// calling thread, the rest on goroutines: the helpers gemmParallel's caller
// holds, so the process's compute threads stay within Threads().
//
//export frognanoBlasJobs
func frognanoBlasJobs(dojob C.uintptr_t, numjobs C.int, elsize C.size_t, jobdata unsafe.Pointer, arg C.int) {
	n := int64(numjobs)
	jobsRun.Add(n)
	running := jobsRunning.Add(n)
	for {
		p := jobsPeak.Load()
		if running <= p || jobsPeak.CompareAndSwap(p, running) {
			break
		}
	}
	defer jobsRunning.Add(-n)
	var wg sync.WaitGroup
	for i := 1; i < int(numjobs); i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			C.frognanoBlasRunJob(dojob, C.int(i), jobdata, elsize, arg)
		}()
	}
	C.frognanoBlasRunJob(dojob, 0, jobdata, elsize, arg)
	wg.Wait()
}
