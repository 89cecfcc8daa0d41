package supervise

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// maxInterpDepth is the kernel's limit on nested #! interpreters (BINPRM_MAX_RECURSION).
const maxInterpDepth = 4

// checkExec finds, before anything is recorded or started, what would make execve of path fail with
// ENOENT although path exists: a script whose #! interpreter is missing, or a program whose loader
// (PT_INTERP, e.g. a musl binary on a glibc host) is missing. The shell says "bad interpreter" or "not
// found" for these; we say which file is missing. Formats it does not know are left to execve
// (binfmt_misc may handle them).
func checkExec(name, path, dir string) error {
	for depth := 0; depth <= maxInterpDepth; depth++ {
		interp, kind, err := interpreter(path)
		if err == nil && kind == "text" {
			return &cmdError{ErrNotExecutable, fmt.Sprintf("command not executable: %s: exec format error: %s has no #! line (a shell script? make #!/bin/sh its first line)", name, path)}
		}
		if err != nil || interp == "" {
			return nil // unreadable (execute-only) or no interpreter: execve decides
		}
		if !filepath.IsAbs(interp) {
			if kind == "loader" {
				return nil
			}
			base := dir
			if base == "" {
				base, _ = os.Getwd()
			}
			interp = filepath.Join(base, interp)
		}
		if err := executable(interp); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return &cmdError{ErrNotFound, fmt.Sprintf("command not found: %s: its %s %s does not exist", name, kind, interp)}
			}
			return &cmdError{ErrNotExecutable, fmt.Sprintf("command not executable: %s: its %s %s: %v", name, kind, interp, err)}
		}
		if kind == "loader" {
			return nil
		}
		path = interp
	}
	return nil
}

// interpreter reads what path needs in order to run: its #! interpreter ("interpreter") or its ELF
// program interpreter ("loader"); "" when it needs neither or the format is unknown.
func interpreter(path string) (interp, kind string, err error) {
	f, err := os.Open(path)
	if err != nil {
		return "", "", err
	}
	defer f.Close()
	head := make([]byte, 256) // the kernel reads BINPRM_BUF_SIZE bytes of a #! line
	n, err := io.ReadFull(f, head)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return "", "", err
	}
	head = head[:n]
	if bytes.HasPrefix(head, []byte("#!")) {
		return shebang(head[2:]), "interpreter", nil
	}
	if bytes.HasPrefix(head, []byte("\x7fELF")) {
		interp, err := elfInterp(f, head)
		return interp, "loader", err
	}
	if !bytes.ContainsRune(head, 0) && !binfmtMisc() {
		// Text (or nothing) without #!: execve fails with ENOEXEC (a shell would run it as a
		// script, once does not), and failed only once the attempt was recorded, using it up.
		return "", "text", nil
	}
	return "", "", nil
}

// binfmtMisc reports whether the kernel lists formats of its binfmt_misc (which may run a file
// of any content): then execve decides.
func binfmtMisc() bool {
	es, _ := os.ReadDir("/proc/sys/fs/binfmt_misc")
	for _, e := range es {
		if n := e.Name(); n != "register" && n != "status" {
			return true
		}
	}
	return false
}

// shebang parses the interpreter path of a #! line as the kernel does: leading blanks skipped, the path
// ends at a blank or the end of the line.
func shebang(line []byte) string {
	if i := bytes.IndexByte(line, '\n'); i >= 0 {
		line = line[:i]
	}
	line = bytes.TrimLeft(line, " \t")
	if i := bytes.IndexAny(line, " \t"); i >= 0 {
		line = line[:i]
	}
	return string(line)
}

// elfInterp returns the PT_INTERP path of an ELF file, read from its program headers (debug/elf would
// add to every start of once for a few fields).
func elfInterp(f io.ReaderAt, head []byte) (string, error) {
	if len(head) < 64 {
		return "", nil
	}
	var bo binary.ByteOrder
	switch head[5] {
	case 1:
		bo = binary.LittleEndian
	case 2:
		bo = binary.BigEndian
	default:
		return "", nil
	}
	var phoff, phentsize, phnum uint64
	switch head[4] {
	case 1: // 32-bit
		phoff, phentsize, phnum = uint64(bo.Uint32(head[28:])), uint64(bo.Uint16(head[42:])), uint64(bo.Uint16(head[44:]))
	case 2: // 64-bit
		phoff, phentsize, phnum = bo.Uint64(head[32:]), uint64(bo.Uint16(head[54:])), uint64(bo.Uint16(head[56:]))
	default:
		return "", nil
	}
	if phnum > 256 || phentsize < 32 || phentsize > 256 {
		return "", nil
	}
	ph := make([]byte, phentsize)
	for i := uint64(0); i < phnum; i++ {
		if _, err := f.ReadAt(ph, int64(phoff+i*phentsize)); err != nil {
			return "", nil
		}
		if bo.Uint32(ph) != 3 { // PT_INTERP
			continue
		}
		var off, size uint64
		if head[4] == 1 {
			off, size = uint64(bo.Uint32(ph[4:])), uint64(bo.Uint32(ph[16:]))
		} else {
			off, size = bo.Uint64(ph[8:]), bo.Uint64(ph[32:])
		}
		if size == 0 || size > 4096 {
			return "", nil
		}
		b := make([]byte, size)
		if _, err := f.ReadAt(b, int64(off)); err != nil {
			return "", nil
		}
		return string(bytes.TrimRight(b, "\x00")), nil
	}
	return "", nil
}
