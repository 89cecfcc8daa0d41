// Package testfs mounts throwaway file systems for tests that need a real one: a tmpfs that a test
// remounts read-only, as a disk that failed at 3 a.m. is. Linux only, and root only (the tests
// skip otherwise); tests only (internal/archtest).
package testfs
