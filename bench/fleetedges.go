package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
)

// EdgeSet is the edges (cmd/proxy) bench started on one Redis, sharing one
// broker and one order store: the failover and fleet scenarios.
type EdgeSet struct {
	Procs          []*Proc
	Addrs, Admins  []string
	Configs        []string   // each edge's config file (a restart reads it again)
	Consumers      []bool     // which edges run the order consumer
	ConsumerConfig string     // the config of a process holding the order store: `proxy reconcile -c` reads it
	Args           [][]string // each edge's command-line arguments after -c FILE (a restart uses them again)
}

// StartEdges starts n edges on spec, each ready and answering the status
// of spec's first product, and the order consumer: in the first edge, or
// with separate in a cmd/proxy of its own ("orders", whose listeners get no
// load), so there is one order store, which reconcile reads. The edges run
// with GOMAXPROCS=goMaxProcs (0: Go's default).
func (e *Env) StartEdges(ctx context.Context, spec EdgeSpec, n int, separate bool, goMaxProcs int) (*EdgeSet, error) {
	consumers := 1
	if separate {
		consumers = 0
	}
	return e.StartEdgesWith(ctx, spec, n, consumers, separate, goMaxProcs)
}

// StartEdgesWith is StartEdges with the order consumer in the first
// consumers edges (a consumer group of that many members; the nemesis
// scenario runs two), or with separate in a process of its own.
func (e *Env) StartEdgesWith(ctx context.Context, spec EdgeSpec, n, consumers int, separate bool, goMaxProcs int) (*EdgeSet, error) {
	if n < 1 || len(spec.Products) == 0 {
		return nil, errors.New("StartEdges: want at least one edge and one product")
	}
	set := &EdgeSet{}
	if separate {
		path, _, admin, err := e.writeConfig(spec, "orders", n+1, true)
		if err != nil {
			return nil, err
		}
		if e.Orders, err = e.procs.Start("orders", -1, []string{"GOMAXPROCS=1"}, e.bins["proxy"], "-c", path); err != nil {
			return nil, err
		}
		if err := e.waitEdge(ctx, e.Orders, admin, "", ""); err != nil {
			return nil, err
		}
		set.ConsumerConfig, e.OrdersAdmin = path, admin
	}
	var env []string
	if goMaxProcs > 0 {
		env = []string{"GOMAXPROCS=" + strconv.Itoa(goMaxProcs)}
	}
	for i := range n {
		name := fmt.Sprintf("edge%d", i+1)
		consumer := !separate && i < consumers
		path, addr, admin, err := e.writeConfig(spec, name, i+1, consumer)
		if err != nil {
			return nil, err
		}
		var args []string
		if i < len(spec.EdgeArgs) {
			args = spec.EdgeArgs[i]
		}
		p, err := e.procs.Start(name, -1, env, e.bins["proxy"], append([]string{"-c", path}, args...)...)
		if err != nil {
			return nil, err
		}
		if err := e.waitEdge(ctx, p, admin, addr, spec.Products[0].ID); err != nil {
			return nil, err
		}
		if consumer && set.ConsumerConfig == "" {
			set.ConsumerConfig, e.OrdersAdmin = path, admin
		}
		set.Procs, set.Addrs, set.Admins = append(set.Procs, p), append(set.Addrs, addr), append(set.Admins, admin)
		set.Configs, set.Consumers = append(set.Configs, path), append(set.Consumers, consumer)
		set.Args = append(set.Args, args)
	}
	e.Edge, e.EdgeAddr, e.AdminAddr = set.Procs[0], set.Addrs[0], set.Admins[0]
	return set, nil
}

// RestartEdge starts edge i again on its config and arguments (after a
// kill -9), plus extra arguments for this run only, under a new log name,
// and waits until it is ready; set.Procs[i] is the new one.
func (e *Env) RestartEdge(ctx context.Context, set *EdgeSet, i int, goMaxProcs int, firstProduct string, run int, extra ...string) error {
	var env []string
	if goMaxProcs > 0 {
		env = []string{"GOMAXPROCS=" + strconv.Itoa(goMaxProcs)}
	}
	args := append(append([]string{"-c", set.Configs[i]}, set.Args[i]...), extra...)
	p, err := e.procs.Start(fmt.Sprintf("edge%d.%d", i+1, run), -1, env, e.bins["proxy"], args...)
	if err != nil {
		return err
	}
	set.Procs[i] = p
	return e.waitEdge(ctx, p, set.Admins[i], set.Addrs[i], firstProduct)
}
