package main

import (
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gpubench/gpubench/internal/coll"
	"github.com/gpubench/gpubench/internal/input"
	"github.com/gpubench/gpubench/internal/plan"
	"github.com/gpubench/gpubench/internal/results"
	"github.com/gpubench/gpubench/internal/sim"
)

// planFlags are plan's own flags.
type planFlags struct {
	model    string
	setup    plan.Setup
	zero     string
	reserve  string
	measured []string
	top      int
	// The model's sizes, for a model given by flags or to change a preset's or config's.
	layers, hidden, heads, kvHeads, headDim, ffn, vocab, experts, topK, expertFFN, sharedExperts int
}

// newPlanCmd builds `gpubench plan`, which says which parallel layout fits a model on a machine
// and what its communication costs there.
func newPlanCmd(e *env, g *globals) *cobra.Command {
	f := &planFlags{setup: plan.DefaultSetup()}
	cmd := &cobra.Command{
		Use:   "plan --model NAME|config.json",
		Short: "Say which parallel layout fits a model on a machine, and what its communication costs there",
		Long: "plan weighs every layout of TP x CP x PP x DP (and EP for experts) of a model on the machine of\n" +
			"--topology and --nodes: the memory per GPU (weights, gradients, optimizer state, activations,\n" +
			"pipeline buffers, a stated reserve), whether it fits, the collectives each layout issues with\n" +
			"their sizes and the GPUs and links they cross, priced by the simulator or by measured result\n" +
			"files (--measured), the compute from the GPUs' datasheet throughput at --compute-efficiency, the\n" +
			"pipeline bubble and what overlaps; it ranks the layouts that fit and says why the first wins and\n" +
			"the others lose. docs/plan.md states every formula and assumption with its source. A model that\n" +
			"fits nowhere is an answer (exit 0), with the smallest machine of the same nodes that would fit.",
		Example: "  gpubench plan --model llama-3.1-70b --topology dgx-h100 --nodes 4 --seq 8192 --global-batch 512\n" +
			"  gpubench plan --model ./config.json --topology hgx-h200 --nodes 2 --zero 3 --output json\n" +
			"  gpubench plan --layers 32 --hidden 4096 --heads 32 --ffn 11008 --vocab 32000 --topology pcie-4090x8\n" +
			"  gpubench plan --model mixtral-8x7b --nodes 2 --measured allgather.json,reducescatter.json --measured alltoall.log",
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageErr("plan takes no arguments: give the model with --model, e.g. gpubench plan --model llama-3.1-8b")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			return f.run(cmd, e, g)
		},
	}
	fl := cmd.Flags()
	s := &f.setup
	fl.StringVar(&f.model, "model", "", "a preset ("+strings.Join(plan.PresetNames(), ", ")+") or a Hugging Face config.json")
	fl.IntVar(&f.layers, "layers", 0, "the model's layers")
	fl.IntVar(&f.hidden, "hidden", 0, "the model's hidden size")
	fl.IntVar(&f.heads, "heads", 0, "attention heads")
	fl.IntVar(&f.kvHeads, "kv-heads", 0, "key/value heads (grouped-query attention; default: heads)")
	fl.IntVar(&f.headDim, "head-dim", 0, "one head's width (default: hidden / heads)")
	fl.IntVar(&f.ffn, "ffn", 0, "the dense MLP's intermediate size")
	fl.IntVar(&f.vocab, "vocab", 0, "vocabulary size")
	fl.IntVar(&f.experts, "experts", 0, "routed experts (mixture of experts)")
	fl.IntVar(&f.topK, "top-k", 0, "experts each token uses")
	fl.IntVar(&f.expertFFN, "expert-ffn", 0, "one expert's FFN size")
	fl.IntVar(&f.sharedExperts, "shared-experts", 0, "always-on shared experts")
	fl.IntVar(&s.Seq, "seq", s.Seq, "sequence length, tokens")
	fl.IntVar(&s.GlobalBatch, "global-batch", s.GlobalBatch, "sequences per optimizer step")
	fl.IntVar(&s.MicroBatch, "micro-batch", s.MicroBatch, "sequences per micro-batch")
	fl.StringVar(&s.Precision, "precision", s.Precision, "compute precision: "+strings.Join(plan.Precisions, ", "))
	fl.StringVar(&s.Optimizer, "optimizer", s.Optimizer, "optimizer: adam (12 bytes of state a parameter) or sgd (with momentum, 8)")
	fl.StringVar(&f.zero, "zero", "1", "ZeRO stage: 0, 1 (optimizer state sharded over DP), 2 (and gradients), 3 or fsdp (and weights)")
	fl.StringVar(&s.Recompute, "recompute", s.Recompute, "activation recomputation: "+strings.Join(plan.Recomputes, ", "))
	fl.StringVar(&s.Schedule, "schedule", s.Schedule, "pipeline schedule: auto (1F1B and interleaved), 1f1b, interleaved")
	fl.Float64Var(&s.ComputeEfficiency, "compute-efficiency", s.ComputeEfficiency, "fraction of the GPU's peak dense throughput its matrix multiplications reach (model-FLOPs efficiency before communication and bubble)")
	fl.Float64Var(&s.PeakTFLOPS, "peak-tflops", 0, "the GPU's peak dense TFLOPS at --precision, for a GPU gpubench's table lacks")
	fl.StringVar(&f.reserve, "reserve", "", "memory per GPU set aside for the CUDA context, libraries and NCCL (default: 1 GiB + 0.5 GiB a communicator)")
	fl.BoolVar(&s.AllowTPAcrossNodes, "allow-tp-across-nodes", false, "let TP groups span NVLink domains")
	fl.BoolVar(&s.UnevenPP, "uneven-pp", false, "let pipeline stages differ by a layer when PP does not divide the layers")
	fl.IntVar(&s.TP, "tp", 0, "force the tensor-parallel size (0: search)")
	fl.IntVar(&s.PP, "pp", 0, "force the pipeline-parallel size (0: search)")
	fl.IntVar(&s.DP, "dp", 0, "force the data-parallel size (0: search)")
	fl.IntVar(&s.EP, "ep", 0, "force the expert-parallel size (0: search)")
	fl.IntVar(&s.CP, "cp", 0, "force the context-parallel size (0: search)")
	fl.IntVar(&s.VPP, "vpp", 0, "force the model chunks per GPU of the interleaved schedule (0: search)")
	fl.StringSliceVar(&f.measured, "measured", nil, "result files (gpubench JSON, nccl-tests logs) whose curves price their collectives at their ranks instead of the simulator (comma-separated, or repeat the flag)")
	fl.IntVar(&f.top, "top", plan.DefaultTop, "layouts to rank")
	complete(cmd, "model", plan.PresetNames())
	complete(cmd, "precision", plan.Precisions)
	complete(cmd, "recompute", plan.Recomputes)
	complete(cmd, "schedule", plan.Schedules)
	hideShared(cmd, runFlags)
	return cmd
}

func (f *planFlags) run(cmd *cobra.Command, e *env, g *globals) error {
	if err := modelOnly(cmd, g, "plan", "plan prices collectives with the simulator's model of --topology (or --measured files)"); err != nil {
		return err
	}
	if f.top < 1 {
		return usageErr("invalid --top %d: rank at least 1 layout", f.top)
	}
	model, err := f.resolveModel(cmd)
	if err != nil {
		return err
	}
	s := f.setup
	if s.ZeRO, err = plan.ParseZeRO(f.zero); err != nil {
		return usageErr("invalid --%v", err)
	}
	if f.reserve != "" {
		r, err := coll.ParseSize(f.reserve)
		if err != nil {
			return usageErr("invalid --reserve: %v", err)
		}
		s.ReserveBytes = &r
	}
	if err := s.Validate(&model); err != nil {
		return usageErr("invalid --%v", err)
	}
	env := ncclEnv()
	if err := sim.CheckEnv(env); err != nil {
		return usageErr("%v", err)
	}
	t, err := g.loadTopology()
	if err != nil {
		return err
	}
	machine, err := plan.NewMachine(t, s)
	if err != nil {
		return usageErr("%v", err)
	}
	if s.ReserveBytes != nil && *s.ReserveBytes >= machine.MemoryBytes {
		return usageErr("invalid --reserve %s: a GPU of %s has %.1f GiB in all; set aside less", input.Safe(f.reserve), machine.Name, plan.GiBOf(machine.MemoryBytes))
	}
	if err := s.ValidateMachine(machine); err != nil {
		return usageErr("invalid --%v", err)
	}
	if slices.Contains(f.measured, "") {
		return usageErr("invalid --measured: an empty file name (a stray comma?); give result files, comma-separated")
	}
	var curves []plan.Curve
	for _, name := range f.measured {
		file, err := results.ReadFile(name)
		if err != nil {
			return usageErr("invalid --measured: %v", err)
		}
		for _, n := range file.Notices {
			fmt.Fprintf(e.stderr, "gpubench: %s: %s\n", file.Name, n)
		}
		c, err := plan.CurvesFrom(file)
		if err != nil {
			return usageErr("invalid --measured: %v", err)
		}
		curves = append(curves, c...)
	}
	r, err := plan.Plan(plan.Options{Model: model, Setup: s, Machine: machine, Env: env, Curves: curves, Top: f.top})
	if err != nil {
		return usageErr("%v", err)
	}
	unmodelledNotice(e, env)
	if g.output == "json" {
		err = plan.WriteJSON(e.stdout, r)
	} else {
		err = plan.WriteText(e.stdout, r)
	}
	if err != nil {
		return runtimeErr(fmt.Errorf("writing the plan: stdout: %w", err))
	}
	return nil
}

// resolveModel is --model (a preset or a config.json) with the size flags given over it, or the
// size flags alone.
func (f *planFlags) resolveModel(cmd *cobra.Command) (plan.Model, error) {
	var m plan.Model
	switch {
	case f.model == "":
		m.Name = "custom"
		for _, need := range []string{"layers", "hidden", "heads", "vocab"} {
			if !cmd.Flags().Changed(need) {
				return m, usageErr("plan needs --model (a preset: %s; or a config.json), or the model's sizes: --%s is missing", strings.Join(plan.PresetNames(), ", "), need)
			}
		}
		m.Gated = true // the flags describe a Llama-like model: SwiGLU, rotary positions, untied
	default:
		if p, ok := plan.Preset(f.model); ok {
			m = p
			break
		}
		if _, err := os.Stat(f.model); err != nil && !strings.ContainsAny(f.model, "/\\") && !strings.HasSuffix(f.model, ".json") {
			return m, usageErr("unknown --model %q: use a preset (%s) or a config.json's path", f.model, strings.Join(plan.PresetNames(), ", "))
		}
		data, err := input.ReadFile(f.model, plan.ConfigLimit)
		if err != nil {
			return m, usageErr("invalid --model: %v", err)
		}
		if m, err = plan.ParseConfig(input.Safe(f.model), data); err != nil {
			return m, usageErr("invalid --model: %s", strings.TrimPrefix(err.Error(), plan.ErrConfig.Error()+": "))
		}
	}
	for _, o := range []struct {
		flag string
		from int
		to   *int
	}{{"layers", f.layers, &m.Layers}, {"hidden", f.hidden, &m.Hidden}, {"heads", f.heads, &m.Heads}, {"kv-heads", f.kvHeads, &m.KVHeads},
		{"head-dim", f.headDim, &m.HeadDim}, {"ffn", f.ffn, &m.FFN}, {"vocab", f.vocab, &m.Vocab}, {"experts", f.experts, &m.Experts},
		{"top-k", f.topK, &m.TopK}, {"expert-ffn", f.expertFFN, &m.ExpertFFN}, {"shared-experts", f.sharedExperts, &m.SharedExperts}} {
		if cmd.Flags().Changed(o.flag) {
			*o.to = o.from
			if o.flag == "hidden" || o.flag == "heads" {
				m.HeadDim = f.headDim // derived again unless given
			}
		}
	}
	if err := m.Validate(); err != nil {
		var cfg bool
		if f.model != "" {
			_, preset := plan.Preset(f.model)
			cfg = !preset
		}
		if cfg && !anyChanged(cmd, "layers", "hidden", "heads", "kv-heads", "head-dim", "ffn", "vocab", "experts", "top-k", "expert-ffn", "shared-experts") {
			return m, usageErr("invalid --model %s: %v", f.model, err)
		}
		return m, usageErr("invalid --%v", err)
	}
	return m, nil
}

func anyChanged(cmd *cobra.Command, flags ...string) bool {
	for _, f := range flags {
		if cmd.Flags().Changed(f) {
			return true
		}
	}
	return false
}
