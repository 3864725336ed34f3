// Learning-rate schedules as MaxText builds them (maxtext_utils.create_learning_rate_schedule),
// evaluated at optimizer step s = 0, 1, ... (the update applied after the s-th batch):
//   warmup   s < W:            lr * s / W                       (W = int(S * warmup_steps_fraction))
//   cosine   W <= s < S:       lr_f + (lr - lr_f) * 0.5 * (1 + cos(pi * (s - W) / (S - W)))
//   wsd      W <= s < S - Dd:  lr;  then over the last Dd = int(S * wsd_decay_steps_fraction) steps
//                              a linear or cosine decay from lr to lr_f
//   s >= S:                    0 (S = learning_rate_schedule_steps, or `steps` when that is -1)
// with lr_f = lr * learning_rate_final_fraction.
#pragma once

#include <cstdint>
#include <string>

namespace tessera::train {

struct LrSchedule {
  std::string type = "cosine";  // "cosine" | "wsd"
  double lr = 3e-5;
  double final_fraction = 0.1;
  int64_t schedule_steps = 1;
  double warmup_fraction = 0.1;
  double wsd_decay_fraction = 0.1;
  std::string wsd_decay_style = "linear";  // "linear" | "cosine"

  double at(int64_t step) const;
};

}  // namespace tessera::train
