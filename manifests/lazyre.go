package manifests

import (
	"regexp"
	"sync"
)

// lazyRE is a regexp compiled on first use. The runner's busybox links this
// package and starts twice per boot; compiling every pattern at package
// init cost both starts about 10 ms under QEMU (nameRE's bounded
// repetition alone is a large program).
type lazyRE struct {
	expr    string
	compile func() *regexp.Regexp
}

func lazyRegexp(expr string) lazyRE {
	return lazyRE{expr: expr, compile: sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(expr) })}
}

// String is the expression, uncompiled (the JSON Schema's patterns).
func (l lazyRE) String() string { return l.expr }

func (l lazyRE) MatchString(s string) bool { return l.compile().MatchString(s) }

func (l lazyRE) FindStringSubmatch(s string) []string { return l.compile().FindStringSubmatch(s) }

func (l lazyRE) ReplaceAllString(src, repl string) string {
	return l.compile().ReplaceAllString(src, repl)
}

func (l lazyRE) ReplaceAllStringFunc(src string, f func(string) string) string {
	return l.compile().ReplaceAllStringFunc(src, f)
}
