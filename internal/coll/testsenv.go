package coll

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/gpubench/gpubench/internal/input"
)

// TestsEnv reads, through lookup (os.LookupEnv), the variables nccl-tests' programs read:
// NCCL_TESTS_MIN_BW, the average bus bandwidth (GB/s) under 0.9 of which the run fails, as
// nccl-tests fails it (nil when unset); and refuses those that shape a run in ways gpubench does
// not (NCCL_TESTS_SPLIT and NCCL_TESTS_SPLIT_MASK split the ranks into communicators,
// NCCL_TESTS_DEVICE offsets the GPUs).
func TestsEnv(lookup func(string) (string, bool)) (*float64, error) {
	for _, k := range []string{"NCCL_TESTS_SPLIT", "NCCL_TESTS_SPLIT_MASK", "NCCL_TESTS_DEVICE"} {
		if v, _ := lookup(k); v != "" {
			return nil, fmt.Errorf("%s=%s asks for what gpubench does not do (nccl-tests' split communicators or device offset): unset it", k, input.Safe(v))
		}
	}
	v, ok := lookup("NCCL_TESTS_MIN_BW")
	if !ok {
		return nil, nil
	}
	bw, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	if err != nil || !(bw >= 0 && bw <= 1e9) {
		return nil, fmt.Errorf("invalid NCCL_TESTS_MIN_BW=%q: give the average bus bandwidth in GB/s the run must reach (it fails under 0.9 of it), e.g. 300", v) // %q escapes control characters itself
	}
	return &bw, nil
}
