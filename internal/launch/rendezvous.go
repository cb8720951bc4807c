package launch

import (
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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
	// Run says what the rank will run: the command and every option that shapes its calls or its
	// data, as fields separated by "; ". Ranks that would run different things are refused before
	// they start, and the refusal names the fields that differ.
	Run string `json:"run"`
}

func (m Member) String() string { return fmt.Sprintf("rank %d (%s, pid %d)", m.Rank, m.Host, m.PID) }

// The rendezvous speaks JSON, one message per line, over one TCP connection from every rank to
// rank 0, which stays open for the whole run: a rank whose connection drops has left. Rank 0
// speaks first, with a fresh challenge; a rank answers with its hello and a proof that it holds
// the run's key (an HMAC of the challenge), so the key itself never crosses the network.
type message struct {
	Challenge []byte      `json:"challenge,omitempty"`
	Hello     *hello      `json:"hello,omitempty"`
	Welcome   *welcome    `json:"welcome,omitempty"`
	Gather    bool        `json:"gather,omitempty"` // Seq and Vals, or Seq and All from rank 0
	Seq       int         `json:"seq,omitempty"`
	Vals      []float64   `json:"vals,omitempty"`
	All       [][]float64 `json:"all,omitempty"`
	Abort     string      `json:"abort,omitempty"`
	Config    bool        `json:"config,omitempty"` // the abort is a configuration error
	Kind      string      `json:"kind,omitempty"`   // or an interruption or a hang (kindOf)
	Bye       bool        `json:"bye,omitempty"`
}

type hello struct {
	Member
	Size  int    `json:"size"`
	Proof []byte `json:"proof"` // prove(key, challenge)
}

type welcome struct {
	Members []Member `json:"members"`
	ID      []byte   `json:"id"`
}

// prove is what a rank holding key answers to rank 0's challenge.
func prove(key string, challenge []byte) []byte {
	mac := hmac.New(sha256.New, []byte(key))
	mac.Write([]byte("gpubench rendezvous\x00"))
	mac.Write(challenge)
	return mac.Sum(nil)
}

// Keepalives find a rank whose host vanished (no FIN, no RST) in about 20 s.
var keepAlive = net.KeepAliveConfig{Enable: true, Idle: 5 * time.Second, Interval: 5 * time.Second, Count: 3}

// helloWait bounds how long a rank waits for rank 0's first word on a connection, and every write.
const helloWait = 10 * time.Second

// handshakeWait bounds how long rank 0 waits for a connection to say who it is: one that says
// nothing is dropped, without delaying anyone else.
const handshakeWait = 5 * time.Second

// maxHello bounds what rank 0 reads from a connection before it has proved the run's key.
const maxHello = 64 << 10

// Group is this process's place among the processes of a run.
type Group struct {
	p       Process
	addr    string
	ln      net.Listener // rank 0: a listener already open at addr (tests); nil to open one
	members []Member
	id      []byte
	ctx     context.Context
	cancel  context.CancelCauseFunc
	seq     int
	// Rank 0 has a peer per other rank (peers[0] is nil); every other rank has one, rank 0.
	peers    []*peer
	failOnce sync.Once
	ended    atomic.Bool   // fail has run: a failure, this process's or another's, ended the group
	closing  chan struct{} // this process is saying goodbye: a dropped connection is expected
	// After KeepGoing, rank 0 sets aside a rank that leaves or stops answering (gone, why) instead
	// of ending the group.
	mu   sync.Mutex
	keep time.Duration
	gone map[int]string
}

type peer struct {
	m     Member
	conn  net.Conn
	r     *budget
	mu    sync.Mutex // writes
	dec   *json.Decoder
	in    chan message  // gathers
	bye   chan struct{} // closed when the peer says goodbye
	ended chan struct{} // closed when its reader stops
}

func newPeer(m Member, conn net.Conn) *peer {
	r := &budget{r: conn, n: -1}
	return &peer{m: m, conn: conn, r: r, dec: json.NewDecoder(r), in: make(chan message, 1),
		bye: make(chan struct{}), ended: make(chan struct{})}
}

func (p *peer) send(m message) error {
	msg, err := encode(m)
	if err != nil {
		return err
	}
	return p.write(msg)
}

// encode is m as a peer reads it: its JSON and a newline, what a json.Encoder writes.
func encode(m message) ([]byte, error) {
	msg, err := json.Marshal(m)
	return append(msg, '\n'), err
}

// write sends a message already encoded: rank 0 encodes a gathering's figures once for every
// rank.
func (p *peer) write(msg []byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.conn.SetWriteDeadline(time.Now().Add(helloWait)); err != nil {
		return err
	}
	_, err := p.conn.Write(msg)
	return err
}

// budget reads at most n more bytes from r, or without limit when n is negative.
type budget struct {
	r io.Reader
	n int64
}

var errTooLong = errors.New("more than a hello before proving the run's key")

func (b *budget) Read(p []byte) (int, error) {
	if b.n < 0 {
		return b.r.Read(p)
	}
	if b.n == 0 {
		return 0, errTooLong
	}
	if int64(len(p)) > b.n {
		p = p[:b.n]
	}
	n, err := b.r.Read(p)
	b.n -= int64(n)
	return n, err
}

// Join meets the other processes at addr: rank 0 listens there and waits, up to timeout, for
// every other rank, then calls newID and hands its result and every rank's Member to all. The
// group's context ends, with the reason as its cause, when any rank fails or leaves.
func Join(ctx context.Context, p Process, addr string, timeout time.Duration, me Member, newID func() ([]byte, error)) (*Group, error) {
	return join(ctx, p, addr, nil, timeout, me, newID)
}

// join is Join; rank 0 uses ln when it is not nil, instead of listening at addr itself.
func join(ctx context.Context, p Process, addr string, ln net.Listener, timeout time.Duration, me Member, newID func() ([]byte, error)) (*Group, error) {
	me.Rank = p.Rank
	gctx, cancel := context.WithCancelCause(ctx)
	g := &Group{p: p, addr: addr, ln: ln, ctx: gctx, cancel: cancel, closing: make(chan struct{})}
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

// refusalLinger is how long rank 0, having refused a launch, waits for the ranks that may still
// be starting (of a larger world, or those whose places the refused ranks took in the count), to
// refuse them too.
const refusalLinger = 2 * time.Second

// arrival is a connection that proved the run's key, and what it said.
type arrival struct {
	q *peer
	h *hello
}

// listen opens rank 0's side of the rendezvous: every interface, at addr's port.
func (g *Group) listen() (net.Listener, error) {
	if g.ln != nil {
		return g.ln, nil
	}
	_, port, err := net.SplitHostPort(g.addr)
	if err != nil {
		return nil, configErr("rendezvous address %q: %v; use HOST:PORT", g.addr, err)
	}
	lc := net.ListenConfig{KeepAliveConfig: keepAlive}
	ln, err := lc.Listen(g.ctx, "tcp", ":"+port)
	switch {
	case errors.Is(err, syscall.EADDRINUSE):
		return nil, configErr("rank 0 cannot listen on port %s for the rendezvous: it is in use on this host; choose a free MASTER_PORT, or --rendezvous HOST:PORT", port)
	case err != nil:
		return nil, fmt.Errorf("rank 0 cannot listen on port %s for the rendezvous: %w", port, err)
	}
	return ln, nil
}

// serve is rank 0's side of Join. Every connection is greeted on its own, so that one that says
// nothing delays no one; one that does not prove the run's key is dropped. A rank that proves it
// but does not fit (another world size, a rank taken twice, another command or options) is a
// configuration error, which rank 0 tells every rank once as many have arrived as the world has
// (or the timeout ends), so that every rank hears it, whatever order they came in.
func (g *Group) serve(me Member, timeout time.Duration, newID func() ([]byte, error)) error {
	ln, err := g.listen()
	if err != nil {
		return err
	}
	defer ln.Close()
	done := make(chan struct{})
	defer close(done)
	arrivals := make(chan arrival)
	acceptErr := make(chan error, 1)
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				acceptErr <- err
				return
			}
			go g.greet(conn, arrivals, done)
		}
	}()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	g.peers = make([]*peer, g.p.Size)
	var refused []*peer // proved the key, but do not fit
	var refusal error   // the first of those
	// Refusing waits for as many processes as the smallest world any of them claims; then, for a
	// moment, tells those still on their way (of a larger world, or one for each refused process
	// that took another rank's place in the count: a rank claimed twice, or one outside the
	// world, leaves a rank still to come), rather than leave them to wait out their timeout on a
	// rendezvous that is gone.
	want, came, most, displaced := g.p.Size, 1, g.p.Size, 0
	abort := func(err error) error {
		for _, q := range append(g.peers, refused...) {
			if q != nil {
				q.send(abortMsg(err))
			}
		}
		for _, q := range refused {
			q.conn.Close()
		}
		return err
	}
	for ; came < want; came++ {
		var a arrival
		select {
		case a = <-arrivals:
		case err := <-acceptErr:
			return abort(fmt.Errorf("rank 0 stopped accepting ranks at %s: %w", g.addr, err))
		case <-g.ctx.Done():
			return abort(context.Cause(g.ctx))
		case <-timer.C:
			if refusal != nil {
				return abort(refusal)
			}
			var missing []string
			for r, q := range g.peers {
				if r > 0 && q == nil {
					missing = append(missing, strconv.Itoa(r))
				}
			}
			return abort(fmt.Errorf("rank %s did not reach the rendezvous at %s within %v: check that every process started, with MASTER_ADDR and MASTER_PORT (or --rendezvous) naming rank 0's host and a port it can reach, and the same run key",
				strings.Join(missing, ","), g.addr, timeout))
		}
		a.q.m = a.h.Member
		if err := g.fits(me, a.h); err != nil {
			refusal = cmp.Or(refusal, err)
			refused = append(refused, a.q)
			if a.h.Size == g.p.Size && (a.h.Rank <= 0 || a.h.Rank >= g.p.Size || g.peers[a.h.Rank] != nil) {
				displaced++
			}
			if a.h.Size > 0 {
				want, most = min(want, a.h.Size), max(most, a.h.Size)
			}
			continue
		}
		g.peers[a.h.Rank] = a.q
	}
	if refusal != nil {
		err := abort(refusal)
		linger := time.NewTimer(refusalLinger)
		defer linger.Stop()
		for ; came < most+displaced; came++ {
			select {
			case a := <-arrivals:
				a.q.send(abortMsg(err))
				a.q.conn.Close()
			case <-linger.C:
				return err
			case <-timer.C:
				return err
			case <-g.ctx.Done():
				return err
			}
		}
		return err
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

// fits says why a rank that proved the run's key cannot join rank 0's world, or nil.
func (g *Group) fits(me Member, h *hello) error {
	who := h.Member.String()
	switch {
	case h.Size != g.p.Size:
		return configErr("%s was started with a world of %d ranks, rank 0 with %d: start every process with the same world size", who, h.Size, g.p.Size)
	case h.Rank <= 0 || h.Rank >= g.p.Size:
		other := fmt.Sprintf("rank 0 (%s, pid %d)", me.Host, me.PID)
		if h.Rank > 0 {
			other = "the world's ranks 0-" + strconv.Itoa(g.p.Size-1)
		}
		return configErr("%s does not fit beside %s: give every process its own rank", who, other)
	case h.Run != me.Run:
		theirs, ours := runDiff(h.Run, me.Run)
		return configErr("%s was started with %s, rank 0 with %s: start every process with the same command and options", who, theirs, ours)
	case g.peers[h.Rank] != nil:
		return configErr("rank %d is claimed by two processes, %s and %s: give every process its own rank",
			h.Rank, g.peers[h.Rank].m.String(), who)
	}
	return nil
}

// runDiff returns the fields of two Run strings that differ, or both whole when their fields do
// not line up.
func runDiff(a, b string) (string, string) {
	fa, fb := strings.Split(a, "; "), strings.Split(b, "; ")
	if len(fa) != len(fb) {
		return strconv.Quote(a), strconv.Quote(b)
	}
	var da, db []string
	for i := range fa {
		if fa[i] != fb[i] {
			da, db = append(da, fa[i]), append(db, fb[i])
		}
	}
	return strings.Join(da, ", "), strings.Join(db, ", ")
}

// greet challenges one connection to rank 0 and hands it on once it has proved the run's key. A
// connection that says nothing in time, or not a hello, is closed; one with another key is told
// only that it reached another run, and closed.
func (g *Group) greet(conn net.Conn, arrivals chan<- arrival, done <-chan struct{}) {
	q := newPeer(Member{}, conn)
	challenge := make([]byte, 32)
	rand.Read(challenge)
	q.r.n = maxHello
	var m message
	err := conn.SetDeadline(time.Now().Add(handshakeWait))
	if err == nil {
		var msg []byte
		if msg, err = encode(message{Challenge: challenge}); err == nil {
			_, err = conn.Write(msg)
		}
	}
	if err == nil {
		err = q.dec.Decode(&m)
	}
	if err == nil {
		err = conn.SetDeadline(time.Time{})
	}
	if err != nil || m.Hello == nil { // not a gpubench rank
		conn.Close()
		return
	}
	if !hmac.Equal(m.Hello.Proof, prove(g.p.key, challenge)) {
		q.send(message{Abort: fmt.Sprintf("%s reached the rendezvous at %s of another run (its run key differs): give each run its own MASTER_PORT, and every rank of one run the same launcher job or run key (--run-key, GPUBENCH_RUN_KEY)",
			m.Hello.Member, g.addr), Config: true})
		conn.Close()
		return
	}
	q.r.n = -1
	select {
	case arrivals <- arrival{q: q, h: m.Hello}:
	case <-done:
		conn.Close()
	}
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
	stop := context.AfterFunc(g.ctx, func() { conn.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	var m message
	err := conn.SetReadDeadline(time.Now().Add(helloWait))
	if err == nil {
		err = q.dec.Decode(&m)
	}
	switch {
	case g.ctx.Err() != nil:
		return context.Cause(g.ctx)
	case err != nil:
		return fmt.Errorf("rank 0 at %s did not begin the rendezvous with rank %d: %w", g.addr, me.Rank, err)
	case m.Challenge == nil:
		return configErr("what listens at %s is not gpubench's rank 0: choose a free MASTER_PORT, or --rendezvous HOST:PORT", g.addr)
	}
	if err := q.send(message{Hello: &hello{Member: me, Size: g.p.Size, Proof: prove(g.p.key, m.Challenge)}}); err != nil {
		return fmt.Errorf("saying hello at the rendezvous at %s: %w", g.addr, err)
	}
	// Rank 0, up now, waits at most the timeout for the others; the grace lets its word on who is
	// missing arrive first.
	m = message{}
	err = conn.SetReadDeadline(time.Now().Add(timeout + helloWait))
	if err == nil {
		err = q.dec.Decode(&m)
	}
	if err == nil {
		err = conn.SetReadDeadline(time.Time{})
	}
	switch {
	case g.ctx.Err() != nil:
		return context.Cause(g.ctx)
	case err != nil:
		return fmt.Errorf("rank 0 did not start the run within %v of rank %d reaching the rendezvous at %s: %w", timeout, me.Rank, g.addr, err)
	case m.Abort != "":
		return abortErr(m, m.Abort)
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
				if !errors.Is(err, net.ErrClosed) && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
					why += " (" + err.Error() + ")"
				}
				if !g.setAside(q, why) {
					g.fail(fmt.Errorf("%s left the run: %s", q.m, why))
				}
			}
			return
		case m.Abort != "":
			if g.p.Rank == 0 {
				if !g.setAside(q, "it failed: "+m.Abort) {
					g.fail(abortErr(m, fmt.Sprintf("%s %s: %s", q.m, endedBy(m.Kind), m.Abort)))
				}
			} else {
				g.fail(abortErr(m, m.Abort))
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
		g.ended.Store(true)
		if g.p.Rank == 0 {
			for _, q := range g.peers[1:] {
				q.send(abortMsg(err))
			}
		}
		g.cancel(err)
	})
}

// What ended a rank's run, beyond its words: every rank exits as the one that failed did, with
// the exit code of an interruption or a hang, not of another failure.
const (
	kindInterrupted = "interrupted"
	kindHang        = "hang"
)

func kindOf(err error) string {
	var hang *gpu.HangError
	switch {
	case errors.As(err, &hang):
		return kindHang
	case errors.Is(err, context.Canceled):
		return kindInterrupted
	}
	return ""
}

// endedBy says how a rank's run ended, after its name.
func endedBy(kind string) string {
	if kind == kindInterrupted {
		return "was stopped"
	}
	return "failed"
}

func abortMsg(err error) message {
	return message{Abort: err.Error(), Config: errors.Is(err, ErrConfig), Kind: kindOf(err)}
}

// abortErr is another rank's failure as this process heard it (m), told as msg, of the same
// class as the error it stands for.
func abortErr(m message, msg string) error {
	switch {
	case m.Config:
		return configErr("%s", strings.TrimPrefix(msg, ErrConfig.Error()+": "))
	case m.Kind == kindInterrupted:
		return &remoteErr{msg, context.Canceled}
	case m.Kind == kindHang:
		return &remoteErr{msg, &gpu.HangError{Err: errors.New(msg)}}
	}
	return errors.New(msg)
}

// remoteErr is another rank's failure: its words, and the class of its error.
type remoteErr struct {
	msg   string
	class error
}

func (e *remoteErr) Error() string { return e.msg }
func (e *remoteErr) Unwrap() error { return e.class }

// KeepGoing makes rank 0 carry on without a rank that leaves the run (its process exits, fails
// or loses its connection) or that has not reached a step of AllGather wait after rank 0 did:
// that rank is set aside (Gone says why), its figures are nil in every later AllGather, and the
// others go on. Rank 0 leaving still ends the run for all: it is where the figures meet. Calling
// it again changes the wait for the steps after; on ranks other than 0 it does nothing.
func (g *Group) KeepGoing(wait time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.p.Rank == 0 {
		g.keep = wait
		if g.gone == nil {
			g.gone = map[int]string{}
		}
	}
}

// Gone says, by rank, why KeepGoing set each rank aside.
func (g *Group) Gone() map[int]string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return maps.Clone(g.gone)
}

// setAside sets q's rank aside with why, closing its connection, when KeepGoing allows it.
func (g *Group) setAside(q *peer, why string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.keep == 0 {
		return false
	}
	if _, ok := g.gone[q.m.Rank]; !ok {
		g.gone[q.m.Rank] = why
		go func() { // if it is still there to hear, without holding up the others
			q.send(message{Abort: fmt.Sprintf("rank 0 went on without %s: %s", q.m, why)})
			q.conn.Close()
		}()
	}
	return true
}

func (g *Group) isGone(q *peer) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	_, ok := g.gone[q.m.Rank]
	return ok
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

// AllGather sends vals to rank 0 and returns every rank's, in rank order (coll.Group). When ctx
// passes its deadline, rank 0 returns a *gpu.HangError naming the ranks it still awaits.
func (g *Group) AllGather(ctx context.Context, vals []float64) ([][]float64, error) {
	g.seq++
	wait := func(q *peer) (message, error) {
		var m message
		select {
		case m = <-q.in:
		case <-g.ctx.Done():
			// A peer's reader hands on its messages in order: one that came before the failure
			// is waiting already, and this step did end on every rank.
			select {
			case m = <-q.in:
			default:
				return message{}, context.Cause(g.ctx)
			}
		case <-ctx.Done():
			if g.ctx.Err() != nil {
				return message{}, context.Cause(g.ctx)
			}
			return message{}, ctx.Err()
		}
		if m.Seq != g.seq {
			return m, fmt.Errorf("%s is at step %d of the run, this process at %d", q.m, m.Seq, g.seq)
		}
		return m, nil
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
	g.mu.Lock()
	keep := g.keep
	g.mu.Unlock()
	var late <-chan struct{} // closed once the step's wait is over, for every rank still awaited
	if keep > 0 {
		lctx, cancel := context.WithTimeout(context.Background(), keep)
		defer cancel()
		late = lctx.Done()
	}
	for r, q := range g.peers[1:] {
		var m message
		var err error
		if keep > 0 { // a rank set aside, or one that leaves or is late now, is left out
			if m, err = g.waitKept(ctx, q, late, keep); err == nil && m.Seq == 0 {
				continue
			}
		} else {
			m, err = wait(q)
		}
		if err != nil && errors.Is(err, context.DeadlineExceeded) && g.ctx.Err() == nil {
			// The caller's timeout: a rank that is not here yet is hung (a stopped process
			// answers the network but never comes).
			hung := []int{q.m.Rank}
			for _, o := range g.peers[r+2:] {
				if len(o.in) == 0 {
					hung = append(hung, o.m.Rank)
				}
			}
			return nil, &gpu.HangError{Ranks: hung, Err: err}
		}
		if err != nil {
			return nil, err
		}
		if len(m.Vals) != len(vals) {
			return nil, g.failed(fmt.Errorf("%s sent %d figures where rank 0 sent %d: the ranks are not running the same thing", q.m, len(m.Vals), len(vals)))
		}
		all[r+1] = m.Vals
	}
	msg, err := encode(message{Gather: true, Seq: g.seq, All: all})
	if err != nil { // figures JSON cannot hold (NaN, ±Inf): the ranks' own fault, not a peer's
		return nil, g.failed(fmt.Errorf("the ranks' figures cannot be sent: %w", err))
	}
	for _, q := range g.peers[1:] {
		if g.isGone(q) {
			continue
		}
		if err := q.write(msg); err != nil && !g.setAside(q, "it could not be reached: "+err.Error()) {
			return nil, g.failed(fmt.Errorf("%s left the run: %w", q.m, err))
		}
	}
	return all, nil
}

// waitKept is rank 0's wait for q's part of this step after KeepGoing: its message, or a
// message of Seq 0 when q is set aside (already, or now, for leaving or for being late).
func (g *Group) waitKept(ctx context.Context, q *peer, late <-chan struct{}, keep time.Duration) (message, error) {
	if g.isGone(q) {
		return message{}, nil
	}
	var m message
	why := ""
	select {
	case m = <-q.in: // a part already here is taken, however late the step
	default:
		select {
		case m = <-q.in:
		case <-q.ended:
			select {
			case m = <-q.in: // its last words came before it left
			default:
				why = fmt.Sprintf("it left the run before its part of step %d", g.seq)
			}
		case <-late:
			why = fmt.Sprintf("it did not reach step %d of the run within %v of rank 0", g.seq, keep)
		case <-g.ctx.Done():
			return m, context.Cause(g.ctx)
		case <-ctx.Done():
			return m, ctx.Err()
		}
	}
	if why != "" {
		g.setAside(q, why)
		return message{}, nil
	}
	if m.Seq != g.seq {
		return m, g.failed(fmt.Errorf("%s is at step %d of the run, this process at %d", q.m, m.Seq, g.seq))
	}
	return m, nil
}

// failed ends the group with err unless it has already ended, and returns the cause.
func (g *Group) failed(err error) error {
	g.fail(err)
	return context.Cause(g.ctx)
}

// Close leaves the group. After a failure of this process's own (err), an interruption among
// them, the others are told at once; otherwise rank 0 waits, briefly, for every rank's goodbye so
// that none misses its last message.
func (g *Group) Close(err error) {
	if err != nil && !g.ended.Load() { // not another rank's failure, heard here
		if g.p.Rank != 0 { // rank 0 names this rank as it tells the others
			g.peers[0].send(abortMsg(err))
		}
		g.fail(fmt.Errorf("%s %s: %w", g.members[g.p.Rank], endedBy(kindOf(err)), err))
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
