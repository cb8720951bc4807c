package launch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gpubench/gpubench/internal/gpu"
)

// Member is what each rank tells the others when it joins.
type Member struct {
	Rank   int        `json:"rank"`
	Host   string     `json:"host"`
	PID    int        `json:"pid"`
	Device gpu.Device `json:"device"`
	// Run says what the rank will run (the command and the options that shape it): ranks that
	// would run different things are refused before they start.
	Run string `json:"run"`
}

func (m Member) String() string { return fmt.Sprintf("rank %d (%s, pid %d)", m.Rank, m.Host, m.PID) }

// The rendezvous speaks JSON, one message per line, over one TCP connection from every rank to
// rank 0, which stays open for the whole run: a rank whose connection drops has left.
type message struct {
	Hello   *hello      `json:"hello,omitempty"`
	Welcome *welcome    `json:"welcome,omitempty"`
	Gather  bool        `json:"gather,omitempty"` // Seq and Vals, or Seq and All from rank 0
	Seq     int         `json:"seq,omitempty"`
	Vals    []float64   `json:"vals,omitempty"`
	All     [][]float64 `json:"all,omitempty"`
	Abort   string      `json:"abort,omitempty"`
	Config  bool        `json:"config,omitempty"` // the abort is a configuration error
	Bye     bool        `json:"bye,omitempty"`
}

type hello struct {
	Member
	Size int    `json:"size"`
	Job  string `json:"job"`
}

type welcome struct {
	Members []Member `json:"members"`
	ID      []byte   `json:"id"`
}

// Keepalives find a rank whose host vanished (no FIN, no RST) in about 20 s.
var keepAlive = net.KeepAliveConfig{Enable: true, Idle: 5 * time.Second, Interval: 5 * time.Second, Count: 3}

// helloWait bounds how long a connection may take to say who it is.
const helloWait = 10 * time.Second

// Group is this process's place among the processes of a run.
type Group struct {
	p       Process
	addr    string
	members []Member
	id      []byte
	ctx     context.Context
	cancel  context.CancelCauseFunc
	seq     int
	// Rank 0 has a peer per other rank (peers[0] is nil); every other rank has one, rank 0.
	peers    []*peer
	failOnce sync.Once
	closing  chan struct{} // this process is saying goodbye: a dropped connection is expected
}

type peer struct {
	m     Member
	conn  net.Conn
	mu    sync.Mutex // writes
	enc   *json.Encoder
	dec   *json.Decoder
	in    chan message  // gathers
	bye   chan struct{} // closed when the peer says goodbye
	ended chan struct{} // closed when its reader stops
}

func newPeer(m Member, conn net.Conn) *peer {
	return &peer{m: m, conn: conn, enc: json.NewEncoder(conn), dec: json.NewDecoder(conn), in: make(chan message, 1),
		bye: make(chan struct{}), ended: make(chan struct{})}
}

func (p *peer) send(m message) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.conn.SetWriteDeadline(time.Now().Add(helloWait))
	return p.enc.Encode(m)
}

// Join meets the other processes at addr: rank 0 listens there and waits, up to timeout, for
// every other rank, then calls newID and hands its result and every rank's Member to all. The
// group's context ends, with the reason as its cause, when any rank fails or leaves.
func Join(ctx context.Context, p Process, addr string, timeout time.Duration, me Member, newID func() ([]byte, error)) (*Group, error) {
	me.Rank = p.Rank
	gctx, cancel := context.WithCancelCause(ctx)
	g := &Group{p: p, addr: addr, ctx: gctx, cancel: cancel, closing: make(chan struct{})}
	var err error
	if p.Rank == 0 {
		err = g.serve(me, timeout, newID)
	} else {
		err = g.join(me, timeout)
	}
	if err != nil {
		cancel(err)
		for _, q := range g.peers {
			if q != nil {
				q.conn.Close()
			}
		}
		return nil, err
	}
	for _, q := range g.peers {
		if q != nil {
			go g.read(q)
		}
	}
	return g, nil
}

// serve is rank 0's side of Join.
func (g *Group) serve(me Member, timeout time.Duration, newID func() ([]byte, error)) error {
	_, port, _ := net.SplitHostPort(g.addr)
	lc := net.ListenConfig{KeepAliveConfig: keepAlive}
	ln, err := lc.Listen(g.ctx, "tcp", ":"+port)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return configErr("rank 0 cannot listen on port %s for the rendezvous: it is in use on this host; choose a free MASTER_PORT, or --rendezvous HOST:PORT", port)
		}
		return fmt.Errorf("rank 0 cannot listen on port %s for the rendezvous: %w", port, err)
	}
	defer ln.Close()
	stop := context.AfterFunc(g.ctx, func() { ln.Close() })
	defer stop()
	deadline := time.Now().Add(timeout)
	ln.(*net.TCPListener).SetDeadline(deadline)
	g.peers = make([]*peer, g.p.Size)
	joined := 1
	abort := func(err error) error {
		for _, q := range g.peers {
			if q != nil {
				q.send(message{Abort: err.Error(), Config: errors.Is(err, ErrConfig)})
			}
		}
		return err
	}
	for joined < g.p.Size {
		conn, err := ln.Accept()
		if err != nil {
			var missing []string
			for r, q := range g.peers {
				if r > 0 && q == nil {
					missing = append(missing, strconv.Itoa(r))
				}
			}
			if g.ctx.Err() != nil {
				return abort(context.Cause(g.ctx))
			}
			return abort(fmt.Errorf("rank %s did not reach the rendezvous at %s within %v: check that every process started, with MASTER_ADDR and MASTER_PORT (or --rendezvous) naming rank 0's host and a port it can reach",
				strings.Join(missing, ","), g.addr, timeout))
		}
		var m message
		q := newPeer(Member{}, conn)
		conn.SetReadDeadline(time.Now().Add(helloWait))
		err = q.dec.Decode(&m)
		conn.SetReadDeadline(time.Time{})
		if err != nil || m.Hello == nil { // not a gpubench rank
			conn.Close()
			continue
		}
		h := m.Hello
		q.m = h.Member
		who := h.Member.String()
		switch {
		case h.Job != g.p.Job && h.Job != "" && g.p.Job != "":
			err = configErr("%s of job %s reached the rendezvous of job %s at %s: give each job its own MASTER_PORT", who, h.Job, g.p.Job, g.addr)
		case h.Size != g.p.Size:
			err = configErr("%s was started with a world of %d ranks, rank 0 with %d: start every process with the same world size", who, h.Size, g.p.Size)
		case h.Rank <= 0 || h.Rank >= g.p.Size:
			other := fmt.Sprintf("rank 0 (%s, pid %d)", me.Host, me.PID)
			if h.Rank > 0 {
				other = "the world's ranks 0-" + strconv.Itoa(g.p.Size-1)
			}
			err = configErr("%s does not fit beside %s: give every process its own rank", who, other)
		case h.Run != me.Run:
			err = configErr("%s was started to run %q, rank 0 to run %q: start every process with the same command and options", who, h.Run, me.Run)
		case g.peers[h.Rank] != nil:
			err = configErr("rank %d is claimed by two processes, %s and %s: give every process its own rank",
				h.Rank, g.peers[h.Rank].m.String(), who)
		}
		if err != nil {
			q.send(message{Abort: err.Error(), Config: true})
			conn.Close()
			return abort(err)
		}
		g.peers[h.Rank] = q
		joined++
	}
	id, err := newID()
	if err != nil {
		return abort(fmt.Errorf("rank 0 could not make the communicator's id: %w", err))
	}
	g.id = id
	g.members = make([]Member, g.p.Size)
	g.members[0] = me
	for r, q := range g.peers[1:] {
		g.members[r+1] = q.m
	}
	w := &welcome{Members: g.members, ID: id}
	for _, q := range g.peers[1:] {
		if err := q.send(message{Welcome: w}); err != nil {
			return abort(fmt.Errorf("%s left the rendezvous before it ended: %w", q.m, err))
		}
	}
	return nil
}

// join is every other rank's side of Join: it calls rank 0 until it answers or the timeout ends.
func (g *Group) join(me Member, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	d := net.Dialer{KeepAliveConfig: keepAlive, Timeout: 2 * time.Second}
	var conn net.Conn
	for {
		var err error
		if conn, err = d.DialContext(g.ctx, "tcp", g.addr); err == nil {
			break
		}
		if g.ctx.Err() != nil {
			return context.Cause(g.ctx)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("rank 0 did not open the rendezvous at %s within %v (%v): check that it started, and that MASTER_ADDR and MASTER_PORT (or --rendezvous) name its host and a port this host can reach",
				g.addr, timeout, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	q := newPeer(Member{Rank: 0, Host: g.addr}, conn)
	g.peers = []*peer{q}
	if err := q.send(message{Hello: &hello{Member: me, Size: g.p.Size, Job: g.p.Job}}); err != nil {
		return fmt.Errorf("saying hello at the rendezvous at %s: %w", g.addr, err)
	}
	stop := context.AfterFunc(g.ctx, func() { conn.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	// Rank 0, up now, waits at most the timeout for the others; the grace lets its word on who is
	// missing arrive first.
	conn.SetReadDeadline(time.Now().Add(timeout + helloWait))
	var m message
	err := q.dec.Decode(&m)
	conn.SetReadDeadline(time.Time{})
	switch {
	case g.ctx.Err() != nil:
		return context.Cause(g.ctx)
	case err != nil:
		return fmt.Errorf("rank 0 did not start the run within %v of rank %d reaching the rendezvous at %s: %v", timeout, me.Rank, g.addr, err)
	case m.Abort != "" && m.Config:
		return configErr("%s", strings.TrimPrefix(m.Abort, ErrConfig.Error()+": "))
	case m.Abort != "":
		return errors.New(m.Abort)
	case m.Welcome == nil || len(m.Welcome.Members) != g.p.Size:
		return fmt.Errorf("rank 0 at %s did not answer as gpubench does", g.addr)
	}
	g.members, g.id = m.Welcome.Members, m.Welcome.ID
	q.m = g.members[0]
	return nil
}

// read receives one peer's messages until its connection ends.
func (g *Group) read(q *peer) {
	defer close(q.ended)
	for {
		var m message
		err := q.dec.Decode(&m)
		switch {
		case err != nil:
			select {
			case <-q.bye:
			case <-g.closing:
			default:
				why := "its process exited or lost its connection"
				if !errors.Is(err, net.ErrClosed) && !strings.Contains(err.Error(), "EOF") {
					why += " (" + err.Error() + ")"
				}
				g.fail(fmt.Errorf("%s left the run: %s", q.m, why))
			}
			return
		case m.Abort != "":
			if g.p.Rank == 0 {
				g.fail(fmt.Errorf("%s failed: %s", q.m, m.Abort))
			} else {
				g.fail(errors.New(m.Abort))
			}
			return
		case m.Bye:
			close(q.bye)
			return
		case m.Gather:
			select {
			case q.in <- m:
			case <-g.ctx.Done():
				return
			}
		}
	}
}

// fail ends the group with err as the cause; rank 0 tells every other rank why first, so that
// none of them hears only that rank 0's connection closed.
func (g *Group) fail(err error) {
	g.failOnce.Do(func() {
		if g.p.Rank == 0 {
			for _, q := range g.peers[1:] {
				q.send(message{Abort: err.Error()})
			}
		}
		g.cancel(err)
	})
}

// ID is the communicator's id, from rank 0's newID.
func (g *Group) ID() []byte { return g.id }

// Members are every rank's, in rank order.
func (g *Group) Members() []Member { return g.members }

// Context ends when the group fails; context.Cause says why, naming the rank.
func (g *Group) Context() context.Context { return g.ctx }

// Err is why the group failed, or nil.
func (g *Group) Err() error {
	if g.ctx.Err() == nil {
		return nil
	}
	return context.Cause(g.ctx)
}

// AllGather sends vals to rank 0 and returns every rank's, in rank order (coll.Group).
func (g *Group) AllGather(ctx context.Context, vals []float64) ([][]float64, error) {
	g.seq++
	wait := func(q *peer) (message, error) {
		select {
		case m := <-q.in:
			if m.Seq != g.seq {
				return m, fmt.Errorf("%s is at step %d of the run, this process at %d", q.m, m.Seq, g.seq)
			}
			return m, nil
		case <-g.ctx.Done():
			return message{}, context.Cause(g.ctx)
		case <-ctx.Done():
			if g.ctx.Err() != nil {
				return message{}, context.Cause(g.ctx)
			}
			return message{}, ctx.Err()
		}
	}
	if g.p.Rank != 0 {
		if err := g.peers[0].send(message{Gather: true, Seq: g.seq, Vals: vals}); err != nil {
			return nil, g.failed(fmt.Errorf("%s left the run: %w", g.peers[0].m, err))
		}
		m, err := wait(g.peers[0])
		if err == nil && len(m.All) != g.p.Size {
			err = fmt.Errorf("rank 0 sent %d ranks' figures for %d ranks", len(m.All), g.p.Size)
		}
		return m.All, err
	}
	all := make([][]float64, g.p.Size)
	all[0] = vals
	for r, q := range g.peers[1:] {
		m, err := wait(q)
		if err != nil {
			return nil, err
		}
		if len(m.Vals) != len(vals) {
			return nil, g.failed(fmt.Errorf("%s sent %d figures where rank 0 sent %d: the ranks are not running the same thing", q.m, len(m.Vals), len(vals)))
		}
		all[r+1] = m.Vals
	}
	for _, q := range g.peers[1:] {
		if err := q.send(message{Gather: true, Seq: g.seq, All: all}); err != nil {
			return nil, g.failed(fmt.Errorf("%s left the run: %w", q.m, err))
		}
	}
	return all, nil
}

// failed ends the group with err unless it has already ended, and returns the cause.
func (g *Group) failed(err error) error {
	g.fail(err)
	return context.Cause(g.ctx)
}

// Close leaves the group. After a failure of this process's own (err), the others are told at
// once; otherwise rank 0 waits, briefly, for every rank's goodbye so that none misses its last
// message.
func (g *Group) Close(err error) {
	if g.Err() == nil && err != nil {
		if g.p.Rank != 0 { // rank 0 names this rank as it tells the others
			g.peers[0].send(message{Abort: err.Error()})
		}
		g.fail(fmt.Errorf("%s failed: %w", g.members[g.p.Rank], err))
	}
	if g.p.Rank != 0 && g.Err() == nil {
		close(g.closing)
		g.peers[0].send(message{Bye: true})
	} else if g.Err() == nil {
		timer := time.NewTimer(helloWait)
		defer timer.Stop()
		for _, q := range g.peers[1:] {
			select {
			case <-q.bye:
			case <-q.ended:
			case <-timer.C:
			}
		}
		close(g.closing)
	}
	for _, q := range g.peers {
		if q != nil {
			q.conn.Close()
		}
	}
	g.cancel(context.Canceled)
}
