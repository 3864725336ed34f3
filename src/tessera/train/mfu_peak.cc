#include "tessera/train/mfu_peak.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <utility>

namespace tessera::train {

MfuPeak::MfuPeak(double flops, std::function<double()> calibrate)
    : flops_(flops), calibrate_(std::move(calibrate)) {}

std::string MfuPeak::observe(int64_t step, double rate) {
  if (!std::isfinite(rate) || !(rate > flops_)) return {};  // a zero-length step's rate says nothing
  if (!calibrate_) {
    if (reported_given_) return {};
    reported_given_ = true;
    return fmt::format(
        "peak: step {} executed {:.1f} GFLOP/s, above device_peak_tflops ({:.1f} GFLOP/s): MFU and HFU "
        "are fractions of that given peak and may exceed 100 %\n",
        step, rate / 1e9, flops_ / 1e9);
  }
  const double before = flops_, calibrated = calibrate_();
  flops_ = std::max({before, calibrated, rate});
  return fmt::format(
      "peak: step {} executed {:.1f} GFLOP/s, above the calibrated peak of {:.1f}: this machine's speed "
      "moved; calibrated again at {:.1f}, MFU and HFU now divide by {:.1f} GFLOP/s\n",
      step, rate / 1e9, before / 1e9, calibrated / 1e9, flops_ / 1e9);
}

}  // namespace tessera::train
