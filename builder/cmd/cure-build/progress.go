package main

import (
	"io"
	"os"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/cure-oss/cure/builder"
)

// stepBar is a progress bar over builder.Steps, drawn on stderr only when
// stderr is a terminal (a CI log or a pipe gets the log lines alone). Its
// step is Options.Step; done ends it.
func stepBar(stderr *os.File) (step func(string), done func()) {
	if !term.IsTerminal(int(stderr.Fd())) {
		return nil, func() {}
	}
	return newStepBar(stderr, len(builder.Steps))
}

func newStepBar(w io.Writer, total int) (step func(string), done func()) {
	bar := progressbar.NewOptions(total,
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription("cure-build"),
		progressbar.OptionShowCount(),
		progressbar.OptionSetElapsedTime(true),
		progressbar.OptionSetPredictTime(false),
		progressbar.OptionClearOnFinish(),
	)
	started := false
	step = func(name string) {
		if started {
			_ = bar.Add(1) // the previous step is done
		}
		started = true
		bar.Describe(name)
	}
	return step, func() { _ = bar.Finish() }
}
