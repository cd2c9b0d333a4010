package sidecar

import (
	"fmt"

	"github.com/ctxmem/ctxmemd/sidecar/msg"
)

// knobs are the host's live policy knobs, as the core reports them, for
// reports.
func (a *Agent) knobs() msg.Knobs {
	lim := a.store.G2Limits()
	hk := a.store.HeatKnobs()
	return msg.Knobs{DRAMHigh: lim.High, DRAMLow: lim.Low, ColdThreshold: hk.Cold, WarmThreshold: hk.Warm}
}

// applyKnobs carries out a set_knobs command on the core: zero fields keep
// their value. Errors: the core's refusal (tiering.ErrInvalid) of values
// out of range; G2 limits are applied before heat thresholds, so a refused
// threshold leaves valid new limits in place (both are logged).
func (a *Agent) applyKnobs(k msg.Knobs) error {
	if k.DRAMHigh != 0 || k.DRAMLow != 0 {
		lim := a.store.G2Limits()
		if k.DRAMHigh != 0 {
			lim.High = k.DRAMHigh
		}
		if k.DRAMLow != 0 {
			lim.Low = k.DRAMLow
		}
		if err := a.store.SetG2Limits(lim); err != nil {
			return err
		}
	}
	if k.ColdThreshold != 0 || k.WarmThreshold != 0 {
		hk := a.store.HeatKnobs()
		if k.ColdThreshold != 0 {
			hk.Cold = k.ColdThreshold
		}
		if k.WarmThreshold != 0 {
			hk.Warm = k.WarmThreshold
		}
		if err := a.store.SetHeatKnobs(hk); err != nil {
			return err
		}
	}
	a.log.Info("policy knobs set by the scheduler", "knobs", fmt.Sprintf("%+v", k))
	return nil
}
