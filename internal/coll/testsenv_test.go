package coll

import (
	"strconv"
	"strings"
	"testing"

	"github.com/gpubench/gpubench/internal/input"
)

// FuzzTestsEnv gives nccl-tests' variables any values: NCCL_TESTS_SPLIT, NCCL_TESTS_SPLIT_MASK
// and NCCL_TESTS_DEVICE, when not empty, are refused by name; NCCL_TESTS_MIN_BW is read as the
// number it holds, from 0 to 1e9 GB/s, or refused with its value quoted. Every refusal is one
// line of plain text.
func FuzzTestsEnv(f *testing.F) {
	f.Add("300", true, "", "", "")
	f.Add(" 1e9 ", true, "", "", "")
	f.Add("NaN", true, "", "", "")
	f.Add("-1", true, "", "", "")
	f.Add("a\nb", true, "", "", "")
	f.Add("\ufffd", true, "", "", "") // text, which %q prints as it is
	f.Add("", true, "", "", "")
	f.Add("1", false, "AND", "", "")
	f.Add("1", true, "", "0x7", "")
	f.Add("", false, "", "", "1\x1b[2J")
	f.Fuzz(func(t *testing.T, minBW string, setMin bool, split, mask, device string) {
		vars := []string{"NCCL_TESTS_SPLIT", "NCCL_TESTS_SPLIT_MASK", "NCCL_TESTS_DEVICE"}
		env := map[string]string{}
		for i, v := range []string{split, mask, device} {
			env[vars[i]] = v
		}
		if setMin {
			env["NCCL_TESTS_MIN_BW"] = minBW
		}
		bw, err := TestsEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
		refused := ""
		for i, v := range []string{split, mask, device} {
			if v != "" && refused == "" {
				refused = vars[i]
			}
		}
		if err != nil {
			if _, bad := input.Unsafe(err.Error()); bad {
				t.Fatalf("error %q is not one line of plain text", err)
			}
			switch {
			case refused != "" && !strings.HasPrefix(err.Error(), refused+"="):
				t.Fatalf("error %q does not name %s", err, refused)
			case refused == "" && !strings.Contains(err.Error(), "NCCL_TESTS_MIN_BW="+strconv.Quote(minBW)):
				t.Fatalf("error %q does not quote NCCL_TESTS_MIN_BW=%q", err, minBW)
			}
			return
		}
		switch want, perr := strconv.ParseFloat(strings.TrimSpace(minBW), 64); {
		case refused != "":
			t.Fatalf("%s accepted", refused)
		case !setMin && bw != nil:
			t.Fatalf("NCCL_TESTS_MIN_BW unset gave %v", *bw)
		case setMin && (bw == nil || perr != nil || *bw != want || !(*bw >= 0 && *bw <= 1e9)):
			t.Fatalf("NCCL_TESTS_MIN_BW=%q gave %v", minBW, bw)
		}
	})
}
