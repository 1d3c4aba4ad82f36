// Command proxy runs a flashgate edge: `proxy -c conf/edge.yaml`.
package main
