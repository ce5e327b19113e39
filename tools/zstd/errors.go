package zstd

import (
	"errors"
	"fmt"
)

var (
	// ErrCorrupt is matched (errors.Is) by every error caused by malformed
	// compressed data.
	ErrCorrupt = errors.New("zstd: corrupt input")
	// ErrWindowTooLarge is returned for frames whose Window_Size exceeds
	// the configured maximum (see WithMaxWindow).
	ErrWindowTooLarge = errors.New("zstd: window size exceeds limit")
	// ErrDictionary is returned for frames that need a dictionary.
	ErrDictionary = errors.New("zstd: dictionaries are not supported")
	// ErrChecksum is returned when a frame's Content_Checksum mismatches.
	ErrChecksum = errors.New("zstd: content checksum mismatch")
	// ErrClosed is returned by Read after Close.
	ErrClosed = errors.New("zstd: reader closed")
)

// corruptError describes malformed input; it matches ErrCorrupt.
type corruptError struct{ msg string }

func (e *corruptError) Error() string        { return e.msg }
func (e *corruptError) Is(target error) bool { return target == ErrCorrupt }

func corrupt(msg string) error { return &corruptError{msg} }

func corruptf(format string, args ...any) error {
	return &corruptError{fmt.Sprintf(format, args...)}
}

func wrapCorrupt(what string, err error) error {
	return &corruptError{what + ": " + err.Error()}
}
