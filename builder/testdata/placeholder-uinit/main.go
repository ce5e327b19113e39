// Command placeholder-uinit stands in for the runner in builder tests: it
// proves a uinit from this module is compiled into the busybox.
package main

import "fmt"

func main() { fmt.Println("CURE placeholder uinit") }
