package main

import (
	"flag"
	"fmt"
	"io"
	"strings"
)

// command is one subcommand: `proxy NAME ARGS...`. Adding one is adding a
// line to commands.
type command struct {
	name, args, help string // for the usage text
	run              func(c *command, args []string, stdout, stderr io.Writer) int
}

// commands are the subcommands; `proxy` without one runs the edge.
var commands = []command{
	{"orders", "-c FILE", "run the order consumer on its own", subcommand},
	{"reconcile", "-c FILE", "check stock against stored orders", subcommand},
	{"health", "[-c FILE]", "probe the running edge's /healthz (exit 0 when it answers)", health},
	{"report", "-c FILE -product P [-out DIR]", "write one sale's report (HTML and JSON)", reportCmd},
}

// findCommand is the subcommand args name, if args[0] is a word rather
// than a flag. A word that names none is refused: it would otherwise end
// the edge's flag parsing and start an edge on the built-in config
// (`proxy reconcle -c edge.yaml` never read -c).
func findCommand(args []string) (cmd *command, word string) {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return nil, ""
	}
	for i := range commands {
		if commands[i].name == args[0] {
			return &commands[i], args[0]
		}
	}
	return nil, args[0]
}

// usage is the text `proxy -h` and every refused command line print.
func usage(w io.Writer) {
	fmt.Fprintf(w, "usage: proxy %-27s %s\n", "[-c FILE] [-t] [-version]", "run the edge (or test its config)")
	for _, c := range commands {
		fmt.Fprintf(w, "       proxy %-27s %s\n", c.name+" "+c.args, c.help)
	}
}

// flags is the command's flag set; its usage is the command's line and
// its flags.
func (c *command) flags(stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("proxy "+c.name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: proxy %s %s   %s\n", c.name, c.args, c.help)
		fs.PrintDefaults()
	}
	return fs
}

// parseArgs parses a command's flags and refuses what is left over: no
// command takes positional arguments, and a stray word (a typo, a path
// without -c) must not be silently ignored. It prints the usage on
// refusal; false means exit 2.
func parseArgs(fs *flag.FlagSet, args []string, stderr io.Writer) bool {
	if err := fs.Parse(args); err != nil {
		return false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "%s: unexpected argument %q\n", fs.Name(), fs.Arg(0))
		fs.Usage()
		return false
	}
	return true
}
