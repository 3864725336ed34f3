#include "tessera/train/schedule.h"

#include <cmath>
#include <numbers>

#include "tessera/core/error.h"

namespace tessera::train {

double LrSchedule::at(int64_t s) const {
  const int64_t S = schedule_steps;
  const int64_t W = static_cast<int64_t>(static_cast<double>(S) * warmup_fraction);
  const double lr_f = lr * final_fraction;
  if (type != "cosine" && type != "wsd")
    fail(ErrorKind::kConfig, "lr_schedule_type '{}' is not one of: cosine, wsd", type);
  if (s >= S) return 0.0;
  if (s < W) return lr * static_cast<double>(s) / static_cast<double>(W);
  const double pi = std::numbers::pi;
  if (type == "cosine") {
    double pct = static_cast<double>(s - W) / static_cast<double>(S - W);
    return lr_f + (lr - lr_f) * 0.5 * (1 + std::cos(pi * pct));
  }
  if (type == "wsd") {
    const int64_t decay = static_cast<int64_t>(static_cast<double>(S) * wsd_decay_fraction);
    const int64_t stable_end = S - decay;
    if (s < stable_end) return lr;
    double pct = static_cast<double>(s - stable_end) / static_cast<double>(decay);
    double a = wsd_decay_style == "cosine" ? 0.5 * (1 + std::cos(pi * pct)) : 1 - pct;
    return lr_f + (lr - lr_f) * a;
  }
  TESSERA_ASSERT(false);
}

}  // namespace tessera::train
