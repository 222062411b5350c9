package fsutil

import (
	"syscall"
	"unsafe"
)

// HugeBuffer returns n bytes rounded up to HugePageSize, aligned to it,
// mapped outside Go's heap with the kernel asked to back them with
// transparent huge pages (MADV_HUGEPAGE; the kernel may still use small
// pages); nil if the memory cannot be mapped. Give it back with
// FreeHugeBuffer; the garbage collector does not.
func HugeBuffer(n int) []byte {
	size := (n + HugePageSize - 1) &^ (HugePageSize - 1)
	// Mapped with a huge page's room to spare, so that an aligned start
	// lies within; the spare bytes are never touched, so take no memory.
	m, err := syscall.Mmap(-1, 0, size+HugePageSize, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return nil
	}
	skip := (HugePageSize - int(uintptr(unsafe.Pointer(unsafe.SliceData(m)))%HugePageSize)) % HugePageSize
	b := m[skip : skip+size : skip+size]
	_ = syscall.Madvise(b, syscall.MADV_HUGEPAGE) // a hint: without it, small pages
	hugeMaps.Lock()
	hugeMaps.m[unsafe.SliceData(b)] = m
	hugeMaps.Unlock()
	return b
}

// FreeHugeBuffer unmaps b, a buffer HugeBuffer returned (or a slice of it
// from its start); false, doing nothing, for any other.
func FreeHugeBuffer(b []byte) bool {
	p := unsafe.SliceData(b)
	hugeMaps.Lock()
	m, ok := hugeMaps.m[p]
	delete(hugeMaps.m, p)
	hugeMaps.Unlock()
	if ok {
		_ = syscall.Munmap(m) // only fails for a mapping that is not one
	}
	return ok
}

// IsHugeBuffer reports whether b starts where a buffer HugeBuffer
// returned, and FreeHugeBuffer has not unmapped, starts.
func IsHugeBuffer(b []byte) bool {
	hugeMaps.Lock()
	defer hugeMaps.Unlock()
	_, ok := hugeMaps.m[unsafe.SliceData(b)]
	return ok
}
