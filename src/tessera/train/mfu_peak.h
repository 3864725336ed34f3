// The peak FLOP/s that MFU and HFU divide by, kept honest while a run goes on. A calibration is a
// snapshot of the machine at start-up; on a VM whose cores it shares, the machine's speed moves
// (the 2-vCPU development VMs ran 1.4x faster a few minutes after start-up than while calibrating,
// and the main job logged an MFU of 140 %). A step that executes more FLOP/s than the peak proves
// the peak stale: the tracker calibrates again and takes the larger of the old peak, the new
// calibration and the step's own rate, so that MFU and HFU stay fractions of what the machine has
// shown it can do. A peak the user gave (device_peak_tflops) is never changed; a step that beats it
// is reported once.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace tessera::train {

class MfuPeak {
 public:
  // `calibrate` measures the peak again (FLOP/s); null for a peak the user gave.
  MfuPeak(double flops, std::function<double()> calibrate);

  double flops() const { return flops_; }

  // After step `step` executed `rate` FLOP/s: raises the peak where the rate beats it. Returns the
  // line to log (with its newline) when the peak moved or, for a given peak, the first time a step
  // beat it; empty otherwise.
  std::string observe(int64_t step, double rate);

 private:
  double flops_;
  std::function<double()> calibrate_;
  bool reported_given_ = false;
};

}  // namespace tessera::train
