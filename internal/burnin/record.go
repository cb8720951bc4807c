package burnin

import (
	"encoding/json"
	"errors"
	"io"
	"sync"
	"syscall"
	"time"
)

// Record is one line of the results stream: "start" first, then "result" per measured row and
// "event" per telemetry event as they come, and "verdict" and "end" last.
type Record struct {
	Record string `json:"record"`
	// T is the burn-in clock when the record was made, in seconds since the start.
	T float64 `json:"t_seconds"`

	// start
	Version   string     `json:"gpubench_version,omitempty"`
	Backend   string     `json:"backend,omitempty"`
	Topology  string     `json:"topology,omitempty"`
	StartTime *time.Time `json:"start_time,omitempty"`
	Planned   float64    `json:"duration_seconds,omitempty"`
	Devices   []Device   `json:"devices,omitempty"`

	// result
	Kind       string   `json:"kind,omitempty"` // collective, p2p
	Pass       int      `json:"pass,omitempty"`
	Collective string   `json:"collective,omitempty"`
	Size       int64    `json:"size_bytes,omitempty"`
	Type       string   `json:"type,omitempty"`
	TimeUS     *float64 `json:"time_us,omitempty"`
	AlgBW      *float64 `json:"algbw_gbs,omitempty"`
	BusBW      *float64 `json:"busbw_gbs,omitempty"`
	Wrong      *int64   `json:"wrong,omitempty"`
	InPlaceBW  *float64 `json:"in_place_busbw_gbs,omitempty"`
	InWrong    *int64   `json:"in_place_wrong,omitempty"`
	Src        *int     `json:"src,omitempty"`
	Dst        *int     `json:"dst,omitempty"`
	GBs        *float64 `json:"gbs,omitempty"`
	Mismatched *int     `json:"mismatched,omitempty"`
	Floor      *float64 `json:"floor_gbs,omitempty"`

	// event
	GPU *int `json:"gpu,omitempty"`
	XID int  `json:"xid,omitempty"`

	// verdict
	Checks  []Check `json:"checks,omitempty"`
	Verdict string  `json:"verdict,omitempty"`

	// end
	Elapsed     float64    `json:"elapsed_seconds,omitempty"`
	Passes      int        `json:"passes,omitempty"`
	EndTime     *time.Time `json:"end_time,omitempty"`
	Interrupted bool       `json:"interrupted,omitempty"`
	Error       string     `json:"error,omitempty"`
}

// Device is one GPU the burn-in ran on.
type Device struct {
	Index    int    `json:"gpu"`
	Name     string `json:"name"`
	PCIBusID string `json:"pci_bus_id"`
	UUID     string `json:"uuid,omitempty"`
}

// Stream writes records as JSON lines, one Write per line, so that whatever was written before a
// crash is whole. It is safe for concurrent use.
type Stream struct {
	mu  sync.Mutex
	w   io.Writer
	err error
}

// NewStream writes to w.
func NewStream(w io.Writer) *Stream { return &Stream{w: w} }

// Write writes one record and returns the stream's first error: once a write has failed (a full
// disk), nothing more is written. The verdict and end records are synced to disk, where the
// writer can be (a pipe or a device cannot, and need not).
func (s *Stream) Write(r Record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	line, err := json.Marshal(r)
	if err == nil {
		_, err = s.w.Write(append(line, '\n'))
	}
	if err == nil {
		if f, ok := s.w.(interface{ Sync() error }); ok && (r.Record == "verdict" || r.Record == "end") {
			if err = f.Sync(); errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOTSUP) {
				err = nil
			}
		}
	}
	s.err = err
	return err
}

// Err is the first write error.
func (s *Stream) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

func ptr[T any](v T) *T { return &v }
